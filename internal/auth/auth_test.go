package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseAndAuthenticate(t *testing.T) {
	sum := sha256.Sum256([]byte("hashed-token-0123456789"))
	file := "# clients\nalice plain-token-0123456789\n\nbob sha256:" + hex.EncodeToString(sum[:]) + " admin\nprom scrape-token-0123456789 metrics\n"
	toks, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ token, tenant, role string }{
		{"plain-token-0123456789", "alice", RoleUser},
		{"hashed-token-0123456789", "bob", RoleAdmin},
		{"scrape-token-0123456789", "prom", RoleMetrics},
	} {
		tenant, role, ok := toks.Authenticate(c.token)
		if !ok || tenant != c.tenant || role != c.role {
			t.Errorf("Authenticate(%q) = %q %q %v, want %q %q", c.token, tenant, role, ok, c.tenant, c.role)
		}
	}
	for _, bad := range []string{"", "plain-token-012345678", "sha256:" + hex.EncodeToString(sum[:])} {
		if _, _, ok := toks.Authenticate(bad); ok {
			t.Errorf("Authenticate(%q) accepted", bad)
		}
	}
}

func TestParseRefusesBadLines(t *testing.T) {
	for _, file := range []string{
		"", "alice\n", "alice token-0123456789abc root\n", "alice short\n",
		"alice sha256:abcd\n", "a token-0123456789abc\na token-0123456789abd\n", "a b c d\n",
	} {
		if _, err := Parse(strings.NewReader(file)); err == nil {
			t.Errorf("Parse(%q) accepted", file)
		}
	}
}

func TestLoadRefusesReadableFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("alice token-0123456789abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("Load of a 0644 file: %v", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatal(err)
	}
}

func TestParseLimits(t *testing.T) {
	toks, err := Parse(strings.NewReader("carol carol-token-0123456789 user jobs=2 workspaces=1 toolsets=core,info\ndave dave-token-0123456789ab jobs=3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if j, w, ts := toks.Limits("carol"); j != 2 || w != 1 || strings.Join(ts, ",") != "core,info" {
		t.Fatalf("carol: %d %d %v", j, w, ts)
	}
	if _, role, ok := toks.Authenticate("dave-token-0123456789ab"); !ok || role != RoleUser {
		t.Fatalf("dave: %q %v (a limit in the role's place leaves the role user)", role, ok)
	}
	for _, bad := range []string{"x tok-0123456789abcdef jobs=0", "x tok-0123456789abcdef jobs=2 admin", "x tok-0123456789abcdef cpu=2", "x tok-0123456789abcdef toolsets="} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

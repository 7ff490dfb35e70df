package blocklist

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/store"
)

func openStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestListEditsOff(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "db"))
	l, err := New([]string{"rm"}, st, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Block(ctx, "curl", "", "x"); !errors.Is(err, ErrEditsOff) {
		t.Fatalf("Block with edits off: %v", err)
	}
	if err := l.Unblock(ctx, "rm"); !errors.Is(err, ErrEditsOff) {
		t.Fatalf("Unblock with edits off: %v", err)
	}
	if e := l.Entries(); len(e) != 1 || e[0].Command != "rm" || e[0].Source != SourcePolicy {
		t.Fatalf("entries changed: %+v", e)
	}
	if d, _ := l.Check("/bin/rm x"); d.Allowed {
		t.Fatal("policy entry not enforced")
	}
}

func TestListEditsOnPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	st := openStore(t, path)
	l, err := New([]string{"rm"}, st, true)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if isNew, err := l.Block(ctx, "curl", "no downloads", "test 1.0"); err != nil || !isNew {
		t.Fatalf("Block: %v %v", isNew, err)
	}
	if d, _ := l.Check("curl x"); d.Allowed || d.Rule.Source != SourceAgent || d.Rule.Reason != "no downloads" {
		t.Fatalf("agent entry not enforced: %+v", d)
	}
	if err := l.Unblock(ctx, "rm"); !errors.Is(err, ErrPolicyEntry) {
		t.Fatalf("Unblock policy entry: %v", err)
	}
	if _, err := l.Block(ctx, "rm", "", "x"); err == nil {
		t.Fatal("blocking a policy entry again was accepted")
	}
	if err := l.Unblock(ctx, "wget"); !errors.Is(err, ErrNotBlocked) {
		t.Fatalf("Unblock unknown: %v", err)
	}
	for _, bad := range []string{"", "/usr/bin/rm", "rm;ls", "-rf", strings.Repeat("a", 65), "r m"} {
		if _, err := l.Block(ctx, bad, "", "x"); !errors.Is(err, ErrBadName) {
			t.Errorf("Block(%q): %v", bad, err)
		}
	}
	if _, err := l.Block(ctx, "ok", "bad\x1b[31m", "x"); !errors.Is(err, ErrBadReason) {
		t.Errorf("control characters in reason: %v", err)
	}
	// A restart (a new List on the same database) keeps the agent's entry.
	st.Close()
	st2 := openStore(t, path)
	l2, err := New([]string{"rm"}, st2, true)
	if err != nil {
		t.Fatal(err)
	}
	es := l2.Entries()
	if len(es) != 2 || es[0].Command != "curl" || es[0].Source != SourceAgent || es[0].AddedBy != "test 1.0" || es[1].Source != SourcePolicy {
		t.Fatalf("after restart: %+v", es)
	}
	if err := l2.Unblock(ctx, "curl"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l2.Check("curl x"); !d.Allowed {
		t.Fatal("unblocked command still refused")
	}
}

func TestListRejectsBadPolicyNames(t *testing.T) {
	if _, err := New([]string{"/bin/rm"}, nil, false); err == nil {
		t.Fatal("a path was accepted as a policy entry")
	}
	var l *List
	if d, err := l.Check("rm x"); err != nil || !d.Allowed {
		t.Fatal("nil list must allow")
	}
}

package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRedact(t *testing.T) {
	for in, secret := range map[string]string{
		"GITHUB_TOKEN=abc123def curl x":                    "abc123def",
		"export API_KEY='s3cr3t value' && run":             "s3cr3t value",
		"mysql --password=hunter22 -u root":                "hunter22",
		"login --token hunter23":                           "hunter23",
		`curl -H "Authorization: Bearer eyJabc.def.ghi" x`: "eyJabc.def.ghi",
		"curl https://user:pa55word@example.com/x":         "pa55word",
		"echo ghp_abcdefghijklmnopqrstuvwxyz0123456789":    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
		"DB_PASSWORD: opensesame":                          "opensesame",
		"key=" + strings.Repeat("ab12", 12):                strings.Repeat("ab12", 12),
		"aws AKIAABCDEFGHIJKLMNOP":                         "AKIAABCDEFGHIJKLMNOP",
		"x " + strings.Repeat("QUJD", 12) + "== y":         strings.Repeat("QUJD", 12),
		"SECRET=\"quoted secret\"":                         "quoted secret",
	} {
		out := Redact(in)
		if strings.Contains(out, secret) {
			t.Errorf("Redact(%q) = %q: secret %q left", in, out, secret)
		}
		if !strings.Contains(out, "[REDACTED]") {
			t.Errorf("Redact(%q) = %q: no mark", in, out)
		}
	}
	for _, keep := range []string{"echo hello world", "ls -la /tmp", "rm -rf build && make", "grep -n key file.txt"} {
		if out := Redact(keep); out != keep {
			t.Errorf("Redact(%q) = %q; want unchanged", keep, out)
		}
	}
	if got := RedactValues("echo topsecretvalue ok", []string{"topsecretvalue", "ok"}); got != "echo [REDACTED] ok" {
		t.Errorf("RedactValues = %q", got)
	}
}

func TestLogWriteReadRotate(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, 2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour)
	for i := 0; i < 60; i++ {
		job := "job-a"
		if i%2 == 1 {
			job = "job-b"
		}
		if err := l.Write(Entry{Time: start.Add(time.Duration(i) * time.Minute), Tool: "run_command", JobID: job, Command: "TOKEN=xyz123 echo hi", Decision: Allowed, Outcome: "completed"}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	files, _ := filepath.Glob(filepath.Join(dir, FileName+"*"))
	if len(files) != 3 {
		t.Fatalf("files after rotation: %v (want audit.log, .1, .2)", files)
	}
	for _, f := range files {
		st, _ := os.Stat(f)
		if st.Size() > 2048 {
			t.Errorf("%s is %d bytes, over the 2048 cap", f, st.Size())
		}
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "xyz123") {
			t.Errorf("%s holds a secret", f)
		}
	}
	var all, onlyB, recent int
	var last time.Time
	Read(dir, Filter{}, func(e Entry, _ []byte) error {
		if e.Time.Before(last) {
			t.Errorf("out of order: %v after %v", e.Time, last)
		}
		last = e.Time
		all++
		return nil
	})
	Read(dir, Filter{JobID: "job-b"}, func(e Entry, _ []byte) error {
		if e.JobID != "job-b" {
			t.Errorf("filter let %q through", e.JobID)
		}
		onlyB++
		return nil
	})
	Read(dir, Filter{Since: start.Add(50 * time.Minute)}, func(e Entry, _ []byte) error { recent++; return nil })
	if all == 0 || all >= 60 || onlyB == 0 || onlyB >= all || recent != 10 {
		t.Fatalf("all=%d (some rotated away) onlyB=%d recent=%d (want 10)", all, onlyB, recent)
	}
	if err := Read(t.TempDir(), Filter{}, func(Entry, []byte) error { return nil }); err == nil {
		t.Fatal("reading a missing log did not say so")
	}
}

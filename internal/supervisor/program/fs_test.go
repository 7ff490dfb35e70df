package program

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

func fsCall(t *testing.T, stdin string, args ...string) (proto.FSResult, int) {
	t.Helper()
	var out bytes.Buffer
	code := fsMain(args, strings.NewReader(stdin), &out)
	var res proto.FSResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("fs %v: %q: %v", args, out.String(), err)
	}
	return res, code
}

func TestFSHelpers(t *testing.T) {
	root := t.TempDir()
	old := fsRoot
	fsRoot = root
	t.Cleanup(func() { fsRoot = old })
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("HOST SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	res, code := fsCall(t, "one\ntwo\nthree\n", "write", "a/b/c.txt", "0640", "0", "100")
	if code != 0 || res.Written != 14 || res.Mode != "0640" {
		t.Fatalf("write: %d %+v", code, res)
	}
	if res, code = fsCall(t, "four\n", "write", "a/b/c.txt", "-", "1", "100"); code != 0 || res.Size != 19 {
		t.Fatalf("append: %d %+v", code, res)
	}
	if res, code = fsCall(t, strings.Repeat("x", 101), "write", "big", "-", "0", "100"); code != 1 || res.ErrorKind != "too_large" {
		t.Fatalf("over the limit: %d %+v", code, res)
	}
	if _, err := os.Stat(filepath.Join(root, "big")); !os.IsNotExist(err) {
		t.Fatalf("a refused write made the file: %v", err)
	}
	if res, _ = fsCall(t, "", "read", "a/b/c.txt", "0", "0", "100"); string(res.Content) != "one\ntwo\nthree\nfour\n" || res.Size != 19 {
		t.Fatalf("read: %+v", res)
	}
	if res, _ = fsCall(t, "", "read", "a/b/c.txt", "0", "0", "5"); string(res.Content) != "one\nt" || !res.Truncated {
		t.Fatalf("read capped: %+v", res)
	}
	if res, _ = fsCall(t, "", "read", "a/b/c.txt", "2", "2", "100"); string(res.Content) != "two\nthree\n" || res.Lines != 2 || !res.MoreLines || res.FirstLine != 2 {
		t.Fatalf("read lines 2-3: %+v", res)
	}
	if res, _ = fsCall(t, "", "read", "a/b/c.txt", "4", "9", "100"); string(res.Content) != "four\n" || res.Lines != 1 || res.MoreLines {
		t.Fatalf("read from line 4: %+v", res)
	}

	// Symbolic links are refused wherever they are in the path.
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(root, "dirlink")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"read", "link", "0", "0", "100"},
		{"read", "dirlink/secret", "0", "0", "100"},
		{"write", "link", "-", "0", "100"},
		{"write", "dirlink/new", "-", "0", "100"},
		{"write", "dirlink/sub/new", "-", "0", "100"},
		{"list", "dirlink", "0", "-", "10"},
	} {
		res, code := fsCall(t, "PWNED", args...)
		if code != 1 || res.ErrorKind != "symlink" || strings.Contains(string(res.Content), "SECRET") {
			t.Fatalf("fs %v through a symlink: %d %+v", args, code, res)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "HOST SECRET\n" {
		t.Fatalf("outside file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(outside), "new")); !os.IsNotExist(err) {
		t.Fatalf("a write through a link made a file outside: %v", err)
	}
	for _, p := range []string{"../x", "a/../../x", "/etc/passwd", ""} {
		if res, code := fsCall(t, "", "read", p, "0", "0", "100"); code != 1 || res.ErrorKind != "escape" {
			t.Fatalf("read %q: %d %+v", p, code, res)
		}
	}
	if res, code = fsCall(t, "", "read", "a", "0", "0", "100"); code != 1 || res.ErrorKind != "is_dir" {
		t.Fatalf("read a directory: %d %+v", code, res)
	}

	res, code = fsCall(t, "", "list", ".", "1", "-", "100")
	var got []string
	for _, e := range res.Entries {
		got = append(got, e.Path+":"+e.Type)
	}
	if code != 0 || strings.Join(got, " ") != "a:dir dirlink:symlink link:symlink a/b:dir a/b/c.txt:file" {
		t.Fatalf("list: %d %v", code, got)
	}
	if res.Entries[2].Target != outside {
		t.Fatalf("symlink target: %+v", res.Entries[2])
	}
	res, _ = fsCall(t, "", "list", ".", "1", "*.txt", "100")
	if len(res.Entries) != 1 || res.Entries[0].Size != 19 || res.Entries[0].Mode != "0640" {
		t.Fatalf("list *.txt: %+v", res)
	}
	if res, _ = fsCall(t, "", "list", ".", "1", "-", "2"); len(res.Entries) != 2 || !res.Truncated {
		t.Fatalf("list bounded: %+v", res)
	}
}

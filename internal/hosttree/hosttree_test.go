package hosttree

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// tree makes a directory with a file, a subdirectory, a link out of the
// tree and a FIFO.
func tree(t *testing.T) (dir, outside string) {
	t.Helper()
	dir, out := t.TempDir(), t.TempDir()
	outside = filepath.Join(out, "secret")
	must(t, os.WriteFile(outside, []byte("SECRET"), 0o644))
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "sub", "a.txt"), []byte("hello\n"), 0o640))
	must(t, os.Symlink(outside, filepath.Join(dir, "link")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644))
	must(t, os.Chmod(dir, 0o755))
	return dir, outside
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestScan(t *testing.T) {
	dir, _ := tree(t)
	var res proto.ScanResult
	must(t, Scan(dir, &res, nil))
	if res.Files != 1 || res.Dirs != 2 || res.Links != 1 || res.Bytes != 6 || res.SpecialCount != 1 ||
		len(res.Special) != 1 || res.Special[0].Path != "pipe" || res.Special[0].Type != "fifo" || res.Special[0].Reason == "" {
		t.Fatalf("scan: %+v", res)
	}
}

// ReadableBy finds what the sandbox user could not read: a file of another
// owner without read bits for others, a directory it cannot search; the
// scan lists each as unreadable, and WriteTar leaves its bytes out
// (THREATS 107).
func TestReadableBy(t *testing.T) {
	dir, _ := tree(t)
	st, err := os.Stat(filepath.Join(dir, "sub", "a.txt"))
	must(t, err)
	owner := st.Sys().(*syscall.Stat_t)
	var res proto.ScanResult
	// The owner (whoever runs the test) may read its 0640 file.
	must(t, Scan(dir, &res, ReadableBy(owner.Uid, owner.Gid)))
	// Another user may not (0640, other bits empty): listed, not read.
	other := ReadableBy(owner.Uid+4242, owner.Gid+4242)
	res = proto.ScanResult{}
	must(t, Scan(dir, &res, other))
	if !hasSkipped(res.Special, "sub/a.txt", "unreadable") || res.Files != 0 {
		t.Fatalf("another user's scan: %+v", res)
	}
	root, err := os.OpenRoot(dir)
	must(t, err)
	defer root.Close()
	var buf bytes.Buffer
	var skipped []proto.SpecialFile
	must(t, WriteTar(tar.NewWriter(&buf), root, "", 1000, 1000, 0, other, func(f proto.SpecialFile) { skipped = append(skipped, f) }))
	if strings.Contains(buf.String(), "a.txt") || !hasSkipped(skipped, "sub/a.txt", "unreadable") {
		t.Fatalf("the copy for another user holds the file it may not read, or does not list it: %+v", skipped)
	}
	must(t, os.Chmod(filepath.Join(dir, "sub", "a.txt"), 0o644))
	must(t, os.Chmod(filepath.Join(dir, "sub"), 0o700))
	res = proto.ScanResult{}
	must(t, Scan(dir, &res, other))
	if !hasSkipped(res.Special, "sub", "unreadable") {
		t.Fatalf("a directory another user cannot search: %+v", res)
	}
}

func hasSkipped(list []proto.SpecialFile, p, kind string) bool {
	for _, f := range list {
		if f.Path == p && f.Type == kind && f.Reason != "" {
			return true
		}
	}
	return false
}

// WriteTar copies links as links (never what they point at), leaves the
// FIFO out, keeps modes, owns everything by the given user, and stops past
// its limit.
func TestWriteTar(t *testing.T) {
	dir, outside := tree(t)
	root, err := os.OpenRoot(dir)
	must(t, err)
	defer root.Close()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, WriteTar(tw, root, "proj", 1000, 1000, 0, nil, nil))
	must(t, tw.Close())
	tr := tar.NewReader(&buf)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		must(t, err)
		names = append(names, h.Name)
		if h.Uid != 1000 || h.Gid != 1000 {
			t.Fatalf("%s owned by %d:%d", h.Name, h.Uid, h.Gid)
		}
		switch h.Name {
		case "proj/link":
			if h.Typeflag != tar.TypeSymlink || h.Linkname != outside {
				t.Fatalf("the link: %+v", h)
			}
		case "proj/sub/a.txt":
			b, _ := io.ReadAll(tr)
			if h.Mode != 0o640 || string(b) != "hello\n" {
				t.Fatalf("the file: mode %o content %q", h.Mode, b)
			}
		}
	}
	sort.Strings(names)
	if got := strings.Join(names, " "); got != "proj/ proj/link proj/sub/ proj/sub/a.txt" {
		t.Fatalf("entries: %s", got)
	}
	if strings.Contains(buf.String(), "SECRET") {
		t.Fatal("the link was followed")
	}
	err = WriteTar(tar.NewWriter(io.Discard), root, "", 1000, 1000, 3, nil, nil)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the limit: %v", err)
	}
}

func TestChangesAgainstABaseline(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) {
		os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	write("same.txt", "same\n")
	write("edited.txt", "new\n")
	write("added.bin", "\x00bin")
	write(".cache/go-build/x", "cache")
	os.Symlink("/etc/shadow", filepath.Join(root, "link"))
	syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644)
	got, err := Changes(root, proto.ChangesRequest{
		Baseline: []proto.BaselineEntry{
			{Path: "same.txt", Type: "file", Mode: 0o644, SHA256: sum("same\n")},
			{Path: "edited.txt", Type: "file", Mode: 0o644, SHA256: sum("old\n")},
			{Path: "gone.txt", Type: "file", Mode: 0o644, SHA256: sum("gone\n")},
			{Path: "link", Type: "symlink", Target: "/etc/shadow"},
		},
		Exclude: []string{".cache/go-build"}, MaxFileBytes: 1 << 20, MaxTotalBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"edited.txt": "modified", "added.bin": "added", "gone.txt": "deleted"}
	if len(got) != len(want) {
		t.Fatalf("changes: %+v", got)
	}
	for _, c := range got {
		if want[c.Path] != c.Change {
			t.Fatalf("change %+v, want %s", c, want[c.Path])
		}
		if c.Path == "edited.txt" && string(c.Content) != "new\n" {
			t.Fatalf("edited content %q", c.Content)
		}
		if c.Path == "added.bin" && (!c.Binary || string(c.Content) != "\x00bin") {
			t.Fatalf("binary file not sent as it is: %+v", c)
		}
	}
}

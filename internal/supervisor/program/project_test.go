package program

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

func TestScanSumsAndListsSpecials(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "a"), make([]byte, 1000), 0o644)
	syscall.Mkfifo(filepath.Join(root, "p"), 0o644)
	os.Symlink("a", filepath.Join(root, "l"))
	var res proto.ScanResult
	if err := scan(root, &res); err != nil {
		t.Fatal(err)
	}
	if res.Files != 1 || res.Bytes != 1000 || res.Links != 1 || res.SpecialCount != 1 || res.Special[0].Type != "fifo" {
		t.Fatalf("scan: %+v", res)
	}
}

// TestTarUntarKeepsLinksAndStaysInside (THREATS 107): tar as the reader
// leaves out what it cannot read and lists it; untar makes a link leaving
// the tree as a link, never writes through a link or outside its
// directory, and fills a read-only directory.
func TestTarUntarKeepsLinksAndStaysInside(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "ro"), 0o755)
	os.WriteFile(filepath.Join(src, "ro", "f"), []byte("in a read-only dir\n"), 0o644)
	os.Chmod(filepath.Join(src, "ro"), 0o555)
	defer os.Chmod(filepath.Join(src, "ro"), 0o755)
	os.Symlink("../shared/x", filepath.Join(src, "out-link"))
	os.WriteFile(filepath.Join(src, "secret"), []byte("root only"), 0o000)
	syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644)
	var stream, errb bytes.Buffer
	if code := tarMain([]string{src}, &stream, &errb); code != 0 {
		t.Fatalf("tar: %d %s", code, errb.String())
	}
	var tres proto.TarResult
	if err := json.Unmarshal(errb.Bytes(), &tres); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 && (strings.Contains(stream.String(), "root only") || !strings.Contains(errb.String(), `"secret"`)) {
		t.Fatalf("tar as a user who may not read secret: %s", errb.String())
	}
	if !strings.Contains(errb.String(), `"fifo"`) {
		t.Fatalf("the fifo is not listed: %s", errb.String())
	}
	dst := t.TempDir()
	var out bytes.Buffer
	if code := untarMain([]string{dst}, &stream, &out); code != 0 {
		t.Fatalf("untar: %s", out.String())
	}
	if target, err := os.Readlink(filepath.Join(dst, "out-link")); err != nil || target != "../shared/x" {
		t.Fatalf("the link leaving the tree: %q %v", target, err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "ro", "f")); err != nil || string(b) != "in a read-only dir\n" {
		t.Fatalf("the file in a read-only dir: %q %v", b, err)
	}
	if st, _ := os.Stat(filepath.Join(dst, "ro")); st.Mode().Perm() != 0o755 && st.Mode().Perm() != 0o555|0o700 {
		t.Fatalf("the read-only dir's mode: %v", st.Mode())
	}
	// A stream that writes through a link, or out of the tree, is refused.
	outside := t.TempDir()
	for _, entries := range [][]*tar.Header{
		{{Name: "l", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "l/pwned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}},
		{{Name: "../pwned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}},
	} {
		var evil bytes.Buffer
		tw := tar.NewWriter(&evil)
		for _, h := range entries {
			tw.WriteHeader(h)
			if h.Size > 0 {
				tw.Write([]byte("x"))
			}
		}
		tw.Close()
		var res bytes.Buffer
		if code := untarMain([]string{t.TempDir()}, &evil, &res); code == 0 {
			t.Fatalf("untar of %s: exit 0 (%s)", entries[len(entries)-1].Name, res.String())
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("untar wrote outside its tree: %v", entries)
	}
}

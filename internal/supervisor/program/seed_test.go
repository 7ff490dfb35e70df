package program

import (
	"os"
	"path/filepath"
	"testing"
)

// seedWorkdir copies a template's files into an empty directory (links as
// links), leaves a directory with files alone, and is a no-op without a
// seed directory.
func TestSeedWorkdir(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "a", "f.txt"), []byte("seeded"), 0o640)
	os.Symlink("/etc/passwd", filepath.Join(src, "link"))
	n, err := seedWorkdir(src, dst)
	if err != nil || n != 6 {
		t.Fatalf("seed: %d bytes, %v", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a", "f.txt")); string(b) != "seeded" {
		t.Errorf("file: %q", b)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "a", "f.txt")); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode())
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "/etc/passwd" {
		t.Errorf("link: %q %v", target, err)
	}
	// Not empty now: a second seed copies nothing.
	os.WriteFile(filepath.Join(src, "a", "f.txt"), []byte("changed"), 0o640)
	if n, err := seedWorkdir(src, dst); n != 0 || err != nil {
		t.Errorf("seeded a directory with files: %d %v", n, err)
	}
	if n, err := seedWorkdir(filepath.Join(src, "none"), t.TempDir()); n != 0 || err != nil {
		t.Errorf("no seed directory: %d %v", n, err)
	}
}

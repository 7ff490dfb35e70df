package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

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
	got, err := changes(root, proto.ChangesRequest{
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
		if c.Path == "added.bin" && (!c.Binary || c.Content != nil) {
			t.Fatalf("binary file sent: %+v", c)
		}
	}
}

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

package main

import (
	"os"
	"path/filepath"
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

package program

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

func TestGoCommandArgs(t *testing.T) {
	for in, want := range map[string]string{
		"go\x00test\x00-count=1\x00./...\x00":    "test -count=1 ./...",
		"/usr/local/go/bin/go\x00build\x00.\x00": "build .",
		"go\x00vet\x00":                          "vet",
		"go\x00run\x00.\x00":                     "",
		"go\x00list\x00-export\x00":              "",
		"gopls\x00test\x00":                      "",
		"go\x00":                                 "",
	} {
		if got := strings.Join(goCommandArgs([]byte(in)), " "); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// TestCollectGoBuilds drives the real go command with the supervisor as its
// GOCACHEPROG and GoBuildsEnv set: the command is recorded with its
// directory, and the collection sends the module (from go.mod's directory
// up) without .git, links or special files, the same bytes each time.
func TestCollectGoBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go code")
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	mod := t.TempDir()
	writeTree(t, mod, map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n", "a.go": "package m\n\nfunc A() int { return 1 }\n",
		"sub/b.go": "package sub\n", "sub/b_test.go": "package sub\n\nimport \"testing\"\n\nfunc TestB(t *testing.T) {}\n",
		".git/config": "secret", "cache/00/x-d": "a cache in the module",
	})
	if err := os.Symlink("/etc/passwd", filepath.Join(mod, "passwd")); err != nil {
		t.Fatal(err)
	}
	records := filepath.Join(t.TempDir(), "builds")
	env := []string{"GOCACHE=" + t.TempDir(), "GOCACHEPROG=" + supBin + " " + goCacheProgCommand, proto.GoBuildsEnv + "=" + records}
	goIn(t, goBin, filepath.Join(mod, "sub"), env, "test", "-count=1", "./...")
	goIn(t, goBin, filepath.Join(mod, "sub"), env, "test", "-count=1", "./...")
	goIn(t, goBin, mod, env, "list", ".") // not a build: not recorded

	var events []string
	builds := collectGoBuilds(records, []string{filepath.Join(mod, "cache")}, &events)
	if len(builds) != 1 {
		t.Fatalf("%d builds (%v), want the one test twice made one", len(builds), events)
	}
	b := builds[0]
	if b.Root != mod || b.Dir != filepath.Join(mod, "sub") || strings.Join(b.Args, " ") != "test -count=1 ./..." {
		t.Errorf("build %q in %q of %q", b.Args, b.Dir, b.Root)
	}
	var names []string
	zr, err := gzip.NewReader(bytes.NewReader(b.Source))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	want := []string{"a.go", "go.mod", "sub/", "sub/b.go", "sub/b_test.go"}
	if !slices.Equal(names, want) {
		t.Errorf("source holds %q, want %q", names, want)
	}
	again := collectGoBuilds(records, []string{filepath.Join(mod, "cache")}, &events)
	if len(again) != 1 || !bytes.Equal(again[0].Source, b.Source) {
		t.Error("the same module gave other bytes")
	}

	// A file that is not regular (a FIFO a job left there) is not read.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := collectGoBuilds(fifo, nil, &events); got != nil {
		t.Errorf("a FIFO gave %d builds", len(got))
	}
}

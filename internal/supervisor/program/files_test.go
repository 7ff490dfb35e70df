package program

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

func TestJobFilesWrittenBeforeStart(t *testing.T) {
	base := filepath.Join(t.TempDir(), "roots.pem")
	os.WriteFile(base, []byte("ROOTS\n"), 0o644)
	dir := proto.FilesDir + "test-" + marker(1)
	t.Cleanup(func() { os.RemoveAll(dir) })
	// A link an earlier job left where a file goes is replaced, not followed.
	os.MkdirAll(dir, 0o700)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, dir+"/bundle.pem")

	s := spec("sh", "-c", "cat "+dir+"/ca.pem; cat "+dir+"/bundle.pem")
	s.Files = []proto.File{
		{Path: dir + "/ca.pem", Content: []byte("CA\n")},
		{Path: dir + "/bundle.pem", Base: base, Content: []byte("CA\n")},
		{Path: dir + "/none-base.pem", Base: "/nonexistent/roots", Content: []byte("x")},
	}
	c, e := runJob(t, s, 10*time.Second)
	if e.ExitCode != 0 || c.stdout.String() != "CA\nROOTS\nCA\n" {
		t.Fatalf("exit %+v, stdout %q, stderr %q", e, c.stdout.String(), c.stderr.String())
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("a write followed a link: %q", b)
	}

	bad := spec("true")
	for _, p := range []string{"/etc/passwd", proto.FilesDir + "../x", "relative"} {
		bad.Files = []proto.File{{Path: p}}
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "not a clean path under") {
			t.Errorf("file %q: %v", p, err)
		}
	}
}

package baseline

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type entry struct {
	name, body, link string
	typ              byte
}

func archive(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link, ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return &b
}

func TestBuildKeepsLinksAsLinksAndSkipsSpecials(t *testing.T) {
	s := New(t.TempDir())
	var copied bytes.Buffer
	p, err := s.Build(archive(t,
		entry{name: "./", typ: tar.TypeDir},
		entry{name: "./a.txt", body: "hello\n", typ: tar.TypeReg},
		entry{name: "./hard", link: "./a.txt", typ: tar.TypeLink},
		entry{name: "./evil", link: "/etc/shadow", typ: tar.TypeSymlink},
		entry{name: "./pipe", typ: tar.TypeFifo},
		entry{name: "./dev", typ: tar.TypeChar},
	), "proj", 1<<20, &TarCopy{W: &copied, UID: 1000, GID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Commit("ws"); err != nil {
		t.Fatal(err)
	}
	m, err := s.Load("ws")
	if err != nil || m == nil {
		t.Fatalf("load: %v %v", m, err)
	}
	if len(m.Entries) != 3 || len(m.Skipped) != 2 || m.Source != "proj" || m.Bytes != 12 {
		t.Fatalf("manifest: %+v", m)
	}
	for _, e := range m.Entries {
		if e.Path == "evil" && (e.Type != "symlink" || e.Target != "/etc/shadow") {
			t.Fatalf("the link: %+v", e)
		}
		if e.Path == "hard" {
			if b, err := s.Blob("ws", e.SHA256); err != nil || string(b) != "hello\n" {
				t.Fatalf("the hard link's content: %q %v", b, err)
			}
		}
	}
	// Object names are hashes: nothing else lands on the host.
	objs, _ := os.ReadDir(filepath.Join(s.dir, "ws", "objects"))
	if len(objs) != 1 || len(objs[0].Name()) != 64 {
		t.Fatalf("objects: %v", objs)
	}
	// The tar written back holds the same tree, owned by uid 1000.
	var out bytes.Buffer
	if err := (&Pending{Manifest: *m, s: s, dir: s.wsDir("ws")}).WriteTar(&out, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 1000 || h.Gid != 1000 || h.ModTime.Unix() != 1700000000 {
			t.Fatalf("header %+v", h)
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "a.txt,hard,evil" {
		t.Fatalf("written back: %v", names)
	}
	// The copy made while building is the same tree.
	var again bytes.Buffer
	(&Pending{Manifest: *m, s: s, dir: s.wsDir("ws")}).WriteTar(&again, 1000, 1000)
	if !bytes.Equal(copied.Bytes(), again.Bytes()) {
		t.Fatalf("the copy made while building differs from WriteTar's (%d vs %d bytes)", copied.Len(), again.Len())
	}
	// A fork's copy, then removal of the original, leaves the copy whole.
	if err := s.Copy("ws", "fork"); err != nil {
		t.Fatal(err)
	}
	s.Remove("ws")
	if m2, err := s.Load("fork"); err != nil || m2 == nil || len(m2.Entries) != 3 {
		t.Fatalf("fork's baseline: %v %v", m2, err)
	}
}

func TestBuildRefuses(t *testing.T) {
	s := New(t.TempDir())
	_, err := s.Build(archive(t, entry{name: "../escape", body: "x", typ: tar.TypeReg}), "p", 1<<20, nil)
	if err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("a path leaving the tree: %v", err)
	}
	_, err = s.Build(archive(t, entry{name: "big", body: strings.Repeat("x", 2048), typ: tar.TypeReg}), "p", 1024, nil)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the limit: %v", err)
	}
	left, _ := os.ReadDir(s.dir)
	if len(left) != 0 {
		t.Fatalf("a refused build left %v", left)
	}
	if _, err := s.Blob("x", "../../etc/passwd"); err == nil {
		t.Fatal("Blob took a path for a hash")
	}
}

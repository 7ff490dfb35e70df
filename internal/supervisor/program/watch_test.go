package program

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// watchRun starts a watch of rel and returns its events and its stop.
func watchRun(t *testing.T, rel string) (<-chan proto.WatchEvent, func() int) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- watchMain([]string{rel}, inR, outW)
		outW.Close()
	}()
	events := make(chan proto.WatchEvent, 64)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var ev proto.WatchEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("watch wrote %q: %v", sc.Text(), err)
				return
			}
			events <- ev
		}
	}()
	return events, func() int {
		inW.Close()
		select {
		case c := <-code:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("the watch did not end when its stdin closed")
			return -1
		}
	}
}

func nextEvent(t *testing.T, events <-chan proto.WatchEvent) proto.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event from the watch")
	}
	return proto.WatchEvent{}
}

// TestWatch follows a directory (new subdirectories too) and a file
// replaced by a rename; refuses a symbolic link and a path out of the root;
// ends when its stdin closes.
func TestWatch(t *testing.T) {
	root := t.TempDir()
	old := fsRoot
	fsRoot = root
	t.Cleanup(func() { fsRoot = old })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "src/deep"), 0o755))
	must(os.WriteFile(filepath.Join(root, "notes.txt"), []byte("a"), 0o644))
	must(os.Symlink("/etc", filepath.Join(root, "link")))

	events, stop := watchRun(t, "src")
	if ev := nextEvent(t, events); !ev.Ready {
		t.Fatalf("first event %+v, want ready", ev)
	}
	must(os.WriteFile(filepath.Join(root, "src/deep/a.go"), []byte("package a"), 0o644))
	if ev := nextEvent(t, events); !slices.Contains(ev.Paths, "src/deep/a.go") {
		t.Errorf("a file written in a subdirectory: %+v", ev)
	}
	must(os.Mkdir(filepath.Join(root, "src/new"), 0o755))
	time.Sleep(300 * time.Millisecond) // the new directory's event first
	nextEvent(t, events)
	must(os.WriteFile(filepath.Join(root, "src/new/b.go"), []byte("package b"), 0o644))
	if ev := nextEvent(t, events); !slices.Contains(ev.Paths, "src/new/b.go") {
		t.Errorf("a file in a directory made after the watch began: %+v", ev)
	}
	if code := stop(); code != 0 {
		t.Errorf("watch exit %d after its stdin closed", code)
	}

	events, stop = watchRun(t, "notes.txt")
	nextEvent(t, events)
	must(os.WriteFile(filepath.Join(root, "other.txt"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(root, "notes.tmp"), []byte("b"), 0o644))
	must(os.Rename(filepath.Join(root, "notes.tmp"), filepath.Join(root, "notes.txt")))
	if ev := nextEvent(t, events); !slices.Equal(ev.Paths, []string{"notes.txt"}) {
		t.Errorf("a file replaced by a rename: %+v, want only notes.txt", ev)
	}
	must(os.WriteFile(filepath.Join(root, "notes.txt"), []byte("c"), 0o644))
	if ev := nextEvent(t, events); !slices.Equal(ev.Paths, []string{"notes.txt"}) {
		t.Errorf("the replaced file written again: %+v", ev)
	}
	stop()

	for rel, kind := range map[string]string{"link": "symlink", "../x": "escape", "missing": "not_found"} {
		events, stop := watchRun(t, rel)
		if ev := nextEvent(t, events); ev.ErrorKind != kind {
			t.Errorf("watch %s: %+v, want error kind %s", rel, ev, kind)
		}
		stop()
	}
}

package containerd

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFollowerGivesBackWhatItRead: a follower reads a file as it grows,
// ends once its writer is done and the file is read, and punches out what
// it read past keep bytes (the file's first data moves on; its size stays).
// A second follower joins where the data still is.
func TestFollowerGivesBackWhatItRead(t *testing.T) {
	w, err := newWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	r := &Runtime{watch: w}
	d := ioDir(filepath.Join(t.TempDir(), "io"))
	if err := d.make(); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(d.path(stdoutName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	end := make(chan struct{})
	f, joined, err := r.follow(d, stdoutName, end)
	if err != nil || joined != 0 {
		t.Fatalf("follow: %v at %d", err, joined)
	}
	const keep = 64 << 10
	f.keep = keep
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	go func() {
		for i := 0; i < 8; i++ {
			out.Write(chunk)
			time.Sleep(5 * time.Millisecond)
		}
		close(end)
	}()
	got, err := io.ReadAll(f)
	if err != nil || len(got) != 8*len(chunk) || !bytes.Equal(got[:len(chunk)], chunk) {
		t.Fatalf("read %d bytes (%v), want %d", len(got), err, 8*len(chunk))
	}
	f.Close()
	probe, err := os.Open(d.path(stdoutName))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	first, err := unix.Seek(int(probe.Fd()), 0, unix.SEEK_DATA)
	if err != nil || first < int64(len(got))-2*keep || first > int64(len(got))-keep {
		t.Fatalf("the file's first data is at %d (%v): want what was read given back but the last %d–%d bytes", first, err, keep, 2*keep)
	}
	if st, _ := probe.Stat(); st.Size() != int64(len(got)) {
		t.Fatalf("size %d, want %d (holes keep the offsets)", st.Size(), len(got))
	}
	closed := make(chan struct{})
	close(closed)
	g, joined, err := r.follow(d, stdoutName, closed)
	if err != nil || joined != first {
		t.Fatalf("a second follower joined at %d (%v), want %d", joined, err, first)
	}
	rest, _ := io.ReadAll(g)
	g.Close()
	if int64(len(rest)) != int64(len(got))-first {
		t.Fatalf("the second follower read %d bytes, want %d", len(rest), int64(len(got))-first)
	}
}

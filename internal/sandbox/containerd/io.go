package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"github.com/containerd/containerd/v2/pkg/cio"
	"golang.org/x/sys/unix"
)

// A sandbox's standard streams live in a directory of its own under the
// runtime's IO root: stdin is a FIFO the server writes frames into; stdout
// and stderr are plain files the shim appends to (containerd's runc shim
// takes a path that is not a FIFO as a file to append to). Files, not
// FIFOs, for the output: the shim keeps writing while no server reads, and
// a second reader (a restarted server adopting the job) reads it back from
// the start, as Docker's engine log allows.
const (
	stdinName  = "stdin"
	stdoutName = "stdout"
	stderrName = "stderr"
)

// ioDir is one sandbox's stream directory.
type ioDir string

func (r *Runtime) ioDirOf(id string) ioDir { return ioDir(filepath.Join(r.ioRoot, id)) }

func (d ioDir) path(name string) string { return filepath.Join(string(d), name) }

// make creates the directory, the stdin FIFO and the empty output files.
func (d ioDir) make() error {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return fmt.Errorf("make the sandbox's stream directory: %w", err)
	}
	if err := unix.Mkfifo(d.path(stdinName), 0o600); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make the sandbox's stdin: %w", err)
	}
	for _, name := range []string{stdoutName, stderrName} {
		f, err := os.OpenFile(d.path(name), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("make the sandbox's %s: %w", name, err)
		}
		f.Close()
	}
	return nil
}

func (d ioDir) remove() error { return os.RemoveAll(string(d)) }

// config is what the task is created with.
func (d ioDir) config() cio.Config {
	return cio.Config{Stdin: d.path(stdinName), Stdout: d.path(stdoutName), Stderr: d.path(stderrName)}
}

// openStdin opens the stdin FIFO for writing without waiting for the shim:
// read-write, so there is always a writer and the shim never sees an end
// before this server closes it (then, as with Docker's StdinOnce, the
// supervisor's input ends and the job goes on).
func (d ioDir) openStdin() (*os.File, error) {
	f, err := os.OpenFile(d.path(stdinName), os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's stdin: %w", err)
	}
	return f, nil
}

// fileIO is the cio.IO of a task whose streams are an ioDir: containerd
// only passes the paths on; this process reads and writes them itself.
type fileIO struct{ d ioDir }

func (f fileIO) Config() cio.Config { return f.d.config() }
func (fileIO) Cancel()              {}
func (fileIO) Wait()                {}
func (fileIO) Close() error         { return nil }

func (d ioDir) creator() cio.Creator {
	return func(string) (cio.IO, error) { return fileIO{d}, nil }
}

// follower reads a file the shim appends to, like `tail -f`: at its end it
// waits for the watcher to say the file grew, until end says the writer is
// done; then it reads what is left and ends.
type follower struct {
	f     *os.File
	wake  <-chan struct{}
	end   <-chan struct{}
	close func()
	// keep bounds the file: once more than keep bytes have been read, what
	// was read is given back to the filesystem (a hole), so a job that
	// prints without end does not fill the host's memory.
	keep, read, punched int64
}

// settle is how long a follower waits for the last bytes once its writer
// is done (the shim copies the final output after the process ended).
const settle = 50 * time.Millisecond

func (f *follower) Read(p []byte) (int, error) {
	ended := false
	for {
		n, err := f.f.Read(p)
		if n > 0 {
			f.read += int64(n)
			f.giveBack()
			return n, nil
		}
		if err != nil && err != io.EOF {
			return 0, err
		}
		if ended {
			return 0, io.EOF
		}
		select {
		case <-f.wake:
		case <-f.end:
			// The writer is done: one more read after a moment gets what it
			// wrote last.
			time.Sleep(settle)
			ended = true
		}
	}
}

// giveBack punches out what was read, past keep bytes.
func (f *follower) giveBack() {
	if f.keep <= 0 || f.read-f.punched < 2*f.keep {
		return
	}
	upTo := (f.read - f.keep) &^ 4095
	if upTo <= f.punched {
		return
	}
	if unix.Fallocate(int(f.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, f.punched, upTo-f.punched) == nil {
		f.punched = upTo
	}
}

func (f *follower) Close() error {
	f.close()
	return f.f.Close()
}

// follow opens name in d for following from its first byte that holds data
// (past holes punched by an earlier reader): joinedAt says where that is.
func (r *Runtime) follow(d ioDir, name string, end <-chan struct{}) (fl *follower, joinedAt int64, err error) {
	// Read-write: punching a hole needs it. Only read here otherwise.
	f, err := os.OpenFile(d.path(name), os.O_RDWR, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("open the sandbox's %s: %w", name, err)
	}
	if off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA); err == nil && off > 0 {
		joinedAt = off
	} else if err != nil && !errors.Is(err, unix.ENXIO) {
		f.Close()
		return nil, 0, fmt.Errorf("seek the sandbox's %s: %w", name, err)
	} else if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, 0, err
	}
	wake, stop, err := r.watch.add(d.path(name))
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return &follower{f: f, wake: wake, end: end, close: stop, read: joinedAt, punched: joinedAt}, joinedAt, nil
}

// watcher tells followers when their files grew: one inotify instance for
// the runtime, read by one goroutine.
type watcher struct {
	f    *os.File // non-blocking: reads wait in Go's poller, and Close ends them
	fd   int
	mu   sync.Mutex
	subs map[int32][]chan struct{} // watch descriptor -> followers' wake channels
}

func newWatcher() (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &watcher{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, subs: map[int32][]chan struct{}{}}
	go w.run()
	return w, nil
}

// add watches path for writes; stop ends the watch of this follower.
func (w *watcher) add(path string) (wake <-chan struct{}, stop func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, err := unix.InotifyAddWatch(w.fd, path, unix.IN_MODIFY|unix.IN_CLOSE_WRITE|unix.IN_DELETE_SELF)
	if err != nil {
		return nil, nil, fmt.Errorf("watch %s: %w", path, err)
	}
	ch := make(chan struct{}, 1)
	w.subs[int32(wd)] = append(w.subs[int32(wd)], ch)
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			subs := w.subs[int32(wd)]
			for i, c := range subs {
				if c == ch {
					subs = append(subs[:i], subs[i+1:]...)
					break
				}
			}
			if len(subs) == 0 {
				delete(w.subs, int32(wd))
				_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
				return
			}
			w.subs[int32(wd)] = subs
		})
	}, nil
}

func (w *watcher) run() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return // closed
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			for _, ch := range w.subs[ev.Wd] {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
		w.mu.Unlock()
	}
}

func (w *watcher) close() { _ = w.f.Close() }

// waitCtx is a context for calls made after the caller's is gone.
func waitCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), cleanupTimeout)
}

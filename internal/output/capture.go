// Package output captures a job's stdout and stderr as they are produced: a
// bounded in-memory ring for fast reads of recent output plus append-only
// on-disk logs (capped per job) that can be read by byte cursor, also after a
// server restart. Bytes past a cap are counted, never silently lost.
package output

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// File names inside a capture directory, indexed like Selector (Both,
// StdoutOnly, StderrOnly).
var fileNames = [3]string{"combined.log", "stdout.log", "stderr.log"}

// Sizes is a snapshot of a capture's byte counters.
type Sizes struct {
	Stdout, Stderr, Combined int64 // bytes stored in stdout.log, stderr.log, combined.log
	// DroppedStdout and DroppedStderr count bytes of each stream that were seen
	// but not stored in that stream's own file (past the cap, or lost to an I/O error).
	DroppedStdout, DroppedStderr int64
	// DroppedCombined counts bytes seen but not stored in combined.log. It is
	// Total-Combined, so it stays consistent after SetDropped on resume.
	DroppedCombined int64
	// Total is every byte seen from both streams.
	Total int64
}

// Capture is one job's output, stored in a directory holding stdout.log,
// stderr.log and combined.log (both streams interleaved in arrival order).
//
// Locking: wmu serialises writers and is held during disk I/O; smu guards the
// counters, the ring and the wake-up channel and is only held briefly, so
// readers never wait for disk writes and writers never wait for disk reads.
// Sizes are published under smu only after the bytes are in the files, and the
// files are append-only, so any range below a published size is stable and can
// be read with ReadAt without a lock.
type Capture struct {
	dir   string
	max   int64
	paths [3]string

	wmu sync.Mutex

	smu     sync.Mutex
	files   [3]*os.File // nil after Close; readers then reopen by path
	size    [3]int64
	dropped [3]int64 // index 0 unused
	ring    ring
	closed  bool
	changed chan struct{}
	err     error
}

var _ sandbox.Output = (*Capture)(nil)

// Open opens or creates the capture in dir (created if missing). Existing files
// are resumed: sizes come from the files and new writes append. maxBytes (> 0)
// caps each of the three files; ringBytes (>= 0) is how much of the most recent
// combined output is kept in memory. The ring is refilled from combined.log on
// resume.
func Open(dir string, maxBytes int64, ringBytes int) (*Capture, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("output: maxBytes must be positive, got %d", maxBytes)
	}
	if ringBytes < 0 {
		return nil, fmt.Errorf("output: ringBytes must not be negative, got %d", ringBytes)
	}
	// Job output may hold secrets: keep it private to the server's user.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("output: create %s: %w", dir, err)
	}
	c := &Capture{dir: dir, max: maxBytes, changed: make(chan struct{})}
	c.ring.capacity = ringBytes
	for i, name := range fileNames {
		c.paths[i] = filepath.Join(dir, name)
		f, err := os.OpenFile(c.paths[i], os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
		if err == nil {
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil {
				c.size[i] = fi.Size()
			} else {
				f.Close()
			}
		}
		if err != nil {
			c.closeFiles()
			return nil, fmt.Errorf("output: open %s: %w", c.paths[i], err)
		}
		c.files[i] = f
	}
	if err := c.refillRing(); err != nil {
		c.closeFiles()
		return nil, err
	}
	return c, nil
}

// refillRing loads the tail of combined.log into the ring after a restart.
func (c *Capture) refillRing() error {
	n := min(int64(c.ring.capacity), c.size[0])
	c.ring.start = c.size[0] - n
	if n == 0 {
		return nil
	}
	buf := make([]byte, n)
	if _, err := c.files[0].ReadAt(buf, c.size[0]-n); err != nil {
		return fmt.Errorf("output: read %s: %w", c.paths[0], err)
	}
	c.ring.write(buf)
	return nil
}

func (c *Capture) closeFiles() error {
	var errs []error
	for i, f := range c.files {
		if f != nil {
			errs = append(errs, f.Close())
			c.files[i] = nil
		}
	}
	return errors.Join(errs...)
}

// Dir is the directory holding the capture's files.
func (c *Capture) Dir() string { return c.dir }

// Write stores p as output of stream; it implements sandbox.Output. Bytes past
// a file's cap, and bytes written after Close, are counted as dropped. I/O
// errors are recorded for Err rather than returned.
func (c *Capture) Write(stream sandbox.Stream, p []byte) {
	if len(p) == 0 {
		return
	}
	si := 1
	if stream == sandbox.Stderr {
		si = 2
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()

	// Counters and closed only change under both locks, so holding wmu is
	// enough to read them here.
	if c.closed {
		c.smu.Lock()
		c.dropped[si] += int64(len(p))
		c.smu.Unlock()
		return
	}
	wc, errc := c.appendCapped(0, p)
	ws, errs := c.appendCapped(si, p)

	c.smu.Lock()
	defer c.smu.Unlock()
	c.size[0] += int64(wc)
	c.size[si] += int64(ws)
	c.dropped[si] += int64(len(p) - ws)
	c.ring.write(p[:wc]) // the ring mirrors exactly what combined.log holds
	if c.err == nil {
		c.err = errors.Join(errc, errs)
	}
	c.wake()
}

// appendCapped appends as much of p to file i as its cap allows.
func (c *Capture) appendCapped(i int, p []byte) (int, error) {
	room := c.max - c.size[i]
	if room <= 0 {
		return 0, nil
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.files[i].Write(p)
	if err != nil {
		err = fmt.Errorf("output: write %s: %w", c.paths[i], err)
	}
	return n, err
}

// wake releases everyone waiting on Changed. Called with smu held.
func (c *Capture) wake() {
	close(c.changed)
	if !c.closed {
		c.changed = make(chan struct{})
	}
	// After Close the closed channel is kept, so later waiters return at once.
}

// Close marks the capture finished: later writes are dropped, waiters wake up
// and the write handles are released. Reads keep working. Idempotent; only the
// first call reports file-close errors.
func (c *Capture) Close() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.smu.Lock()
	if c.closed {
		c.smu.Unlock()
		return nil
	}
	c.closed = true
	c.wake()
	files := c.files
	c.files = [3]*os.File{}
	c.smu.Unlock()

	// Readers that grabbed a handle before this get os.ErrClosed and reopen.
	var errs []error
	for _, f := range files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// Closed reports whether Close has been called.
func (c *Capture) Closed() bool {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.closed
}

// Changed returns a channel closed on the next Write or on Close. Take it
// before checking for new data, then wait on it, so no change is missed. Once
// the capture is closed the returned channel is already closed.
func (c *Capture) Changed() <-chan struct{} {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.changed
}

// Err returns the first I/O error met while writing, if any.
func (c *Capture) Err() error {
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.err
}

// Sizes returns the current byte counters.
func (c *Capture) Sizes() Sizes {
	c.smu.Lock()
	defer c.smu.Unlock()
	s := Sizes{
		Combined:      c.size[0],
		Stdout:        c.size[1],
		Stderr:        c.size[2],
		DroppedStdout: c.dropped[1],
		DroppedStderr: c.dropped[2],
	}
	s.Total = s.Stdout + s.Stderr + s.DroppedStdout + s.DroppedStderr
	s.DroppedCombined = max(s.Total-s.Combined, 0)
	return s
}

// TrimTornWrite undoes a write a crash cut in two. Write appends to
// combined.log before the stream's own file, so a server killed between the
// two leaves combined.log a chunk longer than stdout.log and stderr.log
// together; resumed as is, the chunk would come again from the replay and be
// stored twice. Only the job's one writer may call it, before resuming.
func (c *Capture) TrimTornWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.smu.Lock()
	defer c.smu.Unlock()
	paired := c.size[1] + c.size[2]
	if c.closed || c.size[0] <= paired {
		return nil
	}
	if err := c.files[0].Truncate(paired); err != nil {
		return fmt.Errorf("output: trim %s: %w", c.paths[0], err)
	}
	c.size[0] = paired
	c.ring = ring{capacity: c.ring.capacity}
	return c.refillRing()
}

// SetDropped restores the dropped counters after a restart; the caller
// persists them (the files only record what was stored).
func (c *Capture) SetDropped(stdout, stderr int64) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.smu.Lock()
	defer c.smu.Unlock()
	c.dropped[1], c.dropped[2] = stdout, stderr
}

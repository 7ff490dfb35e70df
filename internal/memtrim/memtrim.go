// Package memtrim keeps an idle server small. A server's resident memory is
// mostly its own binary's pages (init code, the embedded image contexts it
// hashed at start, code paths of calls long done) and the Go heap's free
// spans. After a while without tool calls, Trimmer hands the heap's free
// memory back to the kernel and drops the server's mappings of its binary's
// read-only pages: they stay in the page cache, shared, and the next call
// maps back the ones it uses (minor faults, no disk).
package memtrim

import (
	"runtime/debug"
	"sync"
	"time"
)

// Trim returns the Go heap's free memory to the kernel and unmaps the
// binary's clean read-only pages (Linux; elsewhere only the heap).
func Trim() {
	debug.FreeOSMemory()
	dropBinaryPages()
}

// Trimmer calls its trim function once the server has been idle (no call in
// flight) for a while, and not again until the next call has come and gone.
type Trimmer struct {
	after time.Duration
	trim  func()

	mu       sync.Mutex
	inflight int
	timer    *time.Timer
	closed   bool
}

// New returns a Trimmer that calls trim (nil: Trim) after idle time
// without calls; it is armed at once, as a server that just started is idle.
func New(idle time.Duration, trim func()) *Trimmer {
	if trim == nil {
		trim = Trim
	}
	t := &Trimmer{after: idle, trim: trim}
	t.mu.Lock()
	t.armLocked()
	t.mu.Unlock()
	return t
}

// Begin marks a call in flight.
func (t *Trimmer) Begin() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inflight++
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}

// End marks a call done; the last one arms the trim.
func (t *Trimmer) End() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inflight--; t.inflight == 0 {
		t.armLocked()
	}
}

// Close disarms the trimmer for good.
func (t *Trimmer) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}

func (t *Trimmer) armLocked() {
	if t.closed || t.timer != nil {
		return
	}
	var timer *time.Timer
	timer = time.AfterFunc(t.after, func() {
		t.mu.Lock()
		fire := t.timer == timer && t.inflight == 0 && !t.closed
		if fire {
			t.timer = nil
		}
		t.mu.Unlock()
		if fire {
			t.trim()
		}
	})
	t.timer = timer
}

package sandbox

import (
	"bytes"
	"io"
	"sync"
)

// Buffer is an Output that keeps the first Max bytes of each stream in
// memory, for short runs whose output is read whole (probes, doctor).
type Buffer struct {
	Max int

	mu             sync.Mutex
	stdout, stderr bytes.Buffer
}

func (b *Buffer) Write(s Stream, p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dst := &b.stdout
	if s == Stderr {
		dst = &b.stderr
	}
	if room := b.Max - dst.Len(); room > 0 {
		dst.Write(p[:min(len(p), room)])
	}
}

// Stdout is what was kept of stdout.
func (b *Buffer) Stdout() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stdout.String()
}

// Stderr is what was kept of stderr.
func (b *Buffer) Stderr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stderr.String()
}

// LimitWriter keeps the first N bytes written to W and discards the rest
// (reporting them written, so a copy into it never fails).
type LimitWriter struct {
	W io.Writer
	N int
}

func (l *LimitWriter) Write(p []byte) (int, error) {
	if l.N > 0 {
		k := min(len(p), l.N)
		l.W.Write(p[:k])
		l.N -= k
	}
	return len(p), nil
}

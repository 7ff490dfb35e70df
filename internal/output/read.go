package output

import (
	"errors"
	"fmt"
	"os"
)

// Selector picks which log a read uses. Its value indexes fileNames.
type Selector int

const (
	Both       Selector = iota // combined.log: both streams in arrival order
	StdoutOnly                 // stdout.log
	StderrOnly                 // stderr.log
)

// ParseSelector parses "both", "stdout" or "stderr"; anything else is an error.
func ParseSelector(s string) (Selector, error) {
	switch s {
	case "both":
		return Both, nil
	case "stdout":
		return StdoutOnly, nil
	case "stderr":
		return StderrOnly, nil
	}
	return 0, fmt.Errorf("output: unknown stream %q (want both, stdout or stderr)", s)
}

func (s Selector) String() string {
	switch s {
	case Both:
		return "both"
	case StdoutOnly:
		return "stdout"
	case StderrOnly:
		return "stderr"
	}
	return fmt.Sprintf("Selector(%d)", int(s))
}

func (s Selector) index() (int, error) {
	if s < Both || s > StderrOnly {
		return 0, fmt.Errorf("output: invalid selector %d", int(s))
	}
	return int(s), nil
}

// Size returns the number of bytes stored in the selected file.
func (c *Capture) Size(sel Selector) int64 {
	i, err := sel.index()
	if err != nil {
		return 0
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	return c.size[i]
}

// Read returns up to maxBytes stored bytes of the selected file starting at
// byte offset cursor, and next = cursor+len(data) for the following call.
// A negative cursor or maxBytes is an error. A cursor past the end is clamped
// to the end: data is empty and next is the current size, so a caller never
// skips bytes that have not been written yet.
func (c *Capture) Read(sel Selector, cursor int64, maxBytes int) (data []byte, next int64, err error) {
	i, err := sel.index()
	if err != nil {
		return nil, cursor, err
	}
	if cursor < 0 {
		return nil, cursor, fmt.Errorf("output: negative cursor %d", cursor)
	}
	if maxBytes < 0 {
		return nil, cursor, fmt.Errorf("output: negative maxBytes %d", maxBytes)
	}
	end := c.Size(sel)
	cursor = min(cursor, end)
	n := min(int64(maxBytes), end-cursor)
	if n == 0 {
		return nil, cursor, nil
	}
	buf := make([]byte, n)
	if err := c.readAt(i, buf, cursor); err != nil {
		return nil, cursor, err
	}
	return buf, cursor + n, nil
}

// readAt fills p from file i at off, from the ring when it holds the range.
// The caller must have seen a size of at least off+len(p), so the range is
// already written and will not change.
func (c *Capture) readAt(i int, p []byte, off int64) error {
	c.smu.Lock()
	if i == 0 && c.ring.readAt(p, off) {
		c.smu.Unlock()
		return nil
	}
	f := c.files[i]
	c.smu.Unlock()

	if f != nil {
		_, err := f.ReadAt(p, off)
		if !errors.Is(err, os.ErrClosed) {
			return wrapRead(c.paths[i], err)
		}
		// Close raced with us; fall through and reopen.
	}
	f, err := os.Open(c.paths[i])
	if err != nil {
		return wrapRead(c.paths[i], err)
	}
	defer f.Close()
	_, err = f.ReadAt(p, off)
	return wrapRead(c.paths[i], err)
}

func wrapRead(path string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("output: read %s: %w", path, err)
}

// tailChunk is how much Tail reads per step while searching backwards.
const tailChunk = 64 << 10

// Tail returns the last lines lines of the selected file, at most maxBytes
// (keeping the end), and the byte offset where data begins. A final line
// without a trailing newline counts as a line. Only the needed end of the file
// is read, backwards in chunks.
func (c *Capture) Tail(sel Selector, lines int, maxBytes int) (data []byte, start int64, err error) {
	i, err := sel.index()
	if err != nil {
		return nil, 0, err
	}
	if lines < 0 || maxBytes < 0 {
		return nil, 0, fmt.Errorf("output: negative lines (%d) or maxBytes (%d)", lines, maxBytes)
	}
	end := c.Size(sel)
	lo := max(end-int64(maxBytes), 0) // never look further back than maxBytes
	if lines == 0 || end == lo {
		return nil, end, nil
	}

	// A trailing newline ends the last line rather than starting a new one.
	pos := end
	var last [1]byte
	if err := c.readAt(i, last[:], end-1); err != nil {
		return nil, end, err
	}
	if last[0] == '\n' {
		pos--
	}

	start = lo
	buf := make([]byte, min(tailChunk, pos-lo))
	found := 0
search:
	for pos > lo {
		n := min(int64(len(buf)), pos-lo)
		chunk := buf[:n]
		if err := c.readAt(i, chunk, pos-n); err != nil {
			return nil, end, err
		}
		for j := len(chunk) - 1; j >= 0; j-- {
			if chunk[j] == '\n' {
				if found++; found == lines {
					start = pos - n + int64(j) + 1
					break search
				}
			}
		}
		pos -= n
	}

	data = make([]byte, end-start)
	if err := c.readAt(i, data, start); err != nil {
		return nil, end, err
	}
	return data, start, nil
}

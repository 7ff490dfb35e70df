package mcpserver

import (
	"bufio"
	"io"
)

// lineLimiter passes stdin through line by line, but replaces a line longer
// than max with a short malformed one, so the transport answers it with a
// parse error instead of buffering an unbounded message, and carries on.
type lineLimiter struct {
	r       *bufio.Reader
	max     int
	pending []byte
}

func newLineLimiter(r io.Reader, max int) io.Reader {
	return &lineLimiter{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

const oversizeLine = "{\"error\":\"message too large\"\n"

func (l *lineLimiter) Read(p []byte) (int, error) {
	for len(l.pending) == 0 {
		line, err := l.readLine()
		if len(line) == 0 && err != nil {
			return 0, err
		}
		l.pending = line
	}
	n := copy(p, l.pending)
	l.pending = l.pending[n:]
	return n, nil
}

// readLine returns the next line (with its newline), or the oversize marker.
func (l *lineLimiter) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := l.r.ReadSlice('\n')
		if len(line)+len(chunk) > l.max {
			// Skip the rest of this line without keeping it.
			for err == bufio.ErrBufferFull {
				_, err = l.r.ReadSlice('\n')
			}
			if err != nil && err != io.EOF {
				return nil, err
			}
			return []byte(oversizeLine), nil
		}
		line = append(line, chunk...)
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, err
	}
}

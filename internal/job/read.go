package job

import (
	"context"
	"regexp"
	"time"

	"github.com/sandboxer/sandboxer/internal/output"
)

// ReadRequest says which output to read and how long to wait for it.
type ReadRequest struct {
	Stream output.Selector
	// Cursor is a byte offset into the selected stream; nil means "new since
	// the last read" of that stream.
	Cursor *int64
	// TailLines > 0 reads the last lines instead of from a cursor.
	TailLines int
	MaxBytes  int
	// Wait is how long to wait for new output (or for Until to match).
	Wait  time.Duration
	Until *regexp.Regexp
	// StripANSI removes escape sequences before Until is matched and before returning.
	StripANSI bool
	// Peek leaves the "new since last read" cursor where it is.
	Peek bool
}

// ReadResult is what a read returns.
type ReadResult struct {
	Data       []byte
	Start      int64 // cursor of Data's first byte
	NextCursor int64
	HasMore    bool // more output is stored past NextCursor
	Dropped    int64
	Matched    bool
	Job        *Job
}

// Read reads a job's output. It waits up to req.Wait for output to appear (or
// for Until to match, or for the job to end), whichever comes first.
func (m *Manager) Read(ctx context.Context, id string, req ReadRequest) (*ReadResult, error) {
	j := m.liveJob(id)
	done := m.Done(id)
	capture, err := m.captureOf(ctx, id, j)
	if err != nil {
		return nil, err
	}

	if req.TailLines > 0 {
		data, start, err := capture.Tail(req.Stream, req.TailLines, req.MaxBytes)
		if err != nil {
			return nil, err
		}
		next := start + int64(len(data))
		m.setReadCursor(j, req.Stream, next)
		return m.readResult(ctx, id, capture, req, data, start, next, false)
	}

	start := m.readCursor(ctx, j, id, req.Stream)
	if req.Cursor != nil {
		start = *req.Cursor
	}
	var deadline <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		changed := capture.Changed()
		data, next, err := capture.Read(req.Stream, start, req.MaxBytes)
		if err != nil {
			return nil, err
		}
		matched := false
		if req.Until != nil {
			text := data
			if req.StripANSI {
				text = output.StripANSI(data)
			}
			matched = req.Until.Match(text)
		}
		finished := isClosed(done) || capture.Closed()
		full := len(data) >= req.MaxBytes
		ready := matched || full || finished || (req.Until == nil && len(data) > 0)
		if !ready && req.Wait > 0 {
			select {
			case <-changed:
				continue
			case <-done:
				continue
			case <-deadline:
			case <-ctx.Done():
			}
			// One last read so nothing that arrived meanwhile is missed.
			data, next, err = capture.Read(req.Stream, start, req.MaxBytes)
			if err != nil {
				return nil, err
			}
			if req.Until != nil {
				text := data
				if req.StripANSI {
					text = output.StripANSI(data)
				}
				matched = req.Until.Match(text)
			}
		}
		if !req.Peek {
			m.setReadCursor(j, req.Stream, next)
		}
		if j == nil && !req.Peek {
			m.storeReadCursor(id, req.Stream, next)
		}
		return m.readResult(ctx, id, capture, req, data, start, next, matched)
	}
}

func (m *Manager) readResult(ctx context.Context, id string, c *output.Capture, req ReadRequest, data []byte, start, next int64, matched bool) (*ReadResult, error) {
	rec, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	sz := c.Sizes()
	size := c.Size(req.Stream)
	var dropped int64
	switch req.Stream {
	case output.StdoutOnly:
		dropped = sz.DroppedStdout
	case output.StderrOnly:
		dropped = sz.DroppedStderr
	default:
		dropped = sz.DroppedCombined
	}
	if Finished(rec.Status) && dropped == 0 && req.Stream == output.Both {
		dropped = rec.DroppedBytes
	}
	if req.StripANSI {
		data = output.StripANSI(data)
	}
	return &ReadResult{
		Data: data, Start: start, NextCursor: next, HasMore: next < size,
		Dropped: dropped, Matched: matched, Job: rec,
	}, nil
}

func (m *Manager) readCursor(ctx context.Context, j *liveJob, id string, sel output.Selector) int64 {
	if j != nil {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.readCursors[sel]
	}
	if rec, err := m.st.GetJob(ctx, id); err == nil {
		return readCursorsOf(rec)[sel]
	}
	return 0
}

// readCursorsOf are a stored job's "new since last read" cursors, by selector.
func readCursorsOf(rec *Job) [3]int64 {
	var c [3]int64
	c[output.Both], c[output.StdoutOnly], c[output.StderrOnly] = rec.ReadCursor, rec.StdoutReadCursor, rec.StderrReadCursor
	return c
}

// storeReadCursor moves a finished job's stored cursor of one stream forward.
func (m *Manager) storeReadCursor(id string, sel output.Selector, next int64) {
	ctx := context.Background()
	rec, err := m.st.GetJob(ctx, id)
	if err != nil {
		return
	}
	c := readCursorsOf(rec)
	if next <= c[sel] {
		return
	}
	c[sel] = next
	if err := m.st.SetReadCursors(ctx, id, c[output.Both], c[output.StdoutOnly], c[output.StderrOnly]); err != nil {
		m.log.Warn().Err(err).Str("job", id).Msg("store read cursor")
	}
}

func (m *Manager) setReadCursor(j *liveJob, sel output.Selector, next int64) {
	if j == nil {
		return
	}
	j.mu.Lock()
	if next > j.readCursors[sel] {
		j.readCursors[sel] = next
	}
	j.mu.Unlock()
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// captureOf returns a job's output: the live capture, or the stored one of a
// finished job (opened closed, for reading only).
func (m *Manager) captureOf(ctx context.Context, id string, j *liveJob) (*output.Capture, error) {
	if j != nil {
		return j.capture, nil
	}
	if _, err := m.Get(ctx, id); err != nil {
		return nil, err
	}
	c, err := output.Open(m.jobDir(id), m.pol.Output.MaxBytesPerJob, 0)
	if err != nil {
		return nil, err
	}
	_ = c.Close()
	return c, nil
}

// Inline returns one stream's output for a call's result: all of it when it
// fits in limit bytes, else its head and tail around a marker that states how
// many bytes were left out (they stay readable by cursor).
func (m *Manager) Inline(ctx context.Context, id string, sel output.Selector, limit int) (data []byte, omitted int64, err error) {
	c, err := m.captureOf(ctx, id, m.liveJob(id))
	if err != nil {
		return nil, 0, err
	}
	size := c.Size(sel)
	if size <= int64(limit) {
		data, _, err = c.Read(sel, 0, limit)
		return data, 0, err
	}
	half := int64(limit / 2)
	head, _, err := c.Read(sel, 0, int(half))
	if err != nil {
		return nil, 0, err
	}
	tail, _, err := c.Read(sel, size-half, int(half))
	if err != nil {
		return nil, 0, err
	}
	head, tail = output.TrimRunes(head), output.TrimRunes(tail)
	omitted = size - int64(len(head)) - int64(len(tail))
	data = append(append(append(make([]byte, 0, limit+64), head...), output.OmittedMarker(omitted)...), tail...)
	return data, omitted, nil
}

// MarkRead moves a job's "new since last read" cursor forward to next.
func (m *Manager) MarkRead(id string, sel output.Selector, next int64) {
	m.setReadCursor(m.liveJob(id), sel, next)
}

// Tail returns the last lines of a job's combined output, at most maxBytes.
func (m *Manager) Tail(ctx context.Context, id string, lines, maxBytes int) ([]byte, error) {
	c, err := m.captureOf(ctx, id, m.liveJob(id))
	if err != nil {
		return nil, err
	}
	data, _, err := c.Tail(output.Both, lines, maxBytes)
	return data, err
}

// Size is how many bytes of a stream are stored.
func (m *Manager) Size(ctx context.Context, id string, sel output.Selector) (int64, error) {
	c, err := m.captureOf(ctx, id, m.liveJob(id))
	if err != nil {
		return 0, err
	}
	return c.Size(sel), nil
}

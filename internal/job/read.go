package job

import (
	"bytes"
	"context"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/record"
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
	// Settle, without Until: once some output has come, wait until it has
	// been quiet this long (the answer is complete) rather than return with
	// the first bytes. 0 returns with the first bytes. Never past Wait.
	Settle time.Duration
}

// ReadResult is what a read returns.
type ReadResult struct {
	Data       []byte
	Start      int64 // cursor of Data's first byte
	NextCursor int64
	HasMore    bool // more output is stored past NextCursor
	Dropped    int64
	Matched    bool
	Job        *record.Job
}

// jobOutput is one job's output, resolved once per call: the live job, or a
// finished job's stored record, with its capture.
type jobOutput struct {
	id      string
	live    *liveJob
	ended   *liveJob    // finished here lately: its record and capture in memory
	rec     *record.Job // finished jobs only
	capture *output.Capture
	done    <-chan struct{}
}

// outputOf resolves a job's output. A finished job's capture is opened
// closed, for reading only.
func (m *Manager) outputOf(ctx context.Context, id string) (*jobOutput, error) {
	if err := m.visible(ctx, id); err != nil {
		return nil, err
	}
	if j := m.liveJob(id); j != nil {
		return &jobOutput{id: id, live: j, capture: j.capture, done: j.done}, nil
	}
	if j := m.recentlyEnded(id); j != nil {
		// Its capture is closed; reads reopen its files.
		return &jobOutput{id: id, ended: j, rec: j.snapshot(), capture: j.capture, done: j.done}, nil
	}
	rec, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	c, err := output.Open(m.jobDir(id), m.pol.Output.MaxBytesPerJob, 0)
	if err != nil {
		return nil, err
	}
	_ = c.Close()
	done := make(chan struct{})
	close(done)
	return &jobOutput{id: id, rec: rec, capture: c, done: done}, nil
}

// record is the job's record as of now.
func (o *jobOutput) record() *record.Job {
	if o.live != nil {
		return o.live.snapshot()
	}
	return o.rec
}

// readCursor is where "new since last read" of a stream continues.
func (o *jobOutput) readCursor(sel output.Selector) int64 {
	if o.live != nil {
		o.live.mu.Lock()
		defer o.live.mu.Unlock()
		return o.live.readCursors[sel]
	}
	if o.ended != nil {
		o.ended.mu.Lock()
		defer o.ended.mu.Unlock()
		return readCursorsOf(&o.ended.rec)[sel]
	}
	return readCursorsOf(o.rec)[sel]
}

// advanceReadCursor moves "new since last read" of a stream forward to next:
// in memory for a live job (stored when it finishes), in the store otherwise.
func (m *Manager) advanceReadCursor(o *jobOutput, sel output.Selector, next int64) {
	if o.live != nil {
		o.live.mu.Lock()
		if next > o.live.readCursors[sel] {
			o.live.readCursors[sel] = next
		}
		o.live.mu.Unlock()
		return
	}
	if !record.Finished(o.rec.Status) {
		// Another server runs the job and keeps its cursors (it stores them
		// when the job ends): writing them here would race it.
		return
	}
	rec := o.rec
	if o.ended != nil {
		// The kept record follows the store, so the next call's cursor
		// starts where this one left it.
		o.ended.mu.Lock()
		defer o.ended.mu.Unlock()
		rec = &o.ended.rec
	}
	c := readCursorsOf(rec)
	if next <= c[sel] {
		return
	}
	c[sel] = next
	rec.ReadCursor, rec.StdoutReadCursor, rec.StderrReadCursor = c[output.Both], c[output.StdoutOnly], c[output.StderrOnly]
	o.rec.ReadCursor, o.rec.StdoutReadCursor, o.rec.StderrReadCursor = c[output.Both], c[output.StdoutOnly], c[output.StderrOnly]
	if err := m.st.SetReadCursors(context.Background(), o.id, c[output.Both], c[output.StdoutOnly], c[output.StderrOnly]); err != nil {
		m.log.Warn().Err(err).Str("job", o.id).Msg("store read cursor")
	}
}

// readCursorsOf are a stored job's "new since last read" cursors, by selector.
func readCursorsOf(rec *record.Job) [3]int64 {
	var c [3]int64
	c[output.Both], c[output.StdoutOnly], c[output.StderrOnly] = rec.ReadCursor, rec.StdoutReadCursor, rec.StderrReadCursor
	return c
}

// Read reads a job's output. It waits up to req.Wait for output to appear (or
// for Until to match, or for the job to end), whichever comes first.
func (m *Manager) Read(ctx context.Context, id string, req ReadRequest) (*ReadResult, error) {
	o, err := m.outputOf(ctx, id)
	if err != nil {
		return nil, err
	}
	capture := o.capture
	if req.TailLines > 0 {
		data, start, err := capture.Tail(req.Stream, req.TailLines, req.MaxBytes)
		if err != nil {
			return nil, err
		}
		return m.readResult(o, req, data, start, start+int64(len(data)), false), nil
	}

	start := o.readCursor(req.Stream)
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
		data, next, err := m.readPage(capture, req, start)
		if err != nil {
			return nil, err
		}
		matched := req.matches(data)
		finished := isClosed(o.done) || capture.Closed()
		full := len(data) >= req.MaxBytes
		some := req.Until == nil && len(data) > 0
		ready := matched || full || finished || (some && req.Settle <= 0)
		if !ready && some && req.Wait > 0 {
			// Some output came: return once it has been quiet for Settle.
			quiet := time.NewTimer(req.Settle)
			select {
			case <-changed:
				quiet.Stop()
				continue
			case <-o.done:
				quiet.Stop()
				continue
			case <-quiet.C:
				return m.readResult(o, req, data, start, next, false), nil
			case <-deadline:
			case <-ctx.Done():
			}
			quiet.Stop()
			data, next, err = m.readPage(capture, req, start)
			if err != nil {
				return nil, err
			}
			return m.readResult(o, req, data, start, next, false), nil
		}
		if !ready && req.Wait > 0 {
			select {
			case <-changed:
				continue
			case <-o.done:
				continue
			case <-deadline:
			case <-ctx.Done():
			}
			// One last read so nothing that arrived meanwhile is missed.
			data, next, err = m.readPage(capture, req, start)
			if err != nil {
				return nil, err
			}
			matched = req.matches(data)
		}
		return m.readResult(o, req, data, start, next, matched), nil
	}
}

// readPage reads one page from start. It ends on a character boundary (and,
// when escapes are stripped, outside an escape sequence), so paging from 0
// returns exactly the bytes written, none broken; a cursor past the end stays
// where the caller put it rather than moving back.
func (m *Manager) readPage(c *output.Capture, req ReadRequest, start int64) ([]byte, int64, error) {
	data, next, err := c.Read(req.Stream, start, req.MaxBytes)
	if err != nil {
		return nil, start, err
	}
	if n := output.PageEnd(data, req.StripANSI); n < len(data) {
		data, next = data[:n], next-int64(len(data)-n)
	}
	return data, max(next, start), nil
}

// matches says whether data (as the caller will see it) matches Until.
func (req ReadRequest) matches(data []byte) bool {
	if req.Until == nil {
		return false
	}
	if req.StripANSI {
		data = output.StripANSI(data)
	}
	return req.Until.Match(data)
}

// readResult counts what was read as read (unless peeking) and presents it.
func (m *Manager) readResult(o *jobOutput, req ReadRequest, data []byte, start, next int64, matched bool) *ReadResult {
	if !req.Peek {
		m.advanceReadCursor(o, req.Stream, next)
	}
	rec := o.record()
	sz := o.capture.Sizes()
	var dropped int64
	switch req.Stream {
	case output.StdoutOnly:
		dropped = sz.DroppedStdout
	case output.StderrOnly:
		dropped = sz.DroppedStderr
	default:
		dropped = sz.DroppedCombined
	}
	if record.Finished(rec.Status) && dropped == 0 && req.Stream == output.Both {
		dropped = rec.DroppedBytes // not kept by a capture reopened after the job ended
	}
	if req.StripANSI {
		data = output.StripANSI(data)
	}
	return &ReadResult{
		Data: data, Start: start, NextCursor: next, HasMore: next < o.capture.Size(req.Stream),
		Dropped: dropped, Matched: matched, Job: rec,
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Inline is a job's output as a call's result carries it.
type Inline struct {
	Stdout, Stderr []byte
	// StdoutOmitted and StderrOmitted are the byte ranges of each stream left
	// out between head and tail (empty when the stream is whole).
	StdoutOmitted, StderrOmitted Range
	// Cursor is the size of the combined stream, taken before the streams were
	// read: output that arrives meanwhile is left for the next read.
	Cursor int64
}

// Range is a byte range [Start, End) of one stream.
type Range struct{ Start, End int64 }

// Len is the range's size in bytes.
func (r Range) Len() int64 { return r.End - r.Start }

// InlineOutput returns both streams of a job's output, each whole when it fits
// in limit bytes, else its head and tail around a marker that states how many
// bytes were left out (they stay readable by cursor). What it returns counts
// as read: "new since last read" continues at Cursor.
func (m *Manager) InlineOutput(ctx context.Context, id string, limit int) (*Inline, error) {
	o, err := m.outputOf(ctx, id)
	if err != nil {
		return nil, err
	}
	in := &Inline{Cursor: o.capture.Size(output.Both)}
	if in.Stdout, in.StdoutOmitted, err = headTail(o.capture, output.StdoutOnly, limit); err != nil {
		return nil, err
	}
	if in.Stderr, in.StderrOmitted, err = headTail(o.capture, output.StderrOnly, limit); err != nil {
		return nil, err
	}
	m.advanceReadCursor(o, output.Both, in.Cursor)
	return in, nil
}

// lineSnap is how far a head or tail may be shortened to end (or start) at a
// line boundary, as a fraction of its size.
const lineSnap = 8

// headTail reads one stream whole, or its head and tail around an omission
// marker. Head and tail break at a line boundary when one is near; the range
// left out is returned exactly, so a cursor read of it gives what is missing.
func headTail(c *output.Capture, sel output.Selector, limit int) (data []byte, omitted Range, err error) {
	size := c.Size(sel)
	if size <= int64(limit) {
		data, _, err = c.Read(sel, 0, limit)
		return data, Range{}, err
	}
	half := int64(limit / 2)
	head, _, err := c.Read(sel, 0, int(half))
	if err != nil {
		return nil, Range{}, err
	}
	tail, _, err := c.Read(sel, size-half, int(half))
	if err != nil {
		return nil, Range{}, err
	}
	snap := int(half / lineSnap)
	if i := bytes.LastIndexByte(head, '\n'); i >= 0 && len(head)-(i+1) <= snap {
		head = head[:i+1]
	} else {
		head = head[:output.PageEnd(head, false)]
	}
	if i := bytes.IndexByte(tail, '\n'); i >= 0 && i+1 <= snap && i+1 < len(tail) {
		tail = tail[i+1:]
	} else {
		for k := 0; k < 3 && len(tail) > 0 && !utf8.RuneStart(tail[0]); k++ {
			tail = tail[1:]
		}
	}
	omitted = Range{Start: int64(len(head)), End: size - int64(len(tail))}
	data = append(append(append(make([]byte, 0, limit+64), head...), output.OmittedMarker(omitted.Len())...), tail...)
	return data, omitted, nil
}

// Tail returns the last lines of a job's combined output, at most maxBytes.
func (m *Manager) Tail(ctx context.Context, id string, lines, maxBytes int) ([]byte, error) {
	o, err := m.outputOf(ctx, id)
	if err != nil {
		return nil, err
	}
	data, _, err := o.capture.Tail(output.Both, lines, maxBytes)
	return data, err
}

// Size is how many bytes of a stream are stored.
func (m *Manager) Size(ctx context.Context, id string, sel output.Selector) (int64, error) {
	o, err := m.outputOf(ctx, id)
	if err != nil {
		return 0, err
	}
	return o.capture.Size(sel), nil
}

// WaitOutput waits until a job's combined output is larger than past, the
// job has ended, or ctx ends; it returns the output's size then and whether
// the job has ended. (What a subscription to the job's output follows.)
func (m *Manager) WaitOutput(ctx context.Context, id string, past int64) (size int64, ended bool, err error) {
	o, err := m.outputOf(ctx, id)
	if err != nil {
		return 0, false, err
	}
	for {
		changed := o.capture.Changed()
		size, ended = o.capture.Size(output.Both), isClosed(o.done)
		if size > past || ended {
			return size, ended, nil
		}
		select {
		case <-changed:
		case <-o.done:
		case <-ctx.Done():
			return size, false, ctx.Err()
		}
	}
}

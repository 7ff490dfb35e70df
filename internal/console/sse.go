package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/record"
)

// Live streams (server-sent events).
const (
	listEvery     = time.Second      // the jobs list is looked at this often
	readWait      = 10 * time.Second // a job page's stream waits this long for output per read
	streamBytes   = 64 << 10         // output sent per event at most
	keepAliveEach = 15 * time.Second
	// maxStream ends a stream after this long; the browser reconnects by itself.
	maxStream = 30 * time.Minute
	// maxStreams bounds the streams open at once (each reads the job
	// manager every second or so): more get 503 and the browser retries.
	maxStreams = 64
)

// stream is one open event stream.
type stream struct {
	w  http.ResponseWriter
	fl http.Flusher
}

func (c *Console) openStream(w http.ResponseWriter, r *http.Request) (*stream, context.Context, context.CancelFunc, bool) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return nil, nil, nil, false
	}
	select {
	case c.streams <- struct{}{}:
	default:
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many live streams open", http.StatusServiceUnavailable)
		return nil, nil, nil, false
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	ctx, stop := context.WithTimeout(r.Context(), maxStream)
	cancel := func() { stop(); <-c.streams } // called once, by the handler
	if c.Done != nil {                       // the server stopping ends the stream, so shutdown need not wait for it
		go func() {
			select {
			case <-c.Done:
				stop()
			case <-ctx.Done():
			}
		}()
	}
	return &stream{w: w, fl: fl}, ctx, cancel, true
}

// send writes one event; an error means the browser has gone.
func (s *stream) send(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	s.fl.Flush()
	return nil
}

func (s *stream) keepAlive() error {
	if _, err := fmt.Fprint(s.w, ": keep-alive\n\n"); err != nil {
		return err
	}
	s.fl.Flush()
	return nil
}

// jobsEvents streams the jobs list (of the page's filter) each time it changes.
func (c *Console) jobsEvents(w http.ResponseWriter, r *http.Request, _ *session) {
	f := jobFilterOf(r)
	s, ctx, cancel, ok := c.openStream(w, r)
	if !ok {
		return
	}
	defer cancel()
	var last []byte
	quiet := time.Now()
	tick := time.NewTicker(listEvery)
	defer tick.Stop()
	for {
		rows, err := c.jobRows(ctx, f)
		if err == nil {
			b, _ := json.Marshal(rows)
			if string(b) != string(last) {
				if s.send("jobs", rows) != nil {
					return
				}
				last, quiet = b, time.Now()
			}
		}
		if time.Since(quiet) > keepAliveEach {
			if s.keepAlive() != nil {
				return
			}
			quiet = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// jobUpdate is a job page's live record.
type jobUpdate struct {
	Status string  `json:"status"`
	Fields []field `json:"fields"`
	Usage  []field `json:"usage"`
	Ended  bool    `json:"ended"`
}

// screenUpdate is a session's screen.
type screenUpdate struct {
	Lines     []string `json:"lines"`
	CursorRow int      `json:"cursor_row"`
}

// jobEvents streams a job's output from ?from= (a byte offset of its
// combined output), its record as it changes and, for a PTY session, its
// screen, until the job has ended and all its output was sent.
func (c *Console) jobEvents(w http.ResponseWriter, r *http.Request, _ *session) {
	id := r.PathValue("id")
	if _, err := c.Jobs.Get(r.Context(), id); err != nil {
		http.Error(w, "no such job", http.StatusNotFound)
		return
	}
	from, _ := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
	from = max(from, 0)
	s, ctx, cancel, ok := c.openStream(w, r)
	if !ok {
		return
	}
	defer cancel()
	conv := newANSI()
	var lastRec, lastScreen []byte
	for {
		cursor := from
		// Peek: the console's reads never move an agent's "new since last read".
		res, err := c.Jobs.Read(ctx, id, job.ReadRequest{Stream: output.Both, Cursor: &cursor, MaxBytes: streamBytes, Wait: readWait, Peek: true})
		if err != nil {
			if ctx.Err() == nil {
				_ = s.send("gone", err.Error())
			}
			return
		}
		if len(res.Data) > 0 {
			if s.send("output", conv.feed(res.Data)) != nil {
				return
			}
		}
		from = res.NextCursor
		rec := res.Job
		fields, usage := jobFields(rec)
		ended := record.Finished(rec.Status)
		if b, _ := json.Marshal(jobUpdate{rec.Status, fields, usage, ended}); string(b) != string(lastRec) {
			if s.send("job", jobUpdate{rec.Status, fields, usage, ended}) != nil {
				return
			}
			lastRec = b
		}
		if sd := rec.Details.Session; sd != nil && sd.Mode == job.ModePTY {
			if scr, _, err := c.Jobs.Screen(ctx, id); err == nil {
				u := screenUpdate{Lines: scr.Lines, CursorRow: scr.CursorRow}
				if b, _ := json.Marshal(u); string(b) != string(lastScreen) {
					if s.send("screen", u) != nil {
						return
					}
					lastScreen = b
				}
			}
		}
		if ended && !res.HasMore && len(res.Data) == 0 {
			_ = s.send("end", rec.Status)
			return
		}
		if len(res.Data) == 0 && s.keepAlive() != nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

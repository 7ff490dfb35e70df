package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/terminal"
)

// Session modes.
const (
	ModePTY  = "pty"
	ModePipe = "pipe"
)

// ErrNoTerminal: the job is not a PTY session (resize, screen).
var ErrNoTerminal = errors.New("job has no terminal")

// teeOutput sends a PTY session's output to its capture and to its terminal
// emulator, so the screen is always current.
type teeOutput struct {
	capture *output.Capture
	term    *terminal.Terminal
}

func (t teeOutput) Write(stream sandbox.Stream, p []byte) {
	t.capture.Write(stream, p)
	_, _ = t.term.Write(p)
}

// output is where the job's sandbox writes.
func (j *liveJob) output() sandbox.Output {
	if j.term != nil {
		return teeOutput{j.capture, j.term}
	}
	return j.capture
}

// newTerm gives a PTY session its terminal emulator (nil for other jobs).
func newTerm(req Request) *terminal.Terminal {
	if req.Kind != KindSession || req.TTY == nil {
		return nil
	}
	return terminal.New(int(req.TTY.Rows), int(req.TTY.Cols))
}

// idleTimeout is how long a session may go without input (0: not a session).
func (j *liveJob) idleTimeout() time.Duration {
	if j.rec.Kind != KindSession || j.rec.Details.Session == nil {
		return 0
	}
	return time.Duration(j.rec.Details.Session.IdleTimeoutMS) * time.Millisecond
}

// startIdle arms a session's idle timer; called with j.mu held.
func (m *Manager) startIdle(j *liveJob) {
	d := j.idleTimeout()
	if d <= 0 {
		return
	}
	j.idle = time.AfterFunc(d, func() { m.end(j, record.StatusKilled, record.ReasonIdle) })
	j.setIdleDeadline(time.Now().Add(d))
}

// setIdleDeadline records the deadline; the details are replaced, never
// changed in place, since snapshots share them. Called with j.mu held.
func (j *liveJob) setIdleDeadline(t time.Time) {
	d := *j.rec.Details.Session
	d.IdleDeadline = t.UTC()
	j.rec.Details.Session = &d
}

// touch counts input to a session: its idle timer starts over.
func (j *liveJob) touch() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.idle == nil || j.endStatus != "" {
		return
	}
	d := j.idleTimeout()
	if j.idle.Stop() {
		j.idle.Reset(d)
		j.setIdleDeadline(time.Now().Add(d))
	}
}

// Resize changes a PTY session's terminal size (and its emulated screen's).
func (m *Manager) Resize(ctx context.Context, id string, rows, cols int) (*record.Job, error) {
	if err := m.visible(ctx, id); err != nil {
		return nil, err
	}
	j := m.liveJob(id)
	if j == nil {
		rec, err := m.steerable(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := terminalProblem(rec); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("job %s has ended (%s): there is no terminal to resize", id, rec.Status)
	}
	rec := j.snapshot()
	if err := terminalProblem(rec); err != nil {
		return nil, err
	}
	j.mu.Lock()
	h := j.handle
	j.mu.Unlock()
	if h == nil {
		select {
		case <-j.started:
		case <-j.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("job %s: its sandbox was still starting when the wait ended; try again", id)
		}
		j.mu.Lock()
		h = j.handle
		j.mu.Unlock()
		if h == nil {
			return nil, fmt.Errorf("job %s ended before its sandbox started", id)
		}
	}
	if err := h.Resize(ctx, uint16(rows), uint16(cols)); err != nil {
		if errors.Is(err, sandbox.ErrNoTTY) {
			return nil, fmt.Errorf("%w: job %s runs without a terminal", ErrNoTerminal, id)
		}
		return nil, fmt.Errorf("resize job %s: %w", id, err)
	}
	if j.term != nil {
		j.term.Resize(rows, cols)
	}
	j.mu.Lock()
	d := *j.rec.Details.Session
	d.Rows, d.Cols = rows, cols
	j.rec.Details.Session = &d
	j.mu.Unlock()
	j.touch()
	return j.snapshot(), nil
}

// terminalProblem says why a job has no terminal, or nil for a PTY session.
func terminalProblem(rec *record.Job) error {
	switch {
	case rec.Kind != KindSession:
		return fmt.Errorf("%w: job %s is a %s, not a session (start_session with mode pty has one)", ErrNoTerminal, rec.ID, rec.Kind)
	case rec.Details.Session == nil || rec.Details.Session.Mode != ModePTY:
		return fmt.Errorf("%w: session %s runs in pipe mode, without a terminal (start_session with mode pty has one)", ErrNoTerminal, rec.ID)
	}
	return nil
}

// maxReplayBytes bounds how much of an ended session's output is replayed to
// draw its last screen: the screen is the end of its output.
const maxReplayBytes = 4 << 20

// Screen is what a PTY session's terminal shows: live, from the emulator fed
// as output arrives; for a session that ended, replayed from its stored
// output (its last 4 MiB) at its last size.
func (m *Manager) Screen(ctx context.Context, id string) (terminal.Screen, *record.Job, error) {
	if err := m.visible(ctx, id); err != nil {
		return terminal.Screen{}, nil, err
	}
	if j := m.liveJob(id); j != nil && j.term != nil {
		return j.term.Screen(), j.snapshot(), nil
	}
	o, err := m.outputOf(ctx, id)
	if err != nil {
		return terminal.Screen{}, nil, err
	}
	rec := o.record()
	if err := terminalProblem(rec); err != nil {
		return terminal.Screen{}, nil, err
	}
	if o.live != nil && o.live.term != nil { // ended between the two looks
		return o.live.term.Screen(), rec, nil
	}
	size := o.capture.Size(output.Both)
	from := max(0, size-maxReplayBytes)
	data, _, err := o.capture.Read(output.Both, from, int(size-from))
	if err != nil {
		return terminal.Screen{}, nil, err
	}
	s := rec.Details.Session
	return terminal.Replay(data, s.Rows, s.Cols), rec, nil
}

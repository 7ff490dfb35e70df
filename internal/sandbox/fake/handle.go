package fake

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// handle is one server's view of a fake container. Its end is observed once,
// by waitForEnd, which drains output, reads the verdict and removes the
// container, as the Docker handle does.
type handle struct {
	eng    *Engine
	c      *container
	downCh <-chan struct{} // the engine connection this handle was made on

	hasStdin  bool
	kept      bool          // adopted with its stdin (a workspace's job)
	stdinTurn chan struct{} // one writer (or closer) at a time
	stdinOnce sync.Once
	stdinDone bool // closed by CloseStdin or by the end (under stdinTurn)

	drained   chan struct{}
	done      chan struct{}
	destroyed chan struct{}
	destroyMu sync.Once
	status    sandbox.ExitStatus
}

func newHandle(e *Engine, c *container, downCh <-chan struct{}, stdin bool) *handle {
	return &handle{
		eng: e, c: c, downCh: downCh, hasStdin: stdin,
		stdinTurn: make(chan struct{}, 1),
		drained:   make(chan struct{}),
		done:      make(chan struct{}),
		destroyed: make(chan struct{}),
	}
}

func (h *handle) ContainerID() string { return h.c.info.ID }

func (h *handle) KeepsStdin() bool { return h.kept }

func (h *handle) WriteStdin(ctx context.Context, p []byte) (int, error) {
	if !h.hasStdin {
		return 0, sandbox.ErrNoStdin
	}
	select {
	case h.stdinTurn <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-h.stdinTurn }()
	if h.stdinDone {
		return 0, errStdinClosed
	}
	return h.c.stdin.write(ctx, p)
}

func (h *handle) CloseStdin() error {
	if !h.hasStdin {
		return nil
	}
	h.stdinTurn <- struct{}{}
	defer func() { <-h.stdinTurn }()
	h.stdinOnce.Do(func() {
		h.stdinDone = true
		h.c.stdin.closeWrite()
	})
	return nil
}

func (h *handle) Done() <-chan struct{} { return h.done }

// Status is valid once Done is closed (it waits for that).
func (h *handle) Status() sandbox.ExitStatus {
	<-h.done
	return h.status
}

func (h *handle) Signal(ctx context.Context, signal string) error {
	c, down := h.eng.lookup(h.c.info.ID)
	if down {
		return engineDown()
	}
	n, ok := signalNumber(signal)
	if !ok {
		return fmt.Errorf("invalid signal: %s", signal)
	}
	if c == nil || !c.isRunning() {
		return nil // already gone or not running: nothing left to signal
	}
	c.signal(n)
	return nil
}

// Destroy removes the container, which kills its process; idempotent.
// Resize: the fake has no terminals.
func (h *handle) Resize(context.Context, uint16, uint16) error { return sandbox.ErrNoTTY }

func (h *handle) Destroy(ctx context.Context) error {
	h.destroyMu.Do(func() { close(h.destroyed) })
	_, err := h.eng.remove(ctx, h.c.info.ID, true)
	return err
}

func (h *handle) wasDestroyed() bool {
	select {
	case <-h.destroyed:
		return true
	default:
		return false
	}
}

// follow copies the container's log from chunk index from to out, first
// skipping bytes already captured, until the process has ended and everything
// is delivered, or the engine connection breaks.
func (h *handle) follow(out sandbox.Output, from int, skipStdout, skipStderr int64) {
	defer close(h.drained)
	skip := map[sandbox.Stream]int64{sandbox.Stdout: skipStdout, sandbox.Stderr: skipStderr}
	idx := from
	for {
		h.c.mu.Lock()
		chunks := h.c.log[idx:]
		idx = len(h.c.log)
		ended, wake := h.c.ended, h.c.wake
		h.c.mu.Unlock()
		for _, ch := range chunks {
			p := ch.data
			if s := skip[ch.stream]; s > 0 {
				if int64(len(p)) <= s {
					skip[ch.stream] -= int64(len(p))
					continue
				}
				p, skip[ch.stream] = p[s:], 0
			}
			out.Write(ch.stream, p)
		}
		if ended {
			return
		}
		select {
		case <-wake:
		case <-h.downCh:
			return
		}
	}
}

func (h *handle) waitForEnd() {
	defer close(h.done)
	var waitErr error
	select {
	case <-h.c.exited:
	case <-h.downCh:
		waitErr = engineDown()
	}
	select {
	case <-h.drained:
	case <-time.After(drainTimeout):
	}
	h.status = h.verdict(waitErr)
	h.stdinTurnClose()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gone, err := h.eng.remove(ctx, h.c.info.ID, true)
	if err != nil {
		// A cleanup failure never replaces a known end; it is reported beside it.
		h.status.CleanupErr = fmt.Errorf("remove container %.12s: %w", h.c.info.ID, err)
	}
	if gone && !h.wasDestroyed() {
		// Nobody here removed it: it was removed from outside the server.
		h.status.Gone = true
	}
}

// stdinTurnClose makes later writes through this handle fail.
func (h *handle) stdinTurnClose() {
	if !h.hasStdin {
		return
	}
	select {
	case h.stdinTurn <- struct{}{}:
		h.stdinDone = true
		<-h.stdinTurn
	default:
		// A write is in progress: the process has ended, so it fails on its own.
	}
}

// verdict reads how the container ended, as the Docker handle's inspect does.
func (h *handle) verdict(waitErr error) sandbox.ExitStatus {
	c, down := h.eng.lookup(h.c.info.ID)
	if waitErr != nil {
		return sandbox.ExitStatus{ExitCode: -1, Err: waitErr}
	}
	if down {
		// Inspect fails, but the wait already told how the process ended.
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return sandbox.ExitStatus{ExitCode: h.c.exitCode}
	}
	if c == nil {
		return sandbox.ExitStatus{ExitCode: -1, Gone: !h.wasDestroyed()}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return sandbox.ExitStatus{
		ExitCode: c.exitCode, OOMKilled: c.oom,
		StartedAt: c.startedAt, FinishedAt: c.finishedAt, Files: c.returned,
	}
}

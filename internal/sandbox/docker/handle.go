package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// handle is one running container. Its end is observed once, by waitForEnd,
// which then drains output, reads the verdict from inspect and removes it.
type handle struct {
	rt         *Runtime
	id         string
	cancelWait context.CancelFunc

	stdin      net.Conn
	closeWrite func() error
	stdinTurn  chan struct{} // one writer (or closer) of stdin at a time
	stdinOnce  sync.Once
	stdinErr   error

	drained   chan struct{} // closed when the output stream ended
	done      chan struct{}
	destroyed chan struct{} // closed by Destroy: the end is ours, not a surprise
	destroyMu sync.Once
	status    sandbox.ExitStatus
}

func newHandle(rt *Runtime, id string, cancelWait context.CancelFunc) *handle {
	return &handle{
		rt: rt, id: id, cancelWait: cancelWait,
		stdinTurn: make(chan struct{}, 1),
		drained:   make(chan struct{}),
		done:      make(chan struct{}),
		destroyed: make(chan struct{}),
	}
}

func (h *handle) ContainerID() string { return h.id }

func (h *handle) WriteStdin(ctx context.Context, p []byte) (int, error) {
	if h.stdin == nil {
		return 0, sandbox.ErrNoStdin
	}
	select {
	case h.stdinTurn <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-h.stdinTurn }()
	// The connection's write deadline carries ctx's end into the blocked write.
	deadline, _ := ctx.Deadline()
	_ = h.stdin.SetWriteDeadline(deadline)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		_ = h.stdin.SetWriteDeadline(time.Unix(1, 0))
	})
	n, err := h.stdin.Write(p)
	if !stop() {
		<-fired
	}
	_ = h.stdin.SetWriteDeadline(time.Time{})
	if err != nil && (ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)) {
		// The connection's deadline can fire a moment before ctx's own timer.
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		return n, context.DeadlineExceeded
	}
	return n, err
}

func (h *handle) CloseStdin() error {
	if h.stdin == nil {
		return nil
	}
	h.stdinTurn <- struct{}{}
	defer func() { <-h.stdinTurn }()
	h.stdinOnce.Do(func() { h.stdinErr = h.closeWrite() })
	return h.stdinErr
}

func (h *handle) Done() <-chan struct{} { return h.done }

// Status is valid once Done is closed.
func (h *handle) Status() sandbox.ExitStatus {
	<-h.done
	return h.status
}

func (h *handle) Signal(ctx context.Context, signal string) error {
	_, err := h.rt.cli.ContainerKill(ctx, h.id, client.ContainerKillOptions{Signal: signal})
	if err != nil && (cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err)) {
		return nil // already gone or not running: nothing left to signal
	}
	return h.rt.engineErr(err)
}

// Destroy removes the container, which kills every process in it.
func (h *handle) Destroy(ctx context.Context) error {
	h.destroyMu.Do(func() { close(h.destroyed) })
	return h.rt.Remove(ctx, h.id)
}

// streamWriter feeds one stream into the Output, first skipping bytes that an
// earlier server process already captured.
type streamWriter struct {
	out    sandbox.Output
	stream sandbox.Stream
	skip   int64
}

func (w *streamWriter) Write(p []byte) (int, error) {
	n := len(p)
	if w.skip > 0 {
		if int64(len(p)) <= w.skip {
			w.skip -= int64(len(p))
			return n, nil
		}
		p = p[w.skip:]
		w.skip = 0
	}
	w.out.Write(w.stream, p)
	return n, nil
}

func (h *handle) copyOutput(src io.Reader, out sandbox.Output, skipStdout, skipStderr int64, closeSrc func()) {
	defer close(h.drained)
	defer closeSrc()
	_, _ = stdcopy.StdCopy(
		&streamWriter{out: out, stream: sandbox.Stdout, skip: skipStdout},
		&streamWriter{out: out, stream: sandbox.Stderr, skip: skipStderr},
		src)
}

func (h *handle) waitForEnd(wait client.ContainerWaitResult) {
	defer close(h.done)
	defer h.cancelWait()
	var waitErr error
	waitCode := int64(-1)
	select {
	case res := <-wait.Result:
		waitCode = res.StatusCode
	case err := <-wait.Error:
		waitErr = err
	}
	// The process tree is gone once PID 1 ends, so the stream closes promptly;
	// the bound only guards against an engine that never closes it.
	select {
	case <-h.drained:
	case <-time.After(drainTimeout):
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	h.status = h.verdict(ctx, waitErr)
	if h.status.Err != nil && waitErr == nil && waitCode >= 0 {
		// Inspect failed, but the wait already told how the process ended.
		h.status = sandbox.ExitStatus{ExitCode: int(waitCode)}
	}
	if h.stdin != nil {
		h.stdin.Close()
	}
	gone, err := h.rt.remove(ctx, h.id)
	if err != nil {
		// A cleanup failure never replaces a known end; it is reported beside it.
		h.status.CleanupErr = fmt.Errorf("remove container %.12s: %w", h.id, err)
	}
	if gone && !h.wasDestroyed() {
		// Nobody here removed it: it was removed from outside the server.
		h.status.Gone = true
	}
}

// verdict reads how the container ended from the engine: exit code and the
// OOM flag, which the engine sets when the kernel killed any of its processes.
func (h *handle) verdict(ctx context.Context, waitErr error) sandbox.ExitStatus {
	info, err := h.rt.cli.ContainerInspect(ctx, h.id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return sandbox.ExitStatus{ExitCode: -1, Gone: !h.wasDestroyed()}
		}
		if waitErr == nil {
			waitErr = err
		}
		return sandbox.ExitStatus{ExitCode: -1, Err: h.rt.engineErr(waitErr)}
	}
	st := info.Container.State
	if st == nil {
		return sandbox.ExitStatus{ExitCode: -1, Err: errors.New("engine returned no container state")}
	}
	if st.Status == container.StateRunning && waitErr != nil {
		return sandbox.ExitStatus{ExitCode: -1, Err: h.rt.engineErr(waitErr)}
	}
	return sandbox.ExitStatus{
		ExitCode:   st.ExitCode,
		OOMKilled:  st.OOMKilled,
		StartedAt:  parseTime(st.StartedAt),
		FinishedAt: parseTime(st.FinishedAt),
	}
}

func (h *handle) wasDestroyed() bool {
	select {
	case <-h.destroyed:
		return true
	default:
		return false
	}
}

package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// The client side of the supervisor protocol (frames, stdin flow control,
// output) is a supervisor.Client; this file is what Docker adds to it.

// handle is one sandbox: a container whose main process is the supervisor.
// Frames from the supervisor arrive on the container's stdout; frames to it
// go to its stdin. Its end is observed once, by waitForEnd.
type handle struct {
	rt                  *Runtime
	id                  string
	cancelWait          context.CancelFunc
	supervisor.Attached           // the supervisor's stream
	conn                io.Closer // the attach connection; nil when adopted
	followsLog          bool      // output comes from the engine's log (adopted)
	// execID is set when the job runs as an exec of the supervisor in a
	// workspace's container (kill mode "tree"): ending the job never
	// touches the container.
	execID string
	// ws is set when the job is a channel of a workspace daemon's stream
	// (kill mode "tree"), key names it there.
	ws  *supervisor.Daemon
	key string

	launched  chan struct{} // closed by Launch
	done      chan struct{}
	destroyed chan struct{} // closed by Destroy: the end is ours, not a surprise
	destroyMu sync.Once
	status    sandbox.ExitStatus
	prepared  sandbox.Spec // the spec it was made with (warm sandboxes)
	// tunnel is the job's egress tunnel (network egress on Podman), closed with it.
	tunnel *sandbox.Tunnel
	// renameMu orders a claimed warm container's rename before its removal:
	// Docker 20.10 can keep listing a container renamed while it was being
	// removed. noRename is set once the removal is due.
	renameMu sync.Mutex
	noRename bool
}

func newHandle(rt *Runtime, id string, cancelWait context.CancelFunc) *handle {
	return &handle{
		rt: rt, id: id, cancelWait: cancelWait,
		Attached:  supervisor.Attach(),
		launched:  make(chan struct{}),
		done:      make(chan struct{}),
		destroyed: make(chan struct{}),
	}
}

// setConn makes conn the way to the supervisor.
func (h *handle) setConn(conn interface {
	supervisor.DeadlineWriter
	io.Closer
}) {
	h.conn = conn
	h.C.W = supervisor.ConnWriter(conn)
}

// ContainerID is the container's id; a workspace daemon's job adds its key,
// by which a later server re-attaches it.
func (h *handle) ContainerID() string {
	if h.ws != nil {
		return h.id + "/" + h.key
	}
	return h.id
}

// shared says whether the job runs in a workspace's container, which ending
// the job never touches.
func (h *handle) shared() bool { return h.execID != "" || h.ws != nil }

func (h *handle) Done() <-chan struct{} { return h.done }

// Status is valid once Done is closed.
func (h *handle) Status() sandbox.ExitStatus {
	<-h.done
	return h.status
}

// ended says whether the sandbox is gone (or going): no input can reach it.
func (h *handle) ended() bool { return h.C.Ended() }

// Signal delivers a signal to the job: through the supervisor while attached,
// else through the engine (init passes it to the supervisor, which passes it on).
func (h *handle) Signal(ctx context.Context, signal string) error {
	if attached, err := h.SignalFrame(ctx, signal); attached && (err == nil || h.shared()) {
		return err
	}
	if h.shared() {
		return nil // the exec has ended: nothing left to signal (never the shared container)
	}
	_, err := h.rt.cli.ContainerKill(ctx, h.id, client.ContainerKillOptions{Signal: signal})
	if notRunning(err) {
		return nil // already gone or not running: nothing left to signal
	}
	return h.rt.engineErr(err)
}

// Destroy removes the container, which kills every process in it. A job in a
// workspace's container is killed by its supervisor (Kill frame: its whole
// process tree, setsid'd descendants too); the container stays.
func (h *handle) Destroy(ctx context.Context) error {
	h.destroyMu.Do(func() { close(h.destroyed) })
	if h.shared() {
		if h.ended() {
			return nil
		}
		if err := h.C.WriteFrame(ctx, proto.TypeKill, nil); err != nil && !h.ended() {
			// An exec's supervisor kills the job by itself once its input
			// is gone (kill_on_detach); closing our end makes sure it sees
			// that. A daemon's job waits for the next stream's Kill.
			if h.execID != "" {
				h.conn.Close()
			}
			return fmt.Errorf("kill the job in workspace container %.12s: %w", h.id, err)
		}
		return nil
	}
	h.settleRename()
	return h.rt.Remove(ctx, h.id)
}

// renameForJob names a claimed warm container after its job and the job's
// kind (List reads them: its labels were written before the job existed),
// unless the container's removal is already due.
func (h *handle) renameForJob(jobID, kind string) {
	h.renameMu.Lock()
	defer h.renameMu.Unlock()
	if h.noRename || h.ended() {
		return // a short job: its container is going anyway
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = h.rt.cli.ContainerRename(ctx, h.id, client.ContainerRenameOptions{NewName: claimedName(jobID, kind)})
}

// settleRename cancels a rename not yet begun and waits for one under way,
// so the container's removal never overlaps it.
func (h *handle) settleRename() {
	h.renameMu.Lock()
	h.noRename = true
	h.renameMu.Unlock()
}

func (h *handle) wasDestroyed() bool {
	select {
	case <-h.destroyed:
		return true
	default:
		return false
	}
}

// readFrames demultiplexes the engine's stream and acts on the supervisor's
// frames until the stream ends.
func (h *handle) readFrames(src io.Reader, closeSrc func()) {
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, &h.C.Diag, src)
		pw.CloseWithError(err)
	}()
	h.readParsed(pr, func() { pr.Close(); closeSrc() })
}

// readParsed acts on the supervisor's frames from r (already taken out of
// the engine's stream) until it ends.
func (h *handle) readParsed(r io.Reader, closeSrc func()) { h.C.ReadUntilEnd(r, closeSrc) }

// waitForEnd records how the sandbox ended once its supervisor reported (and
// its output is drained) or the engine says it stopped, then removes it.
// Done is closed before the removal: a job's result does not wait for it.
func (h *handle) waitForEnd(wait client.ContainerWaitResult) {
	defer h.cancelWait()
	var waitErr error
	waitCode := int64(-1)
	waited := false
	select {
	case <-h.C.Exited():
		// The supervisor's report: the job and every process of it have
		// ended and all its output has been handed on. The container's own
		// teardown (tens of milliseconds) is not the job's business.
	case <-h.C.Drained():
		// The supervisor's stream ended: with its Exit report, that is the
		// end; without one, the engine has the last word.
	case res := <-wait.Result:
		waitCode, waited = res.StatusCode, true
	case err := <-wait.Error:
		waitErr, waited = err, true
	}
	if waited {
		// The process tree is gone once the main process ends, so the stream
		// closes promptly; the bound guards against an engine that never closes it.
		select {
		case <-h.C.Drained():
		case <-time.After(drainTimeout):
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if h.C.Exit() == nil && h.followsLog {
		if !waited {
			select {
			case res := <-wait.Result:
				waitCode, waited = res.StatusCode, true
			case err := <-wait.Error:
				waitErr, waited = err, true
			case <-time.After(drainTimeout):
			}
		}
		h.rereadLog(ctx)
	}
	if e := h.C.Exit(); e != nil {
		h.status = supervisor.ExitStatus(e)
	} else if !h.shared() {
		if !waited {
			select {
			case res := <-wait.Result:
				waitCode = res.StatusCode
			case err := <-wait.Error:
				waitErr = err
			case <-time.After(drainTimeout):
			}
		}
		h.status = h.verdict(ctx, waitErr)
		if h.status.Err != nil && waitErr == nil && waitCode >= 0 {
			// Inspect failed, but the wait already told how the process ended.
			h.status = sandbox.ExitStatus{ExitCode: int(waitCode)}
		}
		if h.status.Err == nil && !h.status.Gone && !h.wasDestroyed() {
			if d := h.C.Diag.String(); d != "" && h.status.ExitCode != 0 {
				h.status.StartErr = fmt.Errorf("the sandbox supervisor ended without a report: %s", d)
			}
		}
	}
	if h.conn != nil {
		h.conn.Close()
	}
	if h.tunnel != nil {
		h.tunnel.Close()
	}
	if h.shared() {
		// A job in a workspace: the container is the workspace's, never removed here.
		if h.C.Exit() == nil && h.ws != nil {
			h.status = h.wsVerdict(ctx)
		} else if h.C.Exit() == nil {
			h.status = h.execVerdict(ctx)
		}
		close(h.done)
		return
	}
	if h.C.Exit() != nil {
		h.rt.removeLater(h.id, h.settleRename) // counted before Done, so Flush after Done waits for it
		close(h.done)
		return
	}
	// No report: an end that was not the job's own. Remove it now, and
	// learn whether someone else did first.
	h.settleRename()
	gone, err := h.rt.remove(ctx, h.id)
	if err != nil {
		h.status.CleanupErr = fmt.Errorf("remove container %.12s: %w", h.id, err)
	}
	if gone && !h.wasDestroyed() && h.status.Err == nil {
		// What the supervisor said as its container was taken away (pid 1
		// gone under it) is not why the job ended: the removal is.
		h.status.Gone, h.status.StartErr = true, nil
	}
	close(h.done)
}

// verdict reads how the container ended from the engine: exit code (the
// supervisor exits with the job's) and the OOM flag.
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

// rereadLog parses what the engine's log holds past the frames already read:
// a followed log can end when the container stops, a moment before the
// engine has written the last of its output (the supervisor's report).
func (h *handle) rereadLog(ctx context.Context) {
	logs, err := h.rt.cli.ContainerLogs(ctx, h.id, client.ContainerLogsOptions{ShowStdout: true})
	if err != nil {
		return
	}
	defer logs.Close()
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, logs)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	if _, err := io.CopyN(io.Discard, pr, h.C.Consumed()); err != nil {
		return
	}
	h.C.Parse(pr)
}

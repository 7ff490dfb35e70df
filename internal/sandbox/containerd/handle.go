package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/containerd/containerd/api/types/runc/options"
	"io"
	"os"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// handle is one sandbox: a container whose task's process is the
// supervisor. Frames to it go into its stdin FIFO; its frames are read
// from its stdout file. Its end is observed once, by waitForEnd.
type handle struct {
	rt   *Runtime
	id   string
	task client.Task
	supervisor.Attached
	stdin *os.File // nil when adopted
	// tunnel is the job's egress tunnel (network egress), closed with it.
	tunnel *sandbox.Tunnel
	exited chan struct{}
	exit   client.ExitStatus // valid once exited is closed

	launched  chan struct{}
	done      chan struct{}
	destroyed chan struct{}
	destroyMu sync.Once
	status    sandbox.ExitStatus
	prepared  sandbox.Spec
}

func newHandle(rt *Runtime, id string) *handle {
	return &handle{rt: rt, id: id, Attached: supervisor.Attach(), exited: make(chan struct{}),
		launched: make(chan struct{}), done: make(chan struct{}), destroyed: make(chan struct{})}
}

// Start runs spec in a fresh sandbox: prepare, then launch at once.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	h, err := r.prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	if err := h.launch(ctx, spec, out, false); err != nil {
		r.removeQuietly(h.id)
		return nil, err
	}
	return h, nil
}

// Prepare starts a sandbox whose supervisor waits for its job (a warm pool's).
func (r *Runtime) Prepare(ctx context.Context, spec sandbox.Spec) (sandbox.Warm, error) {
	spec.Kind, spec.JobID = sandbox.KindPool, ""
	h, err := r.prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &warm{h: h}, nil
}

// prepare creates the container and its task with the supervisor as its
// process, opens its streams and registers the wait before it starts it,
// so no output and no exit can be missed.
func (r *Runtime) prepare(ctx context.Context, spec sandbox.Spec) (h *handle, err error) {
	if err := r.check(spec); err != nil {
		return nil, err
	}
	img, err := r.image(ctx, spec.Image)
	if err != nil {
		return nil, err
	}
	id := newID()
	dir := r.ioDirOf(id)
	if err := dir.make(); err != nil {
		return nil, err
	}
	c, err := r.cli.NewContainer(ctx, id,
		client.WithImageName(img.Name()),
		client.WithNewSnapshot(id, img),
		client.WithNewSpec(specOpts(img, spec)...),
		client.WithContainerLabels(r.labels(spec)),
		client.WithRuntime(shimRuntime, r.shimOptions()))
	if err != nil {
		_ = dir.remove()
		return nil, r.engineErr(fmt.Errorf("create container: %w", err))
	}
	defer func() {
		if err != nil {
			r.removeQuietly(id)
		}
	}()
	stdin, err := dir.openStdin()
	if err != nil {
		return nil, err
	}
	task, err := c.NewTask(ctx, dir.creator())
	if err != nil {
		stdin.Close()
		return nil, r.engineErr(fmt.Errorf("create task: %w", err))
	}
	h = newHandle(r, id)
	h.task, h.stdin, h.prepared = task, stdin, spec
	h.C.W = supervisor.ConnWriter(stdin)
	if err := h.follow(spec.Limits.LogBytes, nil); err != nil {
		stdin.Close()
		return nil, err
	}
	if err := h.wait(); err != nil {
		stdin.Close()
		return nil, err
	}
	if err := task.Start(ctx); err != nil {
		stdin.Close()
		return nil, r.engineErr(fmt.Errorf("start task: %w", err))
	}
	go h.waitForEnd()
	return h, nil
}

// wait registers the task's exit: exited closes when it comes.
func (h *handle) wait() error {
	ch, err := h.task.Wait(context.Background())
	if err != nil {
		return h.rt.engineErr(fmt.Errorf("wait for task: %w", err))
	}
	go func() {
		h.exit = <-ch
		close(h.exited)
	}()
	return nil
}

// resume is where an adopted sandbox's output goes, past what was captured.
type resume struct {
	out                    sandbox.Output
	skipStdout, skipStderr int64
}

// follow reads the supervisor's frames from the stdout file and its own
// diagnostics from the stderr file until the task ended and the files are
// read. Adopted: output resumes past the skips, or, when an earlier reader
// gave the file's start back, from where it still holds data (frames found
// by resync, what came before is gone).
func (h *handle) follow(logBytes int64, adopted *resume) error {
	if logBytes <= 0 {
		logBytes = defaultLogBytes
	}
	dir := h.rt.ioDirOf(h.id)
	out, joinedAt, err := h.rt.follow(dir, stdoutName, h.exited)
	if err != nil {
		return err
	}
	out.keep = logBytes
	diag, _, err := h.rt.follow(dir, stderrName, h.exited)
	if err != nil {
		out.Close()
		return err
	}
	if adopted != nil {
		if joinedAt > 0 {
			h.C.JoinMidStream = true
			adopted.skipStdout, adopted.skipStderr = 0, 0
		}
		h.C.Out.Set(adopted.out, adopted.skipStdout, adopted.skipStderr)
	}
	go func() {
		_, _ = io.Copy(&h.C.Diag, diag)
		diag.Close()
	}()
	go h.C.ReadUntilEnd(out, func() { out.Close() })
	return nil
}

// launch hands a prepared sandbox its job: limits first (when they differ
// from those it was made with), then the spec frame.
func (h *handle) launch(ctx context.Context, spec sandbox.Spec, out sandbox.Output, resize bool) error {
	if resize && spec.Limits != h.prepared.Limits {
		if err := h.task.Update(ctx, client.WithResources(resources(spec.Limits, nil))); err != nil {
			return h.rt.engineErr(fmt.Errorf("set the sandbox's limits: %w", err))
		}
	}
	ps := supervisor.JobSpec(spec, defaultWorkDir)
	ps.TimeoutMS, ps.KillMode = backstop(spec.Timeout), proto.KillContainer
	h.C.HasStdin, h.C.TTY = spec.OpenStdin, spec.TTY != nil
	if err := ps.Validate(); err != nil {
		return err
	}
	payload, err := json.Marshal(ps)
	if err != nil {
		return err
	}
	if err := h.openTunnel(ctx, spec); err != nil {
		return err
	}
	h.C.Out.Set(out, 0, 0)
	close(h.launched)
	if err := h.C.WriteFrame(ctx, proto.TypeSpec, payload); err != nil {
		return h.rt.engineErr(fmt.Errorf("hand the sandbox its job: %w", err))
	}
	if resize && spec.JobID != "" {
		// A warm container's labels were written before its job existed:
		// they say whose it is now (List reads them), off the job's path.
		time.AfterFunc(relabelDelay, func() {
			if h.C.Ended() {
				return // a short job: its container is going anyway
			}
			ctx, cancel := waitCtx()
			defer cancel()
			if c, err := h.rt.cli.LoadContainer(ctx, h.id); err == nil {
				_, _ = c.SetLabels(ctx, map[string]string{sandbox.LabelJobID: spec.JobID, sandbox.LabelKind: spec.Kind})
			}
		})
	}
	return nil
}

// relabelDelay: a claimed container is relabelled only if its job still
// runs then, so the update never competes with a short job.
const relabelDelay = 200 * time.Millisecond

// deadlineBackstop is how long after a job's timeout its sandbox stops it by
// itself (for a server that is gone; the server stops it at the timeout).
const deadlineBackstop = time.Second

func backstop(timeout time.Duration) int64 {
	if timeout <= 0 {
		return 0
	}
	return (timeout + deadlineBackstop).Milliseconds()
}

// warm is a prepared sandbox waiting in a pool.
type warm struct{ h *handle }

func (w *warm) ContainerID() string    { return w.h.id }
func (w *warm) Ended() <-chan struct{} { return w.h.C.Drained() }
func (w *warm) Discard(ctx context.Context) error {
	return w.h.Destroy(ctx)
}

func (w *warm) Launch(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if spec.PoolKey() != w.h.prepared.PoolKey() {
		return nil, fmt.Errorf("warm sandbox %.12s has another shape than the job", w.h.id)
	}
	select {
	case <-w.h.C.Hello():
		if err := w.h.C.HelloErr(); err != nil {
			return nil, err
		}
	default:
		// Not yet heard from: the spec frame waits in its stdin.
	}
	if w.h.C.Ended() {
		return nil, fmt.Errorf("warm sandbox %.12s ended before its job came", w.h.id)
	}
	if err := w.h.launch(ctx, spec, out, true); err != nil {
		return nil, err
	}
	return w.h, nil
}

// Adopt resumes a container a previous server process started: the
// supervisor's frames are read back from its stdout file from the start,
// skipping job output already captured, and followed until the end.
func (r *Runtime) Adopt(ctx context.Context, containerID string, skipStdout, skipStderr int64, out sandbox.Output) (sandbox.Handle, error) {
	c, err := r.cli.LoadContainer(ctx, containerID)
	if errdefs.IsNotFound(err) {
		return nil, sandbox.ErrNotFound
	}
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("load container: %w", err))
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return nil, r.engineErr(err)
	}
	if labels[sandbox.LabelInstance] != r.instance {
		return nil, fmt.Errorf("container %s does not belong to this server", containerID)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("container %.12s has no task: it never started (or its containerd lost it)", containerID)
		}
		return nil, r.engineErr(fmt.Errorf("load task: %w", err))
	}
	h := newHandle(r, containerID)
	h.task = task
	close(h.launched)
	if err := h.wait(); err != nil {
		return nil, err
	}
	if err := h.follow(0, &resume{out, skipStdout, skipStderr}); err != nil {
		return nil, err
	}
	if labels[sandbox.LabelNetwork] == sandbox.NetworkEgress && r.egressProxy != nil {
		// Its tunnel went with the former server: a new one keeps its
		// grant working. One that cannot open leaves the job without
		// egress (its requests fail to connect), not without its result.
		_ = h.openTunnel(ctx, sandbox.Spec{Network: sandbox.NetworkEgress})
	}
	go h.waitForEnd()
	return h, nil
}

func (h *handle) ContainerID() string        { return h.id }
func (h *handle) Done() <-chan struct{}      { return h.done }
func (h *handle) Status() sandbox.ExitStatus { <-h.done; return h.status }

// Signal delivers a signal to the job: through the supervisor while its
// stdin is ours, else to the supervisor through containerd (it passes it on).
func (h *handle) Signal(ctx context.Context, signal string) error {
	if attached, err := h.SignalFrame(ctx, signal); attached && err == nil {
		return nil
	}
	sig := unix.SignalNum("SIG" + signal)
	if sig == 0 {
		return fmt.Errorf("unknown signal %q", signal)
	}
	err := h.task.Kill(ctx, sig)
	if errdefs.IsNotFound(err) || errdefs.IsFailedPrecondition(err) {
		return nil // already gone or not running: nothing left to signal
	}
	return h.rt.engineErr(err)
}

// Destroy removes the container, which kills every process in it.
func (h *handle) Destroy(ctx context.Context) error {
	h.destroyMu.Do(func() { close(h.destroyed) })
	return h.rt.Remove(ctx, h.id)
}

func (h *handle) wasDestroyed() bool {
	select {
	case <-h.destroyed:
		return true
	default:
		return false
	}
}

// waitForEnd records how the sandbox ended once its supervisor reported
// (and its output is drained) or the task exited, then removes it. Done is
// closed before the removal: a job's result does not wait for it.
func (h *handle) waitForEnd() {
	select {
	case <-h.C.Exited():
		// The supervisor's report: the job and every process of it ended
		// and all its output was handed on.
	case <-h.C.Drained():
	case <-h.exited:
		select {
		case <-h.C.Drained():
		case <-time.After(drainTimeout):
		}
	}
	if h.stdin != nil {
		h.stdin.Close()
	}
	if h.tunnel != nil {
		h.tunnel.Close()
	}
	if e := h.C.Exit(); e != nil {
		h.status = supervisor.ExitStatus(e)
		h.rt.removeLater(h.id)
		close(h.done)
		return
	}
	// No report: an end that was not the job's own.
	select {
	case <-h.exited:
	case <-time.After(drainTimeout):
	}
	ctx, cancel := waitCtx()
	defer cancel()
	st := sandbox.ExitStatus{ExitCode: -1}
	select {
	case <-h.exited:
		code, at, err := h.exit.Result()
		if err != nil {
			st.Err = h.rt.engineErr(fmt.Errorf("wait for task: %w", err))
		} else {
			st.ExitCode, st.FinishedAt = int(code), at
		}
	default:
		st.Err = fmt.Errorf("the supervisor's stream from container %.12s ended and its task still runs", h.id)
	}
	if st.Err == nil && !h.wasDestroyed() && st.ExitCode != 0 {
		if d := h.C.Diag.String(); d != "" {
			st.StartErr = fmt.Errorf("the sandbox supervisor ended without a report: %s", d)
		}
	}
	gone, err := h.rt.remove(ctx, h.id)
	if err != nil {
		st.CleanupErr = fmt.Errorf("remove container %.12s: %w", h.id, err)
	}
	if gone && !h.wasDestroyed() {
		st.Gone, st.StartErr = true, nil
	}
	h.status = st
	close(h.done)
}

// shimOptions name the runc the shim runs (Config.Runc), or leave it the
// shim's own.
func (r *Runtime) shimOptions() any {
	if r.runc == "" {
		return nil
	}
	return &options.Options{BinaryName: r.runc}
}

// Runc is the runc binary sandboxes run on: Config.Runc, else "" (the
// shim's own, runc on containerd's PATH).
func (r *Runtime) Runc() string { return r.runc }

package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// A workspace container's main process is the supervisor's daemon; the
// stream to it and the jobs' channels on it are supervisor.Daemons. Here is
// only how the stream is made: an exec of `sandboxer-supervisor connect`.

// daemonCmd is a workspace container's command: the supervisor's daemon.
var daemonCmd = []string{supervisorPath, proto.DaemonCommand}

// jobKey splits a workspace job's ContainerID (see sandbox.WorkspaceJob)
// into the container's id and the job's key on the daemon's stream; ok is
// false for any other container id.
func jobKey(id string) (containerID, key string, ok bool) {
	return strings.Cut(id, "/")
}

// engineID is the engine's id of a ContainerID (a workspace job's is its container's).
func engineID(id string) string {
	c, _, _ := jobKey(id)
	return c
}

// daemons makes the runtime's workspace streams.
func (r *Runtime) initDaemons() {
	r.daemons = &supervisor.Daemons{Dial: r.dialDaemon, Running: r.WorkspaceRunning, EngineErr: r.engineErr}
}

// usesDaemon says whether a workspace container runs the daemon (workspaces
// made before it run jobs as one exec each). The answer is kept per container.
func (r *Runtime) usesDaemon(ctx context.Context, containerID string) (bool, error) {
	r.execMu.Lock()
	v, ok := r.daemonMode[containerID]
	r.execMu.Unlock()
	if ok {
		return v, nil
	}
	info, err := r.cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, fmt.Errorf("workspace container %.12s: %w", containerID, sandbox.ErrNotFound)
		}
		return false, r.engineErr(err)
	}
	cmd := []string(nil)
	if info.Container.Config != nil {
		cmd = info.Container.Config.Cmd
	}
	v = len(cmd) == 2 && cmd[0] == daemonCmd[0] && cmd[1] == daemonCmd[1]
	r.execMu.Lock()
	if r.daemonMode == nil {
		r.daemonMode = map[string]bool{}
	}
	r.daemonMode[containerID] = v
	r.execMu.Unlock()
	return v, nil
}

func (r *Runtime) dialDaemon(ctx context.Context, containerID string, diag io.Writer) (supervisor.Stream, error) {
	// As root (with no capability, like every exec here): the jobs, uid
	// 1000, cannot signal it, so none can cut the server off its workspace.
	ex, err := r.cli.ExecCreate(ctx, containerID, client.ExecCreateOptions{
		User: "0:0", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		WorkingDir: defaultWorkDir, Cmd: []string{supervisorPath, proto.ConnectCommand},
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
			return supervisor.Stream{}, fmt.Errorf("workspace container %.12s is not running: %w", containerID, sandbox.ErrNotFound)
		}
		return supervisor.Stream{}, r.engineErr(fmt.Errorf("create exec: %w", err))
	}
	attach, err := r.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return supervisor.Stream{}, r.engineErr(fmt.Errorf("start exec: %w", err))
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, diag, attach.Reader)
		pw.CloseWithError(err)
	}()
	return supervisor.Stream{Conn: attach.Conn, R: pr, CloseR: func() { pr.Close(); attach.Close() }}, nil
}

// startDaemonJob runs spec on a new channel of the workspace's stream.
func (r *Runtime) startDaemonJob(ctx context.Context, containerID string, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	ch, pr, err := r.daemons.OpenJob(ctx, containerID, spec.JobID)
	if err != nil {
		return nil, err
	}
	h := newHandle(r, containerID, func() {})
	h.ws, h.key = ch.Stream(), ch.Key()
	h.setConn(ch)
	go h.readParsed(pr, func() { pr.Close() })
	go h.waitForEnd(client.ContainerWaitResult{})
	hh, err := h.launch(ctx, spec, out, false)
	if err != nil {
		ch.Close()
		return nil, err
	}
	return hh, nil
}

// adoptDaemonJob re-attaches a job a previous server started in a
// workspace: the daemon replays its output past what was captured.
func (r *Runtime) adoptDaemonJob(ctx context.Context, containerID, key string, skipStdout, skipStderr int64, out sandbox.Output) (sandbox.Handle, error) {
	if ok, err := r.usesDaemon(ctx, containerID); err != nil {
		return nil, err
	} else if !ok {
		return nil, sandbox.ErrNotFound
	}
	c, err := r.daemons.Conn(ctx, containerID)
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, sandbox.ErrNotFound // the workspace stopped: its jobs with it
		}
		return nil, err
	}
	ch, pr := supervisor.NewChannel(key, skipStdout, skipStderr)
	h := newHandle(r, containerID, func() {})
	h.ws, h.key = c, key
	h.setConn(ch)
	// The daemon kept the job's input and terminal for the next server.
	h.C.HasStdin, h.C.TTY, h.C.Kept = true, true, true
	close(h.launched)
	h.C.Out.Set(out, 0, 0) // the daemon sends only what was not captured
	// Reading first: the replay comes before the daemon's answer.
	go h.readParsed(pr, func() { pr.Close() })
	known, err := c.Attach(ctx, ch)
	if err != nil || !known {
		ch.EndChannel()
		if err == nil {
			err = sandbox.ErrNotFound
		}
		return nil, err
	}
	// Its workspace's egress tunnel went with the former server (Podman).
	_ = r.workspaceTunnel(ctx, containerID)
	go h.waitForEnd(client.ContainerWaitResult{})
	return h, nil
}

// wsVerdict is how a daemon job ended without its report.
func (h *handle) wsVerdict(ctx context.Context) sandbox.ExitStatus {
	return h.rt.daemons.Verdict(ctx, h.id, h.ws)
}

package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

var _ sandbox.ProcessInspector = (*Runtime)(nil)

// Processes runs ps inside the container (through the engine's exec, as the
// container's own user) and parses what it prints; the exec's own ps is left out.
func (r *Runtime) Processes(ctx context.Context, containerID string) ([]sandbox.Process, error) {
	return sandbox.ExecProcesses(r.execRun).Processes(ctx, containerID)
}

// KillProcess runs kill inside the container: it can reach only that
// container's processes, with the container user's rights.
func (r *Runtime) KillProcess(ctx context.Context, containerID string, pid int, signal string) error {
	return sandbox.ExecProcesses(r.execRun).KillProcess(ctx, containerID, pid, signal)
}

// execRun runs argv in the container (a sandbox.ExecRun).
func (r *Runtime) execRun(ctx context.Context, containerID string, argv []string) (string, string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	containerID = engineID(containerID) // a workspace job's: its container's
	created, err := r.cli.ExecCreate(ctx, containerID, client.ExecCreateOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		if notRunning(err) {
			return "", "", -1, fmt.Errorf("the sandbox is not running (%v)", err)
		}
		return "", "", -1, r.engineErr(err)
	}
	att, err := r.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", "", -1, r.engineErr(err)
	}
	defer att.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&sandbox.LimitWriter{W: &stdout, N: sandbox.MaxPsOutput}, &sandbox.LimitWriter{W: &stderr, N: 64 << 10}, att.Reader); err != nil && err != io.EOF {
		return "", "", -1, r.engineErr(err)
	}
	insp, err := r.cli.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
	gone := cerrdefs.IsNotFound(err) || (err != nil && (strings.Contains(err.Error(), "no such exec session") || strings.Contains(err.Error(), "no such container")))
	if (gone || err == nil && insp.ExitCode == 137) && stderr.Len() == 0 {
		// A kill that ended the sandbox's main process stops its
		// container, which takes the exec down with it (Docker: SIGKILL,
		// 137; Podman: its record too). It said nothing wrong: done. The
		// container may be still stopping when the exec is seen gone: it
		// is given a few seconds to say so (seen: "running" at once).
		for wait := 50 * time.Millisecond; ; wait *= 2 {
			c, cerr := r.cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
			if cerrdefs.IsNotFound(cerr) || cerr == nil && c.Container.State != nil && !c.Container.State.Running {
				return stdout.String(), "", 0, nil
			}
			if cerr != nil || wait > 2*time.Second {
				break
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
	}
	if err != nil {
		return "", "", -1, r.engineErr(err)
	}
	return stdout.String(), stderr.String(), insp.ExitCode, nil
}

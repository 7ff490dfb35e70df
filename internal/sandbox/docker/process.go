package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

var _ sandbox.ProcessInspector = (*Runtime)(nil)

// maxPsOutput caps what one listing reads.
const maxPsOutput = 4 << 20

// Processes runs ps inside the container (through the engine's exec, as the
// container's own user) and parses what it prints. The exec's own ps is left
// out.
func (r *Runtime) Processes(ctx context.Context, containerID string) ([]sandbox.Process, error) {
	out, err := r.execOutput(ctx, containerID, sandbox.PsCommand)
	if err != nil {
		return nil, err
	}
	return sandbox.ParsePs(out), nil
}

// KillProcess runs kill inside the container: it can reach only that
// container's processes, with the container user's rights.
func (r *Runtime) KillProcess(ctx context.Context, containerID string, pid int, signal string) error {
	argv, err := sandbox.KillCommand(pid, signal)
	if err != nil {
		return err
	}
	out, err := r.execOutput(ctx, containerID, argv)
	if err != nil {
		if strings.Contains(out+err.Error(), "No such process") {
			return sandbox.ErrNoSuchProcess
		}
		return err
	}
	return nil
}

// execOutput runs argv in the container and returns its stdout; a non-zero
// exit is an error carrying stderr.
func (r *Runtime) execOutput(ctx context.Context, containerID string, argv []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	containerID = engineID(containerID) // a workspace job's: its container's
	created, err := r.cli.ExecCreate(ctx, containerID, client.ExecCreateOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		if notRunning(err) {
			return "", fmt.Errorf("the sandbox is not running (%v)", err)
		}
		return "", r.engineErr(err)
	}
	att, err := r.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return "", r.engineErr(err)
	}
	defer att.Close()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&sandbox.LimitWriter{W: &stdout, N: maxPsOutput}, &sandbox.LimitWriter{W: &stderr, N: 64 << 10}, att.Reader); err != nil && err != io.EOF {
		return "", r.engineErr(err)
	}
	insp, err := r.cli.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
	if err != nil {
		return "", r.engineErr(err)
	}
	if insp.ExitCode != 0 {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "executable file not found") || insp.ExitCode == 126 || insp.ExitCode == 127 {
			return stderr.String(), fmt.Errorf("%s is not available in this sandbox's image (%s)", argv[0], msg)
		}
		return stderr.String(), fmt.Errorf("%s exited %d: %s", argv[0], insp.ExitCode, msg)
	}
	return stdout.String(), nil
}

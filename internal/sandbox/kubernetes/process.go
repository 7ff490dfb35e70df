package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

var _ sandbox.ProcessInspector = (*Runtime)(nil)

// execTimeout bounds a process listing or a kill.
const execTimeout = 15 * time.Second

// Processes runs ps inside the job's pod (pods/exec, as the container's own
// user, uid 1000) and parses what it prints; the exec's own ps is left out.
func (r *Runtime) Processes(ctx context.Context, containerID string) ([]sandbox.Process, error) {
	return sandbox.ExecProcesses(r.execRun).Processes(ctx, containerID)
}

// KillProcess runs kill inside the job's pod: it reaches only that pod's
// container's processes (its own pid namespace), with the job user's rights.
func (r *Runtime) KillProcess(ctx context.Context, containerID string, pid int, signal string) error {
	return sandbox.ExecProcesses(r.execRun).KillProcess(ctx, containerID, pid, signal)
}

// execRun runs argv in the pod's container (a sandbox.ExecRun); a
// workspace job's ContainerID names its pod.
func (r *Runtime) execRun(ctx context.Context, pod string, argv []string) (string, string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	pod, _, _ = strings.Cut(pod, "/")
	var stdout, stderr bytes.Buffer
	code, err := r.exec(ctx, pod, argv, nil, &sandbox.LimitWriter{W: &stdout, N: sandbox.MaxPsOutput}, &sandbox.LimitWriter{W: &stderr, N: 64 << 10})
	return stdout.String(), stderr.String(), code, err
}

// exec runs argv in the pod's container through pods/exec until it ends (or
// ctx does) and returns its exit code. A pod that is gone or not running is
// said so.
func (r *Runtime) exec(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	req := r.core.RESTClient().Post().Namespace(r.namespace).
		Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: argv,
			Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil}, paramCodec)
	ex, err := remotecommand.NewSPDYExecutor(r.cfg, "POST", req.URL())
	if err != nil {
		return -1, r.engineErr(fmt.Errorf("exec in pod %s: %w", pod, err))
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	var exit utilexec.CodeExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.Code, nil
	case apierrors.IsNotFound(err):
		return -1, fmt.Errorf("the sandbox is not running (pod %s is gone)", pod)
	case apierrors.IsBadRequest(err) && strings.Contains(err.Error(), "container not found") || strings.Contains(err.Error(), "not running") || strings.Contains(err.Error(), "does not have a host assigned"):
		return -1, fmt.Errorf("the sandbox is not running (%v)", err)
	}
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	return -1, r.engineErr(fmt.Errorf("exec in pod %s: %w", pod, err))
}

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
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

var _ sandbox.ProcessInspector = (*Runtime)(nil)

const (
	// maxExecOutput caps what one listing reads.
	maxExecOutput = 4 << 20
	// execTimeout bounds a process listing or a kill.
	execTimeout = 15 * time.Second
)

// Processes runs ps inside the job's pod (pods/exec, as the container's own
// user, uid 1000) and parses what it prints; the exec's own ps is left out.
func (r *Runtime) Processes(ctx context.Context, containerID string) ([]sandbox.Process, error) {
	out, err := r.execOutput(ctx, containerID, sandbox.PsCommand)
	if err != nil {
		return nil, err
	}
	return sandbox.ParsePs(out), nil
}

// KillProcess runs kill inside the job's pod: it reaches only that pod's
// container's processes (its own pid namespace), with the job user's rights.
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

// execOutput runs argv in the pod's container and returns its stdout; a
// non-zero exit is an error, with stderr returned as the output.
func (r *Runtime) execOutput(ctx context.Context, pod string, argv []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	pod, _, _ = strings.Cut(pod, "/") // a workspace job's: its pod's
	defer cancel()
	var stdout, stderr bytes.Buffer
	code, err := r.exec(ctx, pod, argv, nil, &sandbox.LimitWriter{W: &stdout, N: maxExecOutput}, &sandbox.LimitWriter{W: &stderr, N: 64 << 10})
	if err != nil {
		return "", err
	}
	if code != 0 {
		msg := strings.TrimSpace(stderr.String())
		if code == 126 || code == 127 || strings.Contains(msg, "executable file not found") {
			return stderr.String(), fmt.Errorf("%s is not available in this sandbox's image (%s)", argv[0], msg)
		}
		return stderr.String(), fmt.Errorf("%s exited %d: %s", argv[0], code, msg)
	}
	return stdout.String(), nil
}

// exec runs argv in the pod's container through pods/exec until it ends (or
// ctx does) and returns its exit code. A pod that is gone or not running is
// said so.
func (r *Runtime) exec(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	req := r.cs.CoreV1().RESTClient().Post().Namespace(r.namespace).
		Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: containerName, Command: argv,
			Stdin: stdin != nil, Stdout: stdout != nil, Stderr: stderr != nil}, scheme.ParameterCodec)
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

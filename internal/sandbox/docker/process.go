package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

var _ sandbox.ProcessInspector = (*Runtime)(nil)

// psFormat is what Processes asks ps for; args last, as it holds spaces.
const psFormat = "pid=,ppid=,user:32=,pcpu=,rss=,etimes=,args="

// maxPsOutput caps what one listing reads.
const maxPsOutput = 4 << 20

// Processes runs ps inside the container (through the engine's exec, as the
// container's own user) and parses what it prints. The exec's own ps is left
// out.
func (r *Runtime) Processes(ctx context.Context, containerID string) ([]sandbox.Process, error) {
	out, err := r.execOutput(ctx, containerID, []string{"ps", "-e", "-ww", "-o", psFormat})
	if err != nil {
		return nil, err
	}
	return parsePs(out), nil
}

func parsePs(out string) []sandbox.Process {
	var ps []sandbox.Process
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		ppid, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			continue
		}
		cpu, _ := strconv.ParseFloat(f[3], 64)
		rss, _ := strconv.ParseInt(f[4], 10, 64)
		et, _ := strconv.ParseInt(f[5], 10, 64)
		cmd := strings.Join(f[6:], " ")
		if strings.HasPrefix(cmd, "ps -e -ww -o "+psFormat) {
			continue // this listing itself
		}
		ps = append(ps, sandbox.Process{PID: pid, PPID: ppid, User: f[2], CPUPercent: cpu, RSSBytes: rss * 1024, ElapsedS: et, Command: cmd})
	}
	return ps
}

// KillProcess runs kill inside the container: it can reach only that
// container's processes, with the container user's rights.
func (r *Runtime) KillProcess(ctx context.Context, containerID string, pid int, signal string) error {
	if pid < 1 {
		return sandbox.ErrNoSuchProcess
	}
	switch signal {
	case "TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT":
	default:
		return fmt.Errorf("signal %q is not one of TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT", signal)
	}
	out, err := r.execOutput(ctx, containerID, []string{"kill", "-s", signal, strconv.Itoa(pid)})
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
	if _, err := stdcopy.StdCopy(&limitWriter{w: &stdout, n: maxPsOutput}, &limitWriter{w: &stderr, n: 64 << 10}, att.Reader); err != nil && err != io.EOF {
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

// limitWriter keeps the first n bytes and discards the rest.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Process is one process inside a sandbox, as the sandbox itself sees it: pid
// and parent pid are the container's, never the host's.
type Process struct {
	PID        int
	PPID       int
	User       string
	CPUPercent float64 // CPU time over the process's lifetime, as ps's %CPU
	RSSBytes   int64   // resident memory
	ElapsedS   int64   // seconds since it started
	Command    string  // its command line
}

// ProcessInspector lists and signals the processes inside a runtime's
// sandboxes. It only ever reaches into the container it is given (through
// the engine's exec); pids are container pids.
type ProcessInspector interface {
	// Processes lists the processes of a running sandbox.
	Processes(ctx context.Context, containerID string) ([]Process, error)
	// KillProcess sends signal (a name: TERM, KILL, INT, HUP, QUIT, USR1,
	// USR2, STOP, CONT) to pid inside the sandbox.
	KillProcess(ctx context.Context, containerID string, pid int, signal string) error
}

// ErrNoSuchProcess: the pid is not a process of that sandbox.
var ErrNoSuchProcess = errors.New("no such process in this sandbox")

// psFormat is what PsCommand asks ps for; args last, as it holds spaces.
const psFormat = "pid=,ppid=,user:32=,pcpu=,rss=,etimes=,args="

// PsCommand is the command a ProcessInspector runs inside a sandbox (as its
// own user) to list its processes; ParsePs reads what it prints.
var PsCommand = []string{"ps", "-e", "-ww", "-o", psFormat}

// ParsePs reads PsCommand's output, leaving out the listing itself.
func ParsePs(out string) []Process {
	var ps []Process
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
		if strings.HasPrefix(cmd, strings.Join(PsCommand, " ")) {
			continue // this listing itself
		}
		ps = append(ps, Process{PID: pid, PPID: ppid, User: f[2], CPUPercent: cpu, RSSBytes: rss * 1024, ElapsedS: et, Command: cmd})
	}
	return ps
}

// KillCommand is the command a ProcessInspector runs inside a sandbox to
// send signal to pid: it reaches only that sandbox's processes, with its
// user's rights.
func KillCommand(pid int, signal string) ([]string, error) {
	if pid < 1 {
		return nil, ErrNoSuchProcess
	}
	switch signal {
	case "TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT":
	default:
		return nil, fmt.Errorf("signal %q is not one of TERM, KILL, INT, HUP, QUIT, USR1, USR2, STOP, CONT", signal)
	}
	return []string{"kill", "-s", signal, strconv.Itoa(pid)}, nil
}

// ExecRun runs argv in a sandbox (its engine's exec, as the sandbox's own
// user) and returns what it printed (each stream capped) and its exit code;
// err is the engine's failure, not the command's.
type ExecRun func(ctx context.Context, containerID string, argv []string) (stdout, stderr string, code int, err error)

// MaxPsOutput caps what one process listing reads.
const MaxPsOutput = 4 << 20

// ExecProcesses is a ProcessInspector made of an engine's exec: ps and kill
// run inside the sandbox, so they reach only its processes.
type ExecProcesses ExecRun

// Processes runs PsCommand in the sandbox and parses what it prints.
func (run ExecProcesses) Processes(ctx context.Context, containerID string) ([]Process, error) {
	out, err := run.output(ctx, containerID, PsCommand)
	if err != nil {
		return nil, err
	}
	return ParsePs(out), nil
}

// KillProcess runs KillCommand in the sandbox.
func (run ExecProcesses) KillProcess(ctx context.Context, containerID string, pid int, signal string) error {
	argv, err := KillCommand(pid, signal)
	if err != nil {
		return err
	}
	out, err := run.output(ctx, containerID, argv)
	if err != nil {
		if strings.Contains(out+err.Error(), "No such process") {
			return ErrNoSuchProcess
		}
		return err
	}
	return nil
}

// output returns argv's stdout; a non-zero exit is an error, with stderr
// returned as the output.
func (run ExecProcesses) output(ctx context.Context, containerID string, argv []string) (string, error) {
	stdout, stderr, code, err := run(ctx, containerID, argv)
	if err != nil {
		return "", err
	}
	if code != 0 {
		msg := strings.TrimSpace(stderr)
		if strings.Contains(msg, "executable file not found") || code == 126 || code == 127 {
			return stderr, fmt.Errorf("%s is not available in this sandbox's image (%s)", argv[0], msg)
		}
		return stderr, fmt.Errorf("%s exited %d: %s", argv[0], code, msg)
	}
	return stdout, nil
}

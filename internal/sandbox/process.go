package sandbox

import (
	"context"
	"errors"
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

package proto

import (
	"errors"
	"strings"
)

// # Prestart
//
// A warm sandbox may start its job's program before the job exists, so the
// job does not wait for the program's own start-up (a runtime such as node
// takes tens of milliseconds before it runs a line). The container's command
// is then
//
//	sandboxer-supervisor prestart '<JSON Prestart>'
//
// The supervisor writes Hello, then starts Prestart.Argv as it would start a
// job (the sandbox user, its own process group, the container's environment
// plus PrestartFDEnv, the container's working directory) with three fresh
// pipes as stdin, stdout and stderr and the read end of a control pipe as
// descriptor PrestartFD. Nothing of it is relayed yet.
//
// When the Spec arrives, the supervisor hands that process the job if and
// only if the job could not tell it apart from a process started now:
//
//   - the job's argv starts with Prestart.Argv, argv[0] resolving (with the
//     job's PATH and working directory) to the same executable;
//   - the job has no TTY and no Rlimits, and its stdin is a pipe;
//   - every environment variable whose name matches Prestart.EarlyEnv (the
//     ones the program reads at start-up) has the same value (or absence) in
//     the job's environment as in the prestarted process's;
//   - the process is still alive.
//
// Handing over: the supervisor writes one JSON PrestartJob (the job's whole
// argv, environment and working directory) to the control pipe and closes
// it; the program takes them and goes on as the job. From then on the job is
// that process, exactly as if it had been started at that moment (Started,
// relays, deadline, signals, kill and usage as for any job). Otherwise the
// supervisor kills the prestarted process group (SIGKILL), closes its pipes
// and starts the job as usual: each sandbox still runs exactly one job.
//
// What a prestarted program must do: read PrestartFD to end of file before it
// acts, exit if it read nothing, else apply the job's argv, env and cwd.

// PrestartCommand is the supervisor's mode for a warm sandbox with a
// prestarted program.
const PrestartCommand = "prestart"

// PrestartFD is the descriptor on which a prestarted program reads its job.
const PrestartFD = 3

// PrestartFDEnv tells a prestarted program which descriptor that is.
const PrestartFDEnv = "SANDBOXER_PRESTART_FD"

// Prestart says what a warm sandbox starts ahead of its job.
type Prestart struct {
	// Argv is the program, started with no further arguments; a job whose
	// argv starts with it may be handed to it.
	Argv []string `json:"argv"`
	// EarlyEnv are names of environment variables the program reads when it
	// starts (a trailing * matches any suffix): a job that sets any of them
	// differently runs as a new process.
	EarlyEnv []string `json:"early_env,omitempty"`
	// LateEnv are exact names matching EarlyEnv that the program reads
	// again after it takes its job (node's NODE_PATH, for one): a job may
	// set them differently and still be handed over.
	LateEnv []string `json:"late_env,omitempty"`
}

// PrestartJob is what a prestarted program reads on PrestartFD.
type PrestartJob struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
}

// Validate checks a Prestart.
func (p *Prestart) Validate() error {
	s := Spec{Argv: p.Argv, KillMode: KillContainer}
	if err := s.Validate(); err != nil {
		return err
	}
	for _, e := range p.EarlyEnv {
		if e == "" || e == "*" {
			return errors.New("prestart: an early_env pattern is empty or matches every variable")
		}
	}
	for _, e := range p.LateEnv {
		if e == "" || strings.ContainsAny(e, "=*") {
			return errors.New("prestart: a late_env name is empty or holds '=' or '*'")
		}
	}
	return nil
}

// EarlyEnvMatch says whether the variable name matches one of patterns.
func EarlyEnvMatch(patterns []string, name string) bool {
	for _, p := range patterns {
		if pre, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, pre) {
				return true
			}
		} else if name == p {
			return true
		}
	}
	return false
}

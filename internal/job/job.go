// Package job owns jobs: their state machine (queued → running → a final
// status), limits, concurrency slots, output capture, persistence and restart
// recovery. Tools call it; it calls the sandbox runtime.
package job

import (
	"cmp"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Kinds.
const (
	KindCommand = "command"
	KindScript  = "script"
	KindSession = sandbox.KindSession
	// KindProbe labels short-lived sandboxes that are not jobs (Probe).
	KindProbe = "probe"
)

// Request is what a tool asks the manager to run, already validated.
type Request struct {
	Kind     string
	Command  string   // what the agent asked for, as recorded
	Cmd      []string // argv in the container
	Language string
	Image    string
	// Runtime is the OCI runtime of its sandbox (a template's or a
	// snapshot's, lang.Language.Runtime); "" = the policy's runtime.
	Runtime   string
	Workspace string
	Cwd       string
	Env       []string
	// Stdin is written to the process and then closed when non-nil.
	Stdin []byte
	// Detach returns from Submit before the sandbox has started (background
	// jobs); a start failure is then recorded as failed/start_error.
	Detach bool
	// KeepStdinOpen leaves stdin open for send_input; otherwise it is closed at start.
	KeepStdinOpen bool
	// Limits are the policy's limits as resolved for this request.
	Limits  policy.Resolved
	Network string
	// Egress, with Network egress, is the job's own allowlist (within the
	// policy's egress.allow); nil = the policy's whole list.
	Egress []string
	// Secrets are the policy's secrets the job uses (sandbox.Spec.Secrets).
	Secrets []sandbox.SecretUse
	// TTY runs the job on a terminal of this size (pty sessions).
	TTY *sandbox.TTY
	// Mounts are engine volumes mounted into the job's sandbox (dependency caches).
	Mounts []sandbox.Mount
	// Prestart lets a warm sandbox start the job's program ahead (sandbox.Prestart).
	Prestart *sandbox.Prestart
	// Figures: the job's image captures figures (proto.FiguresEnv) and
	// they come back after it. Returns are patterns of files (relative to
	// Cwd) it returns: their content from a fresh sandbox, their names from
	// a workspace, which keeps them.
	Figures bool
	Returns []string
	// Details are kept with the job's record (a session's terminal, a script's source).
	Details record.Details
	// ExitReason, when set, names the reason of a non-zero exit the process
	// made on its own, from the first ExitReasonHeadBytes of its stderr
	// (e.g. compile_error from a script driver's compile block); "" keeps
	// exit_code. It lives in memory only: a job adopted after a restart ends
	// with exit_code.
	ExitReason func(stderrHead []byte) string
}

// ExitReasonHeadBytes is how much of stderr Request.ExitReason sees.
const ExitReasonHeadBytes = 256

// SandboxLimits turns resolved policy limits into a sandbox's hard ceilings;
// logBytes caps the engine's own log of the container.
func SandboxLimits(r policy.Resolved, logBytes int64) sandbox.Limits {
	return sandbox.Limits{
		MemoryBytes: r.MemoryBytes, NanoCPUs: r.NanoCPUs, Pids: r.Pids,
		OpenFiles: r.OpenFiles, FileSizeBytes: r.FileSizeBytes,
		TmpBytes: r.TmpBytes, WorkdirBytes: r.WorkdirBytes, LogBytes: logBytes,
	}
}

// SandboxSpec is the sandbox a request runs in (its JobID is set by the caller).
func SandboxSpec(pol *policy.Policy, req Request) sandbox.Spec {
	return sandbox.Spec{
		Kind: req.Kind, Image: req.Image, Cmd: req.Cmd, Env: req.Env,
		WorkDir: req.Cwd, Network: req.Network, Egress: req.Egress, Runtime: cmp.Or(req.Runtime, pol.Runtime), EngineLog: pol.Output.EngineLog,
		OpenStdin: req.KeepStdinOpen || req.Stdin != nil,
		Limits:    SandboxLimits(req.Limits, pol.Output.MaxBytesPerJob),
		Timeout:   req.Limits.Timeout,
		TTY:       req.TTY,
		Workspace: req.Workspace,
		Mounts:    req.Mounts,
		Prestart:  req.Prestart,
		Secrets:   req.Secrets,
	}
}

// PoolSpec is the sandbox of a job in image with every default of the
// policy: what a warm pool keeps ready for the language of that image.
func PoolSpec(pol *policy.Policy, image string) (sandbox.Spec, error) {
	limits, err := pol.Resolve(policy.Request{})
	if err != nil {
		return sandbox.Spec{}, err
	}
	return SandboxSpec(pol, Request{Kind: sandbox.KindPool, Image: image, Cwd: DefaultCwd, Limits: limits, Network: pol.Network}), nil
}

// DefaultCwd is where a job starts unless it asks for a directory below it.
const DefaultCwd = "/workspace"

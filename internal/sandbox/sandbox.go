// Package sandbox is the container runtime contract: what to run with which
// limits (Spec), a running sandbox (Handle), how it ended (ExitStatus) and the
// typed errors callers act on. It imports no Docker code; internal/sandbox/docker
// implements it.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// Labels every container the server creates carries, so a restarted server can
// find, adopt or remove what it made (and only what it made).
const (
	LabelManaged  = "dev.sandboxer.managed"  // always "true"
	LabelInstance = "dev.sandboxer.instance" // which state directory it belongs to
	LabelServer   = "dev.sandboxer.server"   // which server process made it (its serverlock identity)
	LabelJobID    = "dev.sandboxer.job-id"
	LabelKind     = "dev.sandboxer.kind"    // job kind: command, script, session, doctor
	LabelNetwork  = "dev.sandboxer.network" // the spec's network ("" none): an adopting server reopens an egress tunnel
)

// Limits are hard ceilings applied to one container.
type Limits struct {
	MemoryBytes   int64 // memory; swap is set equal, so no swap is used
	NanoCPUs      int64 // CPU quota, 1e9 = one CPU
	Pids          int64
	OpenFiles     int64 // RLIMIT_NOFILE
	FileSizeBytes int64 // RLIMIT_FSIZE
	TmpBytes      int64 // size of the /tmp tmpfs
	WorkdirBytes  int64 // size of the working directory tmpfs
	LogBytes      int64 // cap of Docker's own (local driver) log of this container
}

// Spec says what to run in a fresh sandbox.
type Spec struct {
	JobID   string
	Kind    string
	Image   string
	Cmd     []string // argv; never passed through a host shell
	Env     []string // KEY=VALUE, already validated
	WorkDir string   // absolute path inside the container; a tmpfs is mounted there
	Limits  Limits
	Network string // "none" unless the policy allows another mode (NetworkEgress among them)
	// Egress, on network NetworkEgress, is the job's own allowlist (within
	// the policy's); nil = the policy's.
	Egress  []string
	Runtime string // OCI runtime name ("" = engine default, e.g. "runsc")
	// EngineLog is the engine's own log of the container: "local" (capped at
	// Limits.LogBytes, readable by Adopt) or "none".
	EngineLog string
	// OpenStdin keeps the process's stdin attached so it can be written later;
	// otherwise stdin is closed at start.
	OpenStdin bool
	// Timeout is the job's deadline, enforced inside the sandbox too, so a
	// job stops on time even when no server is watching. 0 = none.
	Timeout time.Duration
	// TTY runs the process on a terminal of this size (sessions); nil = pipes.
	TTY *TTY
	// Workspace names the workspace the job runs in ("" = a fresh sandbox):
	// a runtime that knows workspaces (see WorkspaceRuntime) runs it in that
	// workspace's container instead of a new one.
	Workspace string
	// Mounts are engine volumes mounted into the sandbox (never host paths).
	// A spec with mounts is never served from the warm pool (see PoolKey).
	Mounts []Mount
	// Files are written in the sandbox before the job starts (paths under
	// proto.FilesDir): the egress proxy's CA for a job with secrets.
	Files []proto.File
	// Collect names the files the job returns (its figures, its returns
	// patterns): the supervisor sends them after the job and the handle's
	// ExitStatus carries them.
	Collect *proto.Collect
	// Secrets are the policy's secrets the job uses: the egress runtime
	// puts each in the job's environment as its placeholder (a fresh one
	// when empty) and swaps the value in at its proxy (internal/egress); an
	// engine never sees a value.
	Secrets []SecretUse
	// Prestart, when set, lets a warm sandbox of this shape start Cmd's
	// program before its job comes (see Prestart). A runtime may ignore it.
	Prestart *Prestart
}

// Prestart is a program a warm sandbox may start ahead of its job: Argv, a
// prefix of the job's Cmd, is started with the sandbox's own environment
// and waits for the job's argv, environment and working directory
// (internal/supervisor/proto, Prestart). The sandbox hands it the job only
// when no variable named by EarlyEnv (those the program reads at start-up;
// a trailing * matches any suffix) differs; otherwise it discards it and
// starts the job anew. LateEnv names variables matching EarlyEnv that the
// program reads again once it has its job: they may differ.
type Prestart struct {
	Argv     []string
	EarlyEnv []string
	LateEnv  []string
}

// SecretUse is a secret as a job holds it: its name (the variable in the
// sandbox) and its placeholder, unique to the job or workspace.
type SecretUse struct {
	Name        string `json:"name"`
	Placeholder string `json:"placeholder"`
}

// Mount is a named engine volume mounted at Target.
type Mount struct {
	Volume   string
	Target   string
	ReadOnly bool
	// Source, instead of Volume, is a directory on the engine's host that
	// the operator granted (policy mounts): always mounted read-only.
	Source string
}

// TTY is a terminal size.
type TTY struct{ Rows, Cols uint16 }

// Stream names one of a process's output streams.
type Stream int

const (
	Stdout Stream = 1
	Stderr Stream = 2
)

func (s Stream) String() string {
	if s == Stderr {
		return "stderr"
	}
	return "stdout"
}

// Output receives a sandbox's output as it is produced. Write must not block for long.
type Output interface {
	Write(stream Stream, p []byte)
}

// FileOutput is an Output that also takes the figures a job returns while
// it runs (a REPL's cells), each whole, as they come; ExitStatus.Files still
// lists them all at the end.
type FileOutput interface {
	Output
	File(f proto.ReturnedFile)
}

// Usage is what a job's whole process tree used.
type Usage struct {
	CPUMS           int64 // user + system CPU time
	PeakMemoryBytes int64 // peak memory of the tree (the sandbox's cgroup)
	WallMS          int64 // from the job's start to its main process's end
}

// ExitStatus is how a sandbox's main process ended.
type ExitStatus struct {
	Usage      Usage // zero when the runtime could not measure it
	TimedOut   bool  // the sandbox enforced the job's deadline itself
	ExitCode   int
	OOMKilled  bool  // from the engine, not guessed from exit 137
	Gone       bool  // the container vanished (removed from outside) before its end was seen
	Err        error // the engine failed while waiting; the end is unknown
	CleanupErr error // removing the sandbox afterwards failed (the end above still holds)
	StartErr   error // the job never ran: the sandbox said why (e.g. its command not found)
	// Stopped is set when the runtime itself stopped the job (e.g.
	// "disk_quota": its workspace filled past its quota); StoppedWhy says so in a sentence.
	Stopped, StoppedWhy string
	StartedAt           time.Time // as the engine saw it (zero if unknown)
	// GoBuilds are the Go modules the job built (proto.GoBuild: hostile
	// data), for the shared build cache's trusted builder.
	GoBuilds []proto.GoBuild
	// Files are what the job returned (Spec.Collect): figures and matched
	// files, whole, within proto's bounds (hostile data).
	Files      []proto.ReturnedFile
	FinishedAt time.Time
	// Stamps are the supervisor's instants of the job (call timelines).
	Stamps proto.Stamps
}

// Handle is one running sandbox.
type Handle interface {
	ContainerID() string
	// WriteStdin writes p to the process's stdin and returns how many bytes
	// went in. It gives up when ctx ends (a process that never reads must not
	// hold the caller), returning the count so far and ctx's error. Writes
	// (and CloseStdin) are serialized. ErrNoStdin when the spec did not open it.
	WriteStdin(ctx context.Context, p []byte) (int, error)
	// CloseStdin sends end-of-file to the process, after writes in progress;
	// idempotent.
	CloseStdin() error
	// Done is closed once the process has ended and its output has been
	// drained; Status is valid after that. The sandbox is removed then or
	// shortly after (a result does not wait for the engine's cleanup).
	Done() <-chan struct{}
	Status() ExitStatus
	// Signal sends a signal (e.g. "TERM", "INT", "KILL") to the job's process
	// group (with a TTY: the terminal's foreground group).
	Signal(ctx context.Context, signal string) error
	// Resize sets the terminal size of a job started with a TTY; ErrNoTTY otherwise.
	Resize(ctx context.Context, rows, cols uint16) error
	// Destroy kills everything in the sandbox and removes it; idempotent.
	Destroy(ctx context.Context) error
	// KeepsStdin says whether an adopted job's stdin (and terminal) still
	// reach it: a workspace daemon's job, whose daemon held them while no
	// server was attached. False for a job of a sandbox of its own, whose
	// stdin went with the attach of the server that started it.
	KeepsStdin() bool
}

// Container is a labelled container found on the engine.
type Container struct {
	ID       string
	JobID    string
	Kind     string
	Instance string
	Server   string // the server process that made it ("" for containers of older servers)
	Running  bool
}

// Runtime starts and manages sandboxes.
type Runtime interface {
	// Start creates, attaches and starts a sandbox; output flows to out until Done.
	Start(ctx context.Context, spec Spec, out Output) (Handle, error)
	// Adopt takes over a container a previous server process started: output
	// resumes after the first skipStdout/skipStderr bytes already captured.
	Adopt(ctx context.Context, containerID string, skipStdout, skipStderr int64, out Output) (Handle, error)
	// List returns the containers labelled as this instance's.
	List(ctx context.Context) ([]Container, error)
	// Remove kills and removes a container by id; idempotent.
	Remove(ctx context.Context, containerID string) error
	// Ping says whether the engine answers.
	Ping(ctx context.Context) error
	// ImageExists says whether an image is present locally. One the
	// engine is building answers false with an *ImageError whose Building
	// is set, and starting a sandbox on it fails with that error.
	ImageExists(ctx context.Context, ref string) (bool, error)
	Close() error
}

// StartFunc starts a job's sandbox: a Runtime's Start, or a workspace's
// exec (a layer that wraps either takes one).
type StartFunc func(ctx context.Context, spec Spec, out Output) (Handle, error)

// KindPool labels a sandbox started before its job (a warm pool's). Once a
// job takes it, List reports the job's id and kind for it (shortly after:
// the contract's warm suite), so a sweep treats it as the job's.
const KindPool = "pool"

// KindSession is an interactive session's sandbox (job.KindSession): a
// workspace may be frozen with an idle one in it.
const KindSession = "session"

// PoolKey is what a sandbox is, fixed when its container is made: a warm
// sandbox serves a job whose spec has the same key. Memory, CPU and pids are
// not part of it: they are set on the container when it is handed its job.
func (s Spec) PoolKey() string {
	l := s.Limits
	key := fmt.Sprintf("%s|%s|%s|%s|%s|tmp=%d|work=%d|log=%d|nofile=%d|fsize=%d",
		s.Image, s.WorkDir, s.Network, s.Runtime, s.EngineLog,
		l.TmpBytes, l.WorkdirBytes, l.LogBytes, l.OpenFiles, l.FileSizeBytes)
	// Mounts are fixed at creation: no warm sandbox (made without) serves them.
	for _, m := range s.Mounts {
		key += fmt.Sprintf("|mount=%s:%s:%s:%t", m.Volume, m.Source, m.Target, m.ReadOnly)
	}
	// So is what a warm sandbox starts ahead of its job.
	if p := s.Prestart; p != nil {
		key += fmt.Sprintf("|prestart=%q:%q:%q", p.Argv, p.EarlyEnv, p.LateEnv)
	}
	return key
}

// Warm is a sandbox started before its job: it runs nothing of a job until
// Launch, and serves exactly one.
type Warm interface {
	ContainerID() string
	// Launch hands the sandbox its job (spec's command, environment, stdin
	// and deadline), first setting spec's memory, CPU and pids limits on it.
	// Its PoolKey must equal the one the sandbox was prepared with.
	Launch(ctx context.Context, spec Spec, out Output) (Handle, error)
	// Ended is closed when the sandbox died (or was removed) before a job came.
	Ended() <-chan struct{}
	// Discard removes it; idempotent.
	Discard(ctx context.Context) error
}

// Warmer is a Runtime that can start a sandbox before its job is known.
type Warmer interface {
	Runtime
	// Prepare starts a sandbox of spec's shape (see PoolKey) whose job comes
	// later; spec.Kind should be KindPool.
	Prepare(ctx context.Context, spec Spec) (Warm, error)
}

// Typed errors. Callers test with errors.Is.
var (
	ErrEngineUnreachable = errors.New("docker engine unreachable")
	ErrImageMissing      = errors.New("image missing")
	ErrNotFound          = errors.New("container not found")
	ErrNoStdin           = errors.New("stdin is not open")
	ErrNoTTY             = errors.New("the job has no terminal")
)

// EngineError wraps ErrEngineUnreachable with where the engine was looked
// for and, when the engine is not Docker's, what to do about it.
type EngineError struct {
	Host string
	Err  error
	// Hint says how to reach the engine ("" for Docker's: start it, or
	// set DOCKER_HOST).
	Hint string
}

func (e *EngineError) Error() string {
	if e.Hint != "" {
		return fmt.Sprintf("engine unreachable at %s: %s (%v)", e.Host, e.Hint, e.Err)
	}
	return fmt.Sprintf("Docker engine unreachable at %s: start it (make engine, or systemctl start docker) or set DOCKER_HOST (%v)", e.Host, e.Err)
}
func (e *EngineError) Unwrap() error { return ErrEngineUnreachable }

// ImageError says which image is missing and how to build it.
type ImageError struct {
	Image string
	// Building: the engine is building it now (serve --build-images), so
	// it is there in minutes and a retry then succeeds.
	Building bool
}

func (e *ImageError) Error() string {
	if e.Building {
		return fmt.Sprintf("image %s is being built (this server builds the missing sandbox images after it starts): it is ready within minutes, try again then; list_languages says which are built", e.Image)
	}
	return fmt.Sprintf("image %s is not built: run `make images` (or `sandboxer images build`)", e.Image)
}
func (e *ImageError) Unwrap() error { return ErrImageMissing }

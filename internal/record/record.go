// Package record holds what sandboxer keeps about jobs, workspaces and
// agents' block-list entries: the records, their statuses and reasons, the
// filters that list them, and the errors for a record that is not there,
// apart from how they are stored (internal/store). Tools, the console and
// the managers speak these; only the store knows SQL.
package record

import (
	"encoding/json"
	"errors"
	"time"
)

// Errors about records; test with errors.Is. Each says what is missing or
// wrong in words an agent can read; callers add which one and what to do.
var (
	// ErrJobNotFound: no job with that id (for the caller's tenant).
	ErrJobNotFound = errors.New("no such job")
	// ErrTaskNotFound: no MCP task with that id (for the caller's tenant).
	ErrTaskNotFound = errors.New("no such task")
	// ErrJobExists: a job with that id is already stored.
	ErrJobExists = errors.New("job already exists")
	// ErrWorkspaceNotFound: no workspace of that name (for the caller's tenant).
	ErrWorkspaceNotFound = errors.New("no such workspace")
	// ErrWorkspaceExists: the caller's tenant has a workspace of that name.
	ErrWorkspaceExists = errors.New("workspace already exists")
	// ErrBadCursor: ListFilter.Cursor was not one a listing gave.
	ErrBadCursor = errors.New("bad pagination cursor")
)

// Job statuses: queued and running are active; the rest are final.
const (
	StatusQueued    = "queued"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusTimedOut  = "timed_out"
	StatusKilled    = "killed"
)

// Finished says whether a status is final.
func Finished(status string) bool {
	return status != StatusQueued && status != StatusRunning
}

// Reasons: why a job reached its status.
const (
	ReasonExitCode   = "exit_code"
	ReasonOOMKilled  = "oom_killed"
	ReasonStartError = "start_error"
	ReasonLost       = "lost"
	ReasonRequested  = "requested"
	ReasonCancelled  = "cancelled"
	ReasonShutdown   = "server_shutdown"
	ReasonTimeout    = "timeout"
	// ReasonCompileError: a script's compile step failed; its program never ran.
	ReasonCompileError = "compile_error"
	// ReasonIdle: a session got no input for its idle timeout.
	ReasonIdle = "idle"
)

// List page sizes.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// Limits are the resource limits a job was started with. Persisted as JSON.
type Limits struct {
	TimeoutMS   int64 `json:"timeout_ms"`
	MemoryBytes int64 `json:"memory_bytes"`
	NanoCPUs    int64 `json:"nano_cpus"`
	Pids        int64 `json:"pids"`
}

// Usage is what a job's process tree used.
type Usage struct {
	CPUMS           int64 `json:"cpu_ms"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	WallMS          int64 `json:"wall_ms"`
}

// Details is what only some kinds of job have. Each kind's part is nil for
// the others; add a kind's fields in its own struct.
type Details struct {
	Session *SessionDetails `json:"session,omitempty"`
	Script  *ScriptDetails  `json:"script,omitempty"`
	Task    *TaskDetails    `json:"task,omitempty"`
	// Returned are the figures and files the job returned (returns).
	Returned []ReturnedFile `json:"returned,omitempty"`
}

// ReturnedFile is a figure or a file a job returned. A fresh sandbox's are
// kept beside its output until the job is pruned; a workspace job's files
// stay in the workspace (Listed) and are named only.
type ReturnedFile struct {
	Kind   string `json:"kind"` // figure or file
	Path   string `json:"path"` // a figure's name; a file's path, relative to the job's working directory
	Size   int64  `json:"size"`
	MIME   string `json:"mime"`
	Width  int    `json:"width,omitempty"` // a figure's pixels
	Height int    `json:"height,omitempty"`
	Listed bool   `json:"listed,omitempty"` // in the workspace, not kept with the job
}

// Task is an MCP task (a task-augmented tools/call): a job's (JobID set,
// the same id; its state is the job's) or a call the server runs itself
// (benchmark_script, install_packages), whose status and result are here.
type Task struct {
	ID       string
	Tenant   string // set from the context at CreateTask
	Tool     string
	JobID    string
	Status   string          // working, input_required, completed, failed, cancelled (a job's task: its job says)
	Message  string          // the status message once it ended
	Result   json.RawMessage // the call's result (CallToolResult JSON), once it ended
	ServerID string          // the server that runs it
	// Pending, while the task is input_required, is the held tools/call's
	// params: what runs once a person approves it (mcpserver's approvals).
	Pending              json.RawMessage
	TTLMS                int64
	CreatedAt, UpdatedAt time.Time
}

// Task statuses (MCP's).
const (
	TaskWorking = "working"
	// TaskInputRequired: a call held for a person's approval, not run yet.
	TaskInputRequired = "input_required"
	TaskCompleted     = "completed"
	TaskFailed        = "failed"
	TaskCancelled     = "cancelled"
)

// TaskDetails mark a job started by a task-augmented tools/call (MCP tasks):
// the task's id is the job's, and tasks/result rebuilds the call's result
// from the record with these.
type TaskDetails struct {
	Tool  string `json:"tool"`   // the tool the call named
	TTLMS int64  `json:"ttl_ms"` // how long the task is kept after it was created
	// Render is the tool's own account of the call (its output argument,
	// ...): what it needs, beside the record, to build the call's result.
	Render json.RawMessage `json:"render,omitempty"`
}

// SessionDetails describes an interactive session's terminal.
type SessionDetails struct {
	Mode          string `json:"mode"` // "pty" or "pipe"
	Rows          int    `json:"rows,omitempty"`
	Cols          int    `json:"cols,omitempty"`
	Name          string `json:"name,omitempty"`
	IdleTimeoutMS int64  `json:"idle_timeout_ms,omitempty"`
	// IdleDeadline is when the session ends unless it gets input first
	// (kept current in memory while it runs; stored when it ends).
	IdleDeadline time.Time `json:"idle_deadline,omitzero"`
}

// ScriptDetails keeps what a script ran: its source and how it was built.
type ScriptDetails struct {
	Source       string   `json:"source"`
	Path         string   `json:"path,omitempty"`
	Args         []string `json:"args,omitempty"`
	Dependencies []string `json:"dependencies,omitempty"`
	Version      string   `json:"language_version,omitempty"`
}

// Job is one job's record. Every field is stored.
type Job struct {
	ID          string   // uuid
	Kind        string   // "command", "script", "session"
	Status      string   // queued, running, completed, failed, timed_out, killed
	Reason      string   // exit_code, oom_killed, start_error, lost, requested, cancelled, compile_error, ""
	ExitCode    *int     // nil while running or when unknown
	Signal      string   //
	Command     string   // the command line or script text
	Language    string   //
	Image       string   //
	Workspace   string   //
	Cwd         string   //
	Env         []string // KEY=VALUE (stored as JSON; nil and empty are kept distinct)
	Limits      Limits   // stored as JSON
	ContainerID string   //
	StdinOpen   bool     //
	// ServerID is the server process that runs the job (its serverlock
	// identity); only that server writes the job while it lives.
	ServerID string
	// Tenant owns the job: set from the context at CreateJob, read back by
	// every lookup (UpdateJob never changes it).
	Tenant string
	Usage  Usage // stored as JSON
	// Details holds what only some kinds of job have; stored as JSON.
	Details Details

	CreatedAt, StartedAt, EndedAt time.Time // zero = not set (stored as NULL, except CreatedAt)

	// QueuedMS is how long the job waited for a slot (its run time is
	// counted from StartedAt, apart from it).
	QueuedMS int64

	StdoutBytes, StderrBytes, DroppedBytes int64 // output sizes
	ReadCursor                             int64 // where "new since last read" continues (combined stream)
	StdoutReadCursor, StderrReadCursor     int64 // the same, per stream
	Error                                  string
}

// ListFilter selects and pages jobs for a listing. Zero values mean "any".
type ListFilter struct {
	Status    []string // any of these statuses; empty = any status
	Kind      string
	Workspace string
	Language  string
	Limit     int    // <= 0 means DefaultListLimit; values above MaxListLimit are clamped
	Cursor    string // "" for the first page, else the next cursor ListJobs returned
}

// PruneFilter selects finished jobs to delete.
type PruneFilter struct {
	// EndedBefore: only jobs that ended strictly before this time. Zero = any
	// age. A finished job without an EndedAt is aged by its CreatedAt.
	EndedBefore time.Time
	// Status: only jobs in one of these statuses; empty = any finished status.
	// queued and running jobs are never deleted, even if listed here.
	Status []string
}

// WorkspaceLimits are the limits a workspace's container was made with. Stored as JSON.
type WorkspaceLimits struct {
	MemoryBytes int64 `json:"memory_bytes"`
	NanoCPUs    int64 `json:"nano_cpus"`
	Pids        int64 `json:"pids"`
	DiskBytes   int64 `json:"disk_bytes"`
}

// WorkspaceDetails holds what is known about a workspace beyond its columns. Stored as JSON.
type WorkspaceDetails struct {
	// Installed lists packages installed by install_packages, by manager.
	Installed map[string][]string `json:"installed,omitempty"`
	// Egress is the workspace's own allowlist (create_workspace's egress):
	// its container is on the egress network and its jobs reach these
	// hosts through the proxy. Empty: no network.
	Egress []string `json:"egress,omitempty"`
	// Secrets are the secrets its jobs use (create_workspace's secrets),
	// each with the workspace's placeholder: never a value.
	Secrets []SecretUse `json:"secrets,omitempty"`
	// Template is the template the workspace was made from (its Language
	// is the template's built-in language, its Image the template's).
	Template string `json:"template,omitempty"`
	// Runtime is the OCI runtime its container was made with when its
	// template or snapshot named one ("" = the policy's runtime).
	Runtime string `json:"runtime,omitempty"`
	// LostProcesses says why its last restore from hibernation failed, and
	// that it started afresh with its files ("" when it did not).
	LostProcesses string `json:"lost_processes,omitempty"`
}

// CopiedJob is a job of a fork's source whose process a copy got (a fork
// with processes), adopted there as a job of its own.
type CopiedJob struct {
	Workspace string `json:"workspace"` // the copy
	JobID     string `json:"job_id"`    // the job in the copy
	From      string `json:"from"`      // the source's job it was copied from
}

// SecretUse is a secret as a workspace's jobs hold it: its name and the
// workspace's placeholder for it.
type SecretUse struct {
	Name        string `json:"name"`
	Placeholder string `json:"placeholder"`
}

// Workspace is one workspace's record. Its name is unique within
// its tenant; its ID is unique for ever (a new workspace under an old name
// gets a new one).
type Workspace struct {
	ID          string // set by CreateWorkspace
	Tenant      string // the owner (ctx's at CreateWorkspace)
	Name        string
	Language    string
	Image       string
	ContainerID string
	Volume      string
	State       string // "creating", "running", "stopped"
	Limits      WorkspaceLimits
	ServerID    string // the server that created it
	CreatedAt   time.Time
	LastUsedAt  time.Time // zero = never used
	Details     WorkspaceDetails
}

// BlockedCommand is a block-list entry an agent added (the operator's own
// entries live in the policy file, not here).
type BlockedCommand struct {
	// Tenant is whose entry it is, and whom it applies to: "" for every
	// tenant (an admin's), else the tenant that added it.
	Tenant  string
	Command string
	Reason  string
	AddedBy string // who added it, e.g. the MCP client's name
	AddedAt time.Time
}

// Template is a template's built image: one of the policy's (Tenant "",
// everyone's) or a tenant's snapshot of a workspace.
type Template struct {
	Name      string
	Tenant    string // "" for the policy's templates
	Source    string // TemplateDockerfile or TemplateSnapshot
	Language  string // the built-in language it follows
	Key       string // cache key of every input
	Image     string // the final image's tag
	ImageID   string
	SizeBytes int64
	Workspace string // a snapshot's workspace
	CreatedAt time.Time
	UsedAt    time.Time // last job or workspace started from it
}

// E2BSandbox is a sandbox of the E2B API (internal/e2b): a workspace of
// its tenant's, with what E2B's control plane keeps about it.
type E2BSandbox struct {
	ID       string // the sandbox's id, also its workspace's name
	Tenant   string // set from the context at PutE2BSandbox
	Template string // as create named it
	// Token is its in-sandbox API's access token (envdAccessToken), which
	// E2B's get and connect answer again; the state directory is 0700.
	Token     string
	Envs      map[string]string // every command's environment
	Metadata  map[string]string
	StartedAt time.Time
	EndAt     time.Time // when its timeout kills it
}

// ErrE2BSandboxNotFound is an E2B sandbox its caller's tenant does not have.
var ErrE2BSandboxNotFound = errors.New("no such sandbox")

// Template sources.
const (
	TemplateDockerfile = "dockerfile"
	TemplateSnapshot   = "snapshot"
)

// ErrTemplateNotFound is a template the caller's tenant cannot see.
var ErrTemplateNotFound = errors.New("template not found")

package sandbox

import (
	"context"
	"io"
	"net/http"
	"strings"
)

// Labels and kinds of workspace containers and volumes.
const (
	// LabelWorkspace names the workspace a container or volume belongs to.
	LabelWorkspace = "dev.sandboxer.workspace"
	// KindWorkspace labels a workspace's long-lived container.
	KindWorkspace = "workspace"
	// KindHelper labels a short-lived container that reads granted mounts
	// for an import.
	KindHelper = "helper"
)

// WorkspaceJob splits the ContainerID of a job running in a workspace,
// "<workspace container id>/<job key>", into the container's id; ok is false
// for a job with a container of its own. Restart recovery adopts such a job
// through Runtime.Adopt with that ContainerID: it is never listed (List
// names containers), and survives its server as a fresh job does.
func WorkspaceJob(containerID string) (workspaceContainer string, ok bool) {
	c, _, ok := strings.Cut(containerID, "/")
	return c, ok
}

// WorkspaceSpec says how to make a workspace's container: a long-lived
// container whose main process takes its jobs, with a volume at /workspace.
type WorkspaceSpec struct {
	Name    string // the workspace's name (already validated)
	Image   string
	Limits  Limits // memory, CPUs, pids, open files, /tmp size, engine log
	Runtime string
	// Env is the container's environment (over the image's): every job and
	// install in the workspace sees it.
	Env []string
	// Mounts are granted host directories (read-only) its jobs see.
	Mounts []Mount
	// Network is "" (none: the container has only lo) or NetworkEgress
	// (a workspace made with its own allowlist: its jobs reach the proxy).
	Network string
}

// WorkspaceRefs are the engine objects of a workspace.
type WorkspaceRefs struct {
	ContainerID string
	Volume      string
}

// ExecOptions is a plain command run in a workspace container (file
// helpers, package installs, disk usage): not a job.
type ExecOptions struct {
	Cmd    []string
	User   string // "" = the sandbox user (uid 1000); "0:0" = root
	Env    []string
	Stdin  io.Reader // nil = none
	Stdout io.Writer // nil = discarded
	Stderr io.Writer // nil = discarded
	// Proxy, when set, runs Cmd through the tunnel (ExecThroughTunnel):
	// Cmd's connections through HTTP_PROXY/HTTPS_PROXY reach Proxy over the
	// exec's own stdin/stdout, for a container with no network; Cmd's
	// stdout and stderr both go to Stderr (Stdout when Stderr is nil).
	Proxy http.Handler
}

// TunnelInstaller is a WorkspaceRuntime whose install containers, on the
// install networks it names, have no network of their own: an install
// there reaches its registries only through the tunnel, so the workspace
// manager passes ExecOptions.Proxy to its installers' Exec.
type TunnelInstaller interface {
	// InstallsThroughTunnel says whether installs on the install network
	// ("bridge" or "egress") go through the tunnel (StartInstaller then
	// gives the install container no network); false: the install
	// container is on that network, as on an engine without the part.
	InstallsThroughTunnel(network string) bool
	// RootExec says whether its Exec can run as root (User "0:0"). apt
	// installs as root where it can; where not, it unpacks packages into
	// the workspace's volume as the sandbox user.
	RootExec() bool
}

// WorkspaceRuntime is a Runtime that can keep workspaces: long-lived
// containers with a volume, in which jobs run under the supervisor (kill
// mode "tree": a kill or timeout takes the job's process tree, never the
// container or the other jobs in it).
type WorkspaceRuntime interface {
	WorkspaceContainers
	WorkspaceExec
	ImportHelpers
}

// WorkspaceContainers are a workspace's container and volume: made,
// started, stopped, asked after and removed.
type WorkspaceContainers interface {
	// CreateWorkspace creates (not starts) a workspace's volume and container,
	// with no network unless spec.Network is NetworkEgress.
	CreateWorkspace(ctx context.Context, spec WorkspaceSpec) (WorkspaceRefs, error)
	// StartWorkspace starts a workspace's container; a running one is left alone.
	StartWorkspace(ctx context.Context, containerID string) error
	// StopWorkspace stops a workspace's container (files and packages stay).
	StopWorkspace(ctx context.Context, containerID string) error
	// WorkspaceRunning says whether the container runs; ErrNotFound when it is gone.
	WorkspaceRunning(ctx context.Context, containerID string) (bool, error)
	// RemoveWorkspace removes a workspace's container and volume; idempotent.
	RemoveWorkspace(ctx context.Context, refs WorkspaceRefs) error
	// OOMKilled says whether the kernel killed a process of the container
	// for memory.
	OOMKilled(ctx context.Context, containerID string) (bool, error)
}

// WorkspaceFreezer freezes a workspace's container: every process in it
// stops where it is, with its memory, open files and connections kept, and
// uses no CPU (the cgroup freezer: docker pause). Nothing new runs in a
// frozen container (an exec is refused) until it is thawed. Both are
// idempotent.
type WorkspaceFreezer interface {
	FreezeWorkspace(ctx context.Context, containerID string) error
	ThawWorkspace(ctx context.Context, containerID string) error
	// WorkspaceFrozen says whether the container is frozen; ErrNotFound
	// when it is gone.
	WorkspaceFrozen(ctx context.Context, containerID string) (bool, error)
}

// WorkspaceCheckpointer saves a running workspace's processes, memory and
// open files to an image in a directory, and starts a stopped workspace
// container from such an image: its processes go on where they were
// (gVisor's checkpoint and restore; no CRIU). The image may be restored
// into the container it came from (hibernation) or into another made the
// same way, from the same image and runtime (a fork).
type WorkspaceCheckpointer interface {
	// CheckpointRefusal says why workspaces on OCI runtime runtime ("" =
	// the engine's default) cannot be checkpointed here, in a sentence, or
	// "" when they can.
	CheckpointRefusal(ctx context.Context, runtime string) string
	// CheckpointWorkspace writes the running container's image into dir
	// (made mode 0700, its files 0600) and stops the container, or leaves
	// it running (a fork's source). The jobs of a container stopped so are
	// held, not ended: RestoreWorkspace into the same container re-attaches
	// them, and StartWorkspace or RemoveWorkspace ends them.
	CheckpointWorkspace(ctx context.Context, containerID, dir string, leaveRunning bool) error
	// RestoreWorkspace starts a stopped (or created) workspace container
	// from the image in dir, which stays.
	RestoreWorkspace(ctx context.Context, containerID, dir string) error
}

// WorkspaceExec runs things in a workspace: its jobs, plain commands, and
// its installer beside it.
type WorkspaceExec interface {
	// StartIn runs spec as a job in a running workspace container.
	StartIn(ctx context.Context, containerID string, spec Spec, out Output) (Handle, error)
	// Exec runs a plain command in a running workspace container until it
	// ends or ctx does, and returns its exit code.
	Exec(ctx context.Context, containerID string, opts ExecOptions) (int, error)
	// StartInstaller starts a workspace's install container: hardened and
	// limited like the workspace's container (same image, environment and
	// user), its volume at /workspace, granted mounts left out, on the named
	// network; for Exec, CopyFrom and Remove. The workspace's container
	// itself joins no network but the egress network, and only when it was
	// made for it (WorkspaceSpec.Network).
	StartInstaller(ctx context.Context, workspaceContainerID, network string) (string, error)
}

// ImportHelpers move files in and out of containers: the helpers an import
// reads a granted tree with, and the copies of a workspace's files.
type ImportHelpers interface {
	// StartHelper starts a short-lived container with mounts (read-only,
	// no network) for Exec and CopyFrom; Remove takes it away.
	StartHelper(ctx context.Context, image string, mounts []Mount) (string, error)
	// Remove removes a container; idempotent.
	Remove(ctx context.Context, containerID string) error
	// CopyFrom streams a path of a container, running or stopped, as a tar
	// archive through the engine ("dir/." gives dir's contents).
	CopyFrom(ctx context.Context, containerID, path string) (io.ReadCloser, error)
	// CopyTo extracts a tar archive into a directory of a container,
	// keeping the archive's owners, modes and times.
	CopyTo(ctx context.Context, containerID, dir string, archive io.Reader) error
}

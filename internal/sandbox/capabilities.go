package sandbox

// Engine is a backend: a Runtime that says where its sandboxes run and
// declares, once, which optional parts it has. Nothing above this package
// type-asserts a runtime for a part; it reads Capabilities.
type Engine interface {
	Runtime
	// Host says where its sandboxes run (the Docker socket or URL, the
	// Kubernetes API server and namespace), for logs and doctor.
	Host() string
	// Capabilities are the engine's optional parts; the same value on
	// every call.
	Capabilities() Capabilities
}

// Capabilities are an engine's optional parts. A nil field is a part the
// engine lacks, and what needs it is off (its tools or settings say so).
// Each part has its own contract suite in sandboxtest, run on the fake and
// on every engine that declares it.
type Capabilities struct {
	// Warm starts sandboxes before their jobs are known (the warm pool).
	Warm Warmer
	// Workspaces keeps long-lived containers with a volume (workspaces,
	// installs, imports, the user's project).
	Workspaces WorkspaceRuntime
	// Freezer freezes an idle workspace's container with its processes and
	// memory, and thaws it (workspaces.pause_after_s).
	Freezer WorkspaceFreezer
	// Checkpointer saves a workspace's processes and memory to an image and
	// restores them, into the same container or a copy
	// (workspaces.hibernate_after_s, forks with_processes).
	Checkpointer WorkspaceCheckpointer
	// Volumes keeps named volumes (dependency caches, the Go build cache).
	Volumes VolumeRuntime
	// VolumeFiller fills volumes from a sandbox with no network, through
	// the tunnel; nil = volumes are filled by a plain sandbox on a network.
	VolumeFiller TunnelVolumeFiller
	// Processes lists and signals the processes of a running sandbox.
	Processes ProcessInspector
	// EgressNetwork gives sandboxes a network whose only way out is the
	// server's proxy on its gateway.
	EgressNetwork EgressRuntime
	// EgressTunnel serves the proxy over each egress sandbox's own tunnel,
	// for an engine whose sandboxes have no network.
	EgressTunnel EgressTunneler
	// Images builds and commits the images of templates.
	Images ImageBuilder
	// SandboxImages builds the sandbox images the engine lacks, in the
	// background (serve --build-images).
	SandboxImages SandboxImageBuilder
	// TunnelInstalls says a workspace's installers have no network and
	// reach their registries only through the tunnel.
	TunnelInstalls TunnelInstaller
	// Capacity says how large one sandbox can ever be, on an engine whose
	// sandboxes wait for room (WaitingForCapacity): a job asking more is
	// refused at once.
	Capacity CapacityReporter
}

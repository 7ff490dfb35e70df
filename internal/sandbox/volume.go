package sandbox

import (
	"context"
	"time"
)

// Volume is a labelled engine volume the server made.
type Volume struct {
	Name      string
	Labels    map[string]string
	CreatedAt time.Time
}

// VolumeRuntime is a Runtime that manages named engine volumes (dependency
// caches). Volumes carry the managed and instance labels besides labels.
type VolumeRuntime interface {
	// CreateVolume creates a volume with these extra labels.
	CreateVolume(ctx context.Context, name string, labels map[string]string) error
	// ListVolumes returns this instance's volumes that carry label (any value).
	ListVolumes(ctx context.Context, label string) ([]Volume, error)
	// VolumeSizes returns the engine's measure of volumes' sizes in bytes
	// (by name; absent = unknown).
	VolumeSizes(ctx context.Context) (map[string]int64, error)
	// RemoveVolume removes a volume; idempotent (ErrNotFound is not an error).
	RemoveVolume(ctx context.Context, name string) error
}

// TunnelVolumeFiller is a VolumeRuntime whose sandboxes have no network of
// their own: a volume is filled by a command run through the tunnel
// (Exec with ExecOptions.Proxy) in a filler sandbox, not by a sandbox
// started on a network.
type TunnelVolumeFiller interface {
	VolumeRuntime
	// StartFiller starts a sandbox of spec's image, limits, kind, job id,
	// working directory and mounts (read-write as given) whose main process
	// waits; spec's command, environment and network are not used. For
	// Exec and Remove.
	StartFiller(ctx context.Context, spec Spec) (string, error)
	Exec(ctx context.Context, id string, o ExecOptions) (int, error)
	Remove(ctx context.Context, id string) error
}

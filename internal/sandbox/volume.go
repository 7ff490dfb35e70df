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

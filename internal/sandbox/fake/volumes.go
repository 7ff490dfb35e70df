package fake

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Volumes are an engine's volumes, in memory: the fake's
// Capabilities.Volumes (a Runtime's volume methods reach its engine's).
type Volumes struct {
	mu    sync.Mutex
	vols  map[string]sandbox.Volume
	files map[string]*files // what sandboxes wrote to each
}

// filesOf is a volume's files; a mount of a volume that does not exist
// makes it, unlabelled, as engines do.
func (v *Volumes) filesOf(name string) *files {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.vols[name]; !ok {
		v.createLocked(name, nil)
	}
	return v.files[name]
}

func (v *Volumes) createLocked(name string, labels map[string]string) {
	if v.vols == nil {
		v.vols, v.files = map[string]sandbox.Volume{}, map[string]*files{}
	}
	v.vols[name] = sandbox.Volume{Name: name, Labels: labels, CreatedAt: time.Now()}
	if v.files[name] == nil {
		v.files[name] = newFiles()
	}
}

func (v *Volumes) CreateVolume(_ context.Context, name string, labels map[string]string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.vols[name]; !ok {
		v.createLocked(name, labels)
	}
	return nil
}

// ListVolumes returns the volumes carrying label ("key" or "key=value").
func (v *Volumes) ListVolumes(_ context.Context, label string) ([]sandbox.Volume, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	k, val, hasVal := strings.Cut(label, "=")
	var out []sandbox.Volume
	for _, vol := range v.vols {
		if got, ok := vol.Labels[k]; ok && (!hasVal || got == val) {
			out = append(out, vol)
		}
	}
	return out, nil
}

// VolumeSizes knows no sizes.
func (v *Volumes) VolumeSizes(context.Context) (map[string]int64, error) { return nil, nil }

func (v *Volumes) RemoveVolume(_ context.Context, name string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.vols, name)
	delete(v.files, name)
	return nil
}

// Count is how many volumes there are.
func (v *Volumes) Count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.vols)
}

// The Runtime keeps its engine's volumes (sandbox.VolumeRuntime).

func (r *Runtime) CreateVolume(ctx context.Context, name string, labels map[string]string) error {
	if r.isDown() {
		return engineDown()
	}
	return r.Engine.volumes.CreateVolume(ctx, name, labels)
}

func (r *Runtime) ListVolumes(ctx context.Context, label string) ([]sandbox.Volume, error) {
	if r.isDown() {
		return nil, engineDown()
	}
	return r.Engine.volumes.ListVolumes(ctx, label)
}

func (r *Runtime) VolumeSizes(ctx context.Context) (map[string]int64, error) {
	return r.Engine.volumes.VolumeSizes(ctx)
}

func (r *Runtime) RemoveVolume(ctx context.Context, name string) error {
	if r.isDown() {
		return engineDown()
	}
	return r.Engine.volumes.RemoveVolume(ctx, name)
}

// VolumeCount is how many volumes the engine keeps.
func (e *Engine) VolumeCount() int { return e.volumes.Count() }

// StartFiller is a running sandbox of spec's image with its mounts and no
// network, for execs through the tunnel (sandbox.TunnelVolumeFiller).
func (r *Runtime) StartFiller(ctx context.Context, spec sandbox.Spec) (string, error) {
	idle := idleSpec(spec.Kind, spec.Image)
	idle.JobID, idle.Mounts = spec.JobID, spec.Mounts
	c, err := r.create(idle)
	if err != nil {
		return "", err
	}
	c.start()
	return c.info.ID, nil
}

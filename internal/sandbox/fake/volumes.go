package fake

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Volumes is the volume half of a sandbox.VolumeRuntime, in memory. The
// fake Runtime keeps no volumes (so code that needs them stays off in
// tests that do not ask); a test that wants them embeds Volumes beside it.
type Volumes struct {
	mu   sync.Mutex
	vols map[string]sandbox.Volume
}

func (v *Volumes) CreateVolume(_ context.Context, name string, labels map[string]string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.vols == nil {
		v.vols = map[string]sandbox.Volume{}
	}
	v.vols[name] = sandbox.Volume{Name: name, Labels: labels, CreatedAt: time.Now()}
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
	return nil
}

// Count is how many volumes there are.
func (v *Volumes) Count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.vols)
}

package docker

import (
	"context"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

var _ sandbox.VolumeRuntime = (*Runtime)(nil)

// CreateVolume creates a named volume with the managed and instance labels.
func (r *Runtime) CreateVolume(ctx context.Context, name string, labels map[string]string) error {
	all := map[string]string{
		sandbox.LabelManaged:  "true",
		sandbox.LabelInstance: r.instance,
		sandbox.LabelServer:   r.server,
	}
	for k, v := range labels {
		all[k] = v
	}
	if _, err := r.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: all}); err != nil {
		return r.engineErr(fmt.Errorf("create volume %s: %w", name, err))
	}
	return nil
}

// ListVolumes returns this instance's volumes carrying label.
func (r *Runtime) ListVolumes(ctx context.Context, label string) ([]sandbox.Volume, error) {
	res, err := r.cli.VolumeList(ctx, client.VolumeListOptions{Filters: make(client.Filters).
		Add("label", sandbox.LabelInstance+"="+r.instance).Add("label", label)})
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("list volumes: %w", err))
	}
	key, value, byValue := strings.Cut(label, "=")
	out := make([]sandbox.Volume, 0, len(res.Items))
	for _, v := range res.Items {
		// Podman 4 filters volumes by a label's key only, whatever its value.
		if got, ok := v.Labels[key]; !ok || byValue && got != value {
			continue
		}
		out = append(out, sandbox.Volume{Name: v.Name, Labels: v.Labels, CreatedAt: parseTime(v.CreatedAt)})
	}
	return out, nil
}

// VolumeSizes asks the engine for every volume's size.
func (r *Runtime) VolumeSizes(ctx context.Context) (map[string]int64, error) {
	du, err := r.cli.DiskUsage(ctx, client.DiskUsageOptions{Volumes: true, Verbose: true})
	// Podman 4's disk usage fails when a container it is counting is
	// removed meanwhile; the next count does not see it.
	for try := 0; try < 3 && err != nil && strings.Contains(err.Error(), "no such container"); try++ {
		du, err = r.cli.DiskUsage(ctx, client.DiskUsageOptions{Volumes: true, Verbose: true})
	}
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("disk usage: %w", err))
	}
	sizes := map[string]int64{}
	for _, v := range du.Volumes.Items {
		if v.UsageData != nil && v.UsageData.Size >= 0 {
			sizes[v.Name] = v.UsageData.Size
		}
	}
	return sizes, nil
}

// RemoveVolume removes a volume; one already gone is no error. A volume in
// use is retried for a while: a finished sandbox is removed shortly after its
// end, not at once.
func (r *Runtime) RemoveVolume(ctx context.Context, name string) error {
	deadline := time.Now().Add(volumeInUseWait)
	for delay := 50 * time.Millisecond; ; delay = min(delay*2, time.Second) {
		_, err := r.cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{Force: true})
		if err == nil || cerrdefs.IsNotFound(err) {
			return nil
		}
		if !cerrdefs.IsConflict(err) || time.Now().After(deadline) {
			return r.engineErr(fmt.Errorf("remove volume %s: %w", name, err))
		}
		select {
		case <-ctx.Done():
			return r.engineErr(fmt.Errorf("remove volume %s: %w", name, err))
		case <-time.After(delay):
		}
	}
}

// volumeInUseWait is how long RemoveVolume waits for a volume's users to go.
const volumeInUseWait = 10 * time.Second

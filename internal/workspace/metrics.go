package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// metricsTimeout bounds one sample of a workspace's metrics.
const metricsTimeout = 10 * time.Second

// Metrics is one sample of what a running workspace uses, against its limits.
type Metrics struct {
	At         time.Time
	CPUs       float64 // its CPU limit in cores
	CPUUsedPct float64 // busy share of CPUs over the sample, 0 to 100
	MemUsed    int64   // bytes, page cache included
	MemCache   int64   // bytes of page cache
	MemTotal   int64   // its memory limit in bytes
	DiskUsed   int64   // bytes under /workspace
	DiskTotal  int64   // its disk quota in bytes
}

// ErrNotRunning is a workspace that is paused, hibernated or stopped: it
// is not woken to be measured.
var ErrNotRunning = errors.New("the workspace is not running")

// Metrics samples a running workspace with the supervisor's metrics
// (proto.MetricsCommand) in its container, and its disk use; a workspace
// that is not running is not woken for it (ErrNotRunning).
func (m *Manager) Metrics(ctx context.Context, name string) (*Metrics, error) {
	w, err := m.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if w.State != "running" || w.ContainerID == "" {
		return nil, fmt.Errorf("%w: workspace %q is %s", ErrNotRunning, name, w.State)
	}
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	out := &capped{max: 4096}
	var errb capped
	errb.max = 4096
	code, err := m.rt.Exec(ctx, w.ContainerID, sandbox.ExecOptions{
		Cmd: []string{supervisorPath, proto.MetricsCommand}, Stdout: out, Stderr: &errb,
	})
	if err != nil {
		return nil, err
	}
	var pm proto.Metrics
	if err := json.Unmarshal(out.buf.Bytes(), &pm); err != nil {
		return nil, fmt.Errorf("the metrics helper in workspace %q failed (exit %d): %s (an image built before metrics lacks it: run `sandboxer images build`, then delete and create the workspace)",
			name, code, strings.TrimSpace(errb.buf.String()))
	}
	used, err := m.diskUsage(ctx, w.ContainerID)
	if err != nil {
		return nil, err
	}
	cpus := float64(w.Limits.NanoCPUs) / 1e9
	s := &Metrics{At: time.Now().UTC(), CPUs: cpus, MemUsed: max(pm.MemUsed, 0), MemCache: max(pm.MemCache, 0),
		MemTotal: w.Limits.MemoryBytes, DiskUsed: used, DiskTotal: w.Limits.DiskBytes}
	if pm.CPUUsedCores > 0 && cpus > 0 {
		s.CPUUsedPct = min(100, 100*pm.CPUUsedCores/cpus)
	}
	if pm.MemLimit > 0 && (s.MemTotal <= 0 || pm.MemLimit < s.MemTotal) {
		s.MemTotal = pm.MemLimit
	}
	if s.DiskTotal <= 0 {
		s.DiskTotal = m.quota()
	}
	return s, nil
}

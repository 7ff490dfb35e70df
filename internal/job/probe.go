package job

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// probeOutputBytes caps what a probe keeps of its output.
const probeOutputBytes = 64 << 10

// Probe runs a short command in a sandbox of image with the policy's default
// limits and returns its stdout. It is not a job: nothing is recorded, and it
// takes no job slot. Used for facts about images (versions).
func (m *Manager) Probe(ctx context.Context, image, command string, timeout time.Duration) (string, error) {
	limits, err := m.pol.Resolve(policy.Request{})
	if err != nil {
		return "", err
	}
	out := &sandbox.Buffer{Max: probeOutputBytes}
	h, err := m.rt.Start(ctx, sandbox.Spec{
		JobID: "probe-" + uuid.NewString(), Kind: KindProbe, Image: image, Cmd: []string{"bash", "-c", command},
		WorkDir: "/workspace", Network: policy.NetworkNone, Runtime: m.pol.Runtime, EngineLog: policy.EngineLogNone,
		Limits: SandboxLimits(limits, 0),
	}, out)
	if err != nil {
		return "", err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-h.Done():
	case <-t.C:
	case <-ctx.Done():
	}
	select {
	case <-h.Done():
	default:
		dctx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
		defer cancel()
		_ = h.Destroy(dctx)
		return "", fmt.Errorf("probe %q in %s did not finish within %s", command, image, timeout)
	}
	if st := h.Status(); st.ExitCode != 0 || st.Err != nil {
		return "", fmt.Errorf("probe %q in %s failed (exit %d)", command, image, st.ExitCode)
	}
	return strings.TrimSpace(out.Stdout()), nil
}

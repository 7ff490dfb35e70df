package kubernetes_test

import (
	"context"
	"testing"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// TestOOMAndUsage: a job past its memory limit is reported OOM-killed, and a
// job's usage (CPU, peak memory, wall time) is measured, as on Docker.
func TestOOMAndUsage(t *testing.T) {
	rt := newTestRuntime(t)
	for _, tc := range []struct {
		name, cmd string
		oom       bool
	}{
		{"oom", "tail /dev/zero", true},
		{"usage", "head -c 20000000 /dev/zero | tail -c 1 >/dev/null; exit 0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := rt.Start(context.Background(), sandboxtest.Spec(images.Tag("base"), tc.cmd), &sandbox.Buffer{Max: 1 << 16})
			if err != nil {
				t.Fatal(err)
			}
			waitEnd(t, h)
			st := h.Status()
			if st.OOMKilled != tc.oom {
				t.Fatalf("OOMKilled = %v, want %v (exit %d)", st.OOMKilled, tc.oom, st.ExitCode)
			}
			if !tc.oom && (st.ExitCode != 0 || st.Usage.WallMS <= 0 || st.Usage.PeakMemoryBytes <= 0) {
				t.Fatalf("status %+v, want exit 0 with usage measured", st)
			}
		})
	}
}

package kubernetes_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// TestWarmPods: a prepared pod runs nothing until its job comes; launched
// with the pool's limits or with others (resized in place), the job runs with
// the job's memory limit and is listed as the job's; a warm pod removed from
// outside ends.
func TestWarmPods(t *testing.T) {
	rt := newTestRuntime(t)
	ctx := context.Background()
	image := images.Tag("base")
	memLimit := "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"
	for _, tc := range []struct {
		name string
		mem  int64
	}{{"same limits", 128 << 20}, {"resized", 192 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := rt.Prepare(ctx, sandboxtest.Spec(image, ""))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Discard(ctx) })
			if c, ok := find(t, rt, w.ContainerID()); !ok || c.Kind != sandbox.KindPool || c.JobID != "" {
				t.Fatalf("warm pod listed as %+v (found %v), want kind pool and no job", c, ok)
			}
			spec := sandboxtest.Spec(image, "echo hi; "+memLimit)
			spec.Limits.MemoryBytes = tc.mem
			out := &sandbox.Buffer{Max: 1 << 16}
			h, err := w.Launch(ctx, spec, out)
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := find(t, rt, w.ContainerID()); ok && c.JobID != spec.JobID {
				t.Errorf("claimed pod listed as %+v, want job %s", c, spec.JobID)
			}
			waitEnd(t, h)
			if st := h.Status(); st.ExitCode != 0 {
				t.Fatalf("exit %d stderr %q", st.ExitCode, out.Stderr())
			}
			if got := strings.Fields(out.Stdout()); len(got) != 2 || got[0] != "hi" || got[1] != strconv.FormatInt(tc.mem, 10) {
				t.Fatalf("stdout %q, want hi and a memory limit of %d", out.Stdout(), tc.mem)
			}
		})
	}
	t.Run("removed while warm", func(t *testing.T) {
		w, err := rt.Prepare(ctx, sandboxtest.Spec(image, ""))
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Remove(ctx, w.ContainerID()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.Ended():
		case <-time.After(30 * time.Second):
			t.Fatal("Ended not closed after the pod was removed")
		}
	})
}

func find(t *testing.T, rt sandbox.Runtime, id string) (sandbox.Container, bool) {
	t.Helper()
	cs, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.ID == id {
			return c, true
		}
	}
	return sandbox.Container{}, false
}

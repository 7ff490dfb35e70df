package kubernetes_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// TestHardeningFromInside reads the pod's hardening from inside the job: the
// sandbox user, no capabilities, no privilege escalation, a seccomp filter, a
// read-only root, size-capped tmpfs, no service account token, the job's
// rlimits, and a network that reaches nothing but itself.
func TestHardeningFromInside(t *testing.T) {
	rt := newTestRuntime(t)
	spec := sandboxtest.Spec(images.Tag("base"), strings.Join([]string{
		"id -u; id -g",
		"grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
		"touch /rootfs-write 2>/dev/null && echo root-writable || echo root-read-only",
		"test -e /var/run/secrets/kubernetes.io && echo token || echo no-token",
		"df -k /tmp /workspace | awk 'NR>1 {print \"tmpfs\", $6, $2}'",
		"echo nofile $(ulimit -n) fsize $(ulimit -f)",
		"(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && echo net-open || echo net-closed",
	}, "; "))
	out := &sandbox.Buffer{Max: 1 << 20}
	h, err := rt.Start(context.Background(), spec, out)
	if err != nil {
		t.Fatal(err)
	}
	waitEnd(t, h)
	if st := h.Status(); st.ExitCode != 0 {
		t.Fatalf("exit %d, stderr %q", st.ExitCode, out.Stderr())
	}
	got := out.Stdout()
	for _, want := range []string{
		"1000\n1000\n",
		"CapPrm:\t0000000000000000", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
		"NoNewPrivs:\t1", "Seccomp:\t2",
		"root-read-only", "no-token",
		"tmpfs /tmp 16384", "tmpfs /workspace 16384",
		"nofile 256 fsize 16384", // 16 MiB in bash's 1024-byte blocks
		"net-closed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("inside the pod: no %q in\n%s", want, got)
		}
	}
}

package kubernetes_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// newTestRuntime is a runtime on the cluster KUBECONFIG names (make k8s-cluster
// leaves .k8s/kubeconfig), in namespace SANDBOXER_K8S_NAMESPACE (default
// "default"). The tests run only with SANDBOXER_TEST_K8S=1 (make test-k8s).
func newTestRuntime(t *testing.T) *kubernetes.Runtime {
	t.Helper()
	if os.Getenv("SANDBOXER_TEST_K8S") != "1" {
		t.Skip("set SANDBOXER_TEST_K8S=1 and KUBECONFIG (make k8s-cluster && make test-k8s)")
	}
	rt, err := kubernetes.New("test-"+t.Name(), kubernetes.Config{Namespace: os.Getenv("SANDBOXER_K8S_NAMESPACE")})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if cs, err := rt.List(ctx); err == nil {
			for _, c := range cs {
				_ = rt.Remove(ctx, c.ID)
			}
		}
		_ = rt.Close()
	})
	return rt
}

// TestContract: the Kubernetes runtime keeps the contract the Docker runtime
// and the fake are held to.
func TestContract(t *testing.T) {
	sandboxtest.RunContract(t, func(t *testing.T) sandbox.Runtime { return newTestRuntime(t) }, images.Tag("base"))
}

// TestCapabilities: every part the Kubernetes runtime declares keeps its
// contract, as Docker's and the fake's do.
func TestCapabilities(t *testing.T) {
	sandboxtest.RunCapabilities(t, func(t *testing.T) sandbox.Engine { return newTestRuntime(t) }, images.Tag("base"))
}

// waitEnd waits (bounded) for a job to end.
func waitEnd(t *testing.T, h sandbox.Handle) {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("the job did not end")
	}
}

// TestHardeningFromInside: the profile the pod spec writes, read back from
// inside a pod, as on Docker and the fake; what a pod spec cannot say is
// declared, each with why (docs/kubernetes.md, "What differs from Docker").
func TestHardeningFromInside(t *testing.T) {
	sandboxtest.RunHardening(t, func(t *testing.T) sandbox.Runtime { return newTestRuntime(t) }, images.Tag("base"), sandboxtest.HardeningOptions{
		Differs: podDifferences,
	})
}

// podDifferences are what a pod's profile cannot say as Docker's does.
var podDifferences = map[string]string{
	"/tmp is mounted without nosuid":       "an emptyDir's tmpfs takes the kubelet's mount options; NoNewPrivs and no capabilities make set-id bits moot",
	"/tmp is mounted without nodev":        "an emptyDir's tmpfs takes the kubelet's mount options; without CAP_MKNOD no device node can be made",
	"/workspace is mounted without nosuid": "as /tmp",
	"/workspace is mounted without nodev":  "as /tmp",
	"/workspace's owner and mode are":      "an emptyDir is root's, 1777: the pod is non-root under the restricted standard, so nothing can chown it",
	"cgroup pids limit is":                 "a pod spec has no pids limit: the kubelet's podPidsLimit is on the pod's cgroup, above the container's view",
	"network interfaces are":               "the test cluster's CNI gives each pod a dead-end eth0 (docs/kubernetes.md, Pod network)",
	"1 routes, want none":                  "that eth0's route, which leads nowhere",
}

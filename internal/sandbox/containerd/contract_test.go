package containerd_test

import (
	"context"
	"os"
	"testing"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/containerd"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// newTestRuntime is a runtime on the containerd scripts/containerd.sh
// starts (SANDBOXER_CONTAINERD_ADDRESS names another). The tests run only
// with SANDBOXER_TEST_CONTAINERD=1 (make test-containerd).
func newTestRuntime(t *testing.T) *containerd.Runtime {
	t.Helper()
	if os.Getenv("SANDBOXER_TEST_CONTAINERD") != "1" {
		t.Skip("set SANDBOXER_TEST_CONTAINERD=1 (make test-containerd)")
	}
	rt, err := containerd.New("test-"+t.Name(), containerd.Config{Address: os.Getenv("SANDBOXER_CONTAINERD_ADDRESS")})
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

// TestContract: the containerd runtime keeps the contract the Docker
// runtime and the fake are held to.
func TestContract(t *testing.T) {
	sandboxtest.RunContract(t, func(t *testing.T) sandbox.Runtime { return newTestRuntime(t) }, images.Tag("base"))
}

// TestCapabilities: every part the containerd runtime declares keeps its
// contract, as Docker's and the fake's do.
func TestCapabilities(t *testing.T) {
	sandboxtest.RunCapabilities(t, func(t *testing.T) sandbox.Engine { return newTestRuntime(t) }, images.Tag("base"))
}

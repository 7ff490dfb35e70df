package docker_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// TestContract: the Docker runtime keeps the contract the fake is held to
// (internal/sandbox/fake runs the same suite without an engine).
func TestContract(t *testing.T) {
	sandboxtest.RunContract(t, func(t *testing.T) sandbox.Runtime {
		rt, _ := newTestRuntime(t) // skips without an engine (fails under CI=true)
		return rt
	}, images.Tag("base"))
}

// TestCapabilities: every part Docker declares keeps its contract (the
// fake runs the same suites).
func TestCapabilities(t *testing.T) {
	sandboxtest.RunCapabilities(t, func(t *testing.T) sandbox.Engine {
		rt, _ := newTestRuntime(t) // skips without an engine (fails under CI=true)
		return rt
	}, images.Tag("base"))
}

// TestHardeningFromInside: the profile read back from inside a sandbox, on
// the runtime sandboxes use (the patched runc where scripts/runc.sh
// registered it), and on gVisor when the engine has runsc.
func TestHardeningFromInside(t *testing.T) {
	newRT := func(t *testing.T) sandbox.Runtime {
		rt, _ := newTestRuntime(t) // skips without an engine (fails under CI=true)
		return rt
	}
	t.Run("runc", func(t *testing.T) {
		t.Parallel()
		sandboxtest.RunHardening(t, newRT, images.Tag("base"), sandboxtest.HardeningOptions{})
	})
	t.Run("runsc", func(t *testing.T) {
		t.Parallel()
		rt, _ := newTestRuntime(t)
		engine, err := rt.EngineInfo(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if engine.Product == "Podman" {
			t.Skip("Podman's Docker-compatible API ignores a container's runtime: runsc is not selectable there")
		}
		if !slices.Contains(engine.Runtimes, "runsc") {
			t.Skip("the engine has no runsc runtime (gVisor): `make gvisor` registers it")
		}
		sandboxtest.RunHardening(t, newRT, images.Tag("base"), sandboxtest.HardeningOptions{Runtime: "runsc", Kernel: "gvisor"})
	})
}

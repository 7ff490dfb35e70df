package docker_test

import (
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

package fake_test

import (
	"testing"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

// TestContract: the fake keeps the same contract as the Docker runtime.
func TestContract(t *testing.T) {
	sandboxtest.RunContract(t, func(t *testing.T) sandbox.Runtime {
		rt := fake.New("contract-" + t.Name())
		rt.SetImageMissing(sandboxtest.MissingImage, true)
		return rt
	}, "fake/base:latest")
}

// TestCapabilities: the fake's parts keep the contract the engines' do.
func TestCapabilities(t *testing.T) {
	sandboxtest.RunCapabilities(t, func(t *testing.T) sandbox.Engine {
		return fake.New("capabilities-" + t.Name())
	}, "fake/base:latest")
}

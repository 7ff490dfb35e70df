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

// TestCapabilities: the fake's parts keep the contract the engines' do,
// in both engine shapes of egress (Docker's network, Podman's and
// Kubernetes' tunnel): every suite runs on the fake.
func TestCapabilities(t *testing.T) {
	for _, shape := range []struct {
		name   string
		egress fake.Egress
	}{{"EgressGateway", fake.EgressGateway}, {"EgressTunnelled", fake.EgressTunnelled}} {
		t.Run(shape.name, func(t *testing.T) {
			sandboxtest.RunCapabilities(t, func(t *testing.T) sandbox.Engine {
				rt := fake.New("capabilities-" + t.Name()).WithEgress(shape.egress)
				rt.SetImageMissing(sandboxtest.UnpulledImage, true)
				rt.SetImageMissing(sandboxtest.ImagesBuilt+"*", true)
				return rt
			}, "fake/base:latest")
		})
	}
}

// TestCapacityWaits: a fake engine with a node of 64 CPUs declares
// Capacity, and its starts wait for room as a Kubernetes cluster's do;
// every other suite passes on it too.
func TestCapacityWaits(t *testing.T) {
	sandboxtest.RunCapabilities(t, func(t *testing.T) sandbox.Engine {
		eng := fake.NewEngine()
		eng.SetCapacity(64_000_000_000) // room for the other suites beside the one that fills it
		rt := eng.Runtime("capacity-"+t.Name(), "")
		rt.SetImageMissing(sandboxtest.UnpulledImage, true)
		rt.SetImageMissing(sandboxtest.ImagesBuilt+"*", true)
		return rt
	}, "fake/base:latest")
}

// TestHardeningFromInside: the fake's profile, read back through the
// supervisor's probe as on every engine.
func TestHardeningFromInside(t *testing.T) {
	sandboxtest.RunHardening(t, func(t *testing.T) sandbox.Runtime {
		return fake.New("hardening-" + t.Name())
	}, "fake/base:latest", sandboxtest.HardeningOptions{})
}

package sandbox

import (
	"context"
	"net/netip"
)

// NetworkEgress, as a Spec's Network, puts the sandbox on the egress
// network: an internal network with no route out, whose only peer is the
// server's allowlist proxy (internal/egress) on its gateway address.
const NetworkEgress = "egress"

// EgressRuntime is a Runtime that can make the egress network.
type EgressRuntime interface {
	// EgressGateway makes the egress network if it is missing and returns
	// its gateway (the host's address on it, where the proxy listens) and
	// the host's interface on it (whose traffic to the host the server
	// fences: the proxy's port only).
	EgressGateway(ctx context.Context) (gateway netip.Addr, hostInterface string, err error)
}

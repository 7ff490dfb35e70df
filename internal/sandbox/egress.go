package sandbox

import (
	"context"
	"net/http"
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

// EgressTunnelAddr is where, inside a sandbox with no network, the egress
// tunnel listens (its own loopback): HTTP_PROXY of its jobs names it.
const EgressTunnelAddr = "127.0.0.1:3128"

// EgressTunneler is a Runtime whose sandboxes have no network at all: one
// on NetworkEgress (a job's pod, or a workspace made with egress) reaches
// the egress proxy through a tunnel the runtime keeps open beside it
// (OpenTunnel over the engine's exec stream), as long as its job runs (a
// workspace's: as long as it runs).
type EgressTunneler interface {
	// TunnelEgress makes the runtime serve every egress tunnel's
	// connections with proxy (the allowlist proxy, which checks each
	// request's grant), and returns where the tunnel listens inside the
	// sandbox (EgressTunnelAddr). It is called once, before any Start.
	TunnelEgress(proxy http.Handler) (addr string)
}

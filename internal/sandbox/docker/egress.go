package docker

import (
	"context"
	"fmt"
	"net/netip"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

var _ sandbox.EgressRuntime = (*Runtime)(nil)

// egressNetwork is the engine's name of the egress network (Spec.Network
// sandbox.NetworkEgress): internal, so the engine gives it no route out
// and no masquerading; the host's address on it is its gateway.
const egressNetwork = "sandboxer-egress"

// engineNetwork is the engine's network mode for a spec's Network. On an
// engine whose egress is the tunnel (Podman), egress is no network at all:
// the tunnel beside the job is the way out.
func (r *Runtime) engineNetwork(network string) string {
	switch network {
	case "":
		return "none"
	case sandbox.NetworkEgress:
		if r.tunnels() {
			return "none"
		}
		return egressNetwork
	}
	return network
}

// noResolver is the DNS server a sandbox on the egress network is given:
// the engine's embedded resolver (127.0.0.11, which answers the names of
// containers) forwards every other name to it, in the sandbox's own network
// namespace, where nothing answers. So no query leaves, whatever the host's
// resolver is (Docker before 26.0 forwarded from the host's namespace when
// that was on loopback: CVE-2024-29018). The proxy resolves the allowed
// names itself; a job on egress needs no resolver.
var noResolver = netip.IPv4Unspecified()

// resolvers are the DNS servers of a sandbox on network (nil: the engine's).
func (r *Runtime) resolvers(network string) []netip.Addr {
	if r.engineNetwork(network) == egressNetwork {
		return []netip.Addr{noResolver}
	}
	return nil
}

// EgressGateway makes the egress network if it is missing and returns its
// gateway address.
func (r *Runtime) EgressGateway(ctx context.Context) (netip.Addr, string, error) {
	info, err := r.cli.NetworkInspect(ctx, egressNetwork, client.NetworkInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		_, err = r.cli.NetworkCreate(ctx, egressNetwork, client.NetworkCreateOptions{
			Driver: "bridge", Internal: true,
			Labels: map[string]string{sandbox.LabelManaged: "true"},
		})
		if err != nil && !cerrdefs.IsConflict(err) {
			return netip.Addr{}, "", r.engineErr(fmt.Errorf("create network %s: %w", egressNetwork, err))
		}
		info, err = r.cli.NetworkInspect(ctx, egressNetwork, client.NetworkInspectOptions{})
	}
	if err != nil {
		return netip.Addr{}, "", r.engineErr(fmt.Errorf("inspect network %s: %w", egressNetwork, err))
	}
	if !info.Network.Internal {
		return netip.Addr{}, "", fmt.Errorf("network %s exists and is not internal: remove it (docker network rm %s) so the server makes it", egressNetwork, egressNetwork)
	}
	// The bridge's name: the engine's default unless the network set one.
	bridge := info.Network.Options["com.docker.network.bridge.name"]
	if bridge == "" && len(info.Network.ID) >= 12 {
		bridge = "br-" + info.Network.ID[:12]
	}
	for _, c := range info.Network.IPAM.Config {
		if c.Gateway.IsValid() && c.Gateway.Is4() {
			return c.Gateway, bridge, nil
		}
	}
	return netip.Addr{}, "", fmt.Errorf("network %s has no IPv4 gateway", egressNetwork)
}

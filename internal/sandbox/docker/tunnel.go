package docker

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// On Podman the egress path is Kubernetes' (sandbox.EgressTunneler):
// Podman 4.3's internal network has no gateway on the host for the proxy to
// listen on, so a sandbox on network egress has no network at all, and
// reaches the server's proxy through a tunnel-only supervisor exec'd beside
// its job, listening on 127.0.0.1:3128 in the sandbox. A job's tunnel lives
// as long as its job; a workspace's as long as its container runs, opened
// again when a job finds it gone (a restarted server, an idle stop and
// start). Installs on the install network egress run in an install
// container with no network, through a tunnel of their own
// (sandbox.TunnelInstaller); those on bridge run on Podman's bridge. Every request still
// carries its job's grant token: the tunnel carries bytes, the proxy decides.

var (
	_ sandbox.EgressTunneler  = (*Runtime)(nil)
	_ sandbox.TunnelInstaller = (*Runtime)(nil)
)

// tunnels says whether this engine's egress is the tunnel (Podman).
func (r *Runtime) tunnels() bool { return r.Capabilities().EgressTunnel != nil }

// TunnelEgress serves the egress tunnels with proxy.
func (r *Runtime) TunnelEgress(proxy http.Handler) string {
	r.egressProxy = proxy
	return sandbox.EgressTunnelAddr
}

// RootExec: an exec can run as root (apt installs as root).
func (r *Runtime) RootExec() bool { return true }

// InstallsThroughTunnel: on Podman, installs on the install network egress
// (which Podman cannot give a container) go through the tunnel; those on
// bridge run on the bridge, as on Docker.
func (r *Runtime) InstallsThroughTunnel(network string) bool {
	return r.tunnels() && network == sandbox.NetworkEgress
}

// installerNetwork is an install container's network: none where installs
// go through the tunnel, else the install network.
func (r *Runtime) installerNetwork(network string) string {
	if r.InstallsThroughTunnel(network) {
		return "none"
	}
	return r.engineNetwork(network)
}

// openTunnel opens an egress tunnel into the running container id.
func (r *Runtime) openTunnel(ctx context.Context, id string) (*sandbox.Tunnel, error) {
	if r.egressProxy == nil {
		return nil, errors.New("network egress: this server runs no egress proxy (policy key egress.allow is empty)")
	}
	t, err := sandbox.OpenTunnel(ctx, sandbox.EgressTunnelAddr, r.egressProxy, func(ctx context.Context, o sandbox.ExecOptions) (int, error) {
		return r.Exec(ctx, id, o)
	})
	if err != nil {
		return nil, fmt.Errorf("egress tunnel into container %.12s: %w", id, err)
	}
	return t, nil
}

// openJobTunnel opens the egress tunnel of a job's own sandbox on network
// egress (its grant, the spec's HTTP_PROXY token, passes there); closed
// when the job ends. An adopting server calls it too: the former server's
// tunnel went with it.
func (h *handle) openJobTunnel(ctx context.Context, network string) error {
	if network != sandbox.NetworkEgress || !h.rt.tunnels() || h.shared() || h.tunnel != nil {
		return nil
	}
	t, err := h.rt.openTunnel(ctx, h.id)
	if err != nil {
		return err
	}
	h.tunnel = t
	return nil
}

// workspaceTunnel makes sure a running workspace container made with
// egress has its tunnel (opening it again when it ended); others need none.
// What each container needs is read from its label once.
func (r *Runtime) workspaceTunnel(ctx context.Context, id string) error {
	if !r.tunnels() {
		return nil
	}
	return r.wsTunnels.Ensure(ctx, id, func(ctx context.Context) (bool, error) {
		info, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return false, sandbox.ErrNotFound
		} else if err != nil {
			return false, r.engineErr(fmt.Errorf("inspect workspace container: %w", err))
		}
		return info.Container.Config != nil && info.Container.Config.Labels[sandbox.LabelNetwork] == sandbox.NetworkEgress, nil
	}, func(ctx context.Context) (*sandbox.Tunnel, error) {
		t, err := r.openTunnel(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("workspace made with egress: %w", err)
		}
		return t, nil
	})
}

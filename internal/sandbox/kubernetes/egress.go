package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Pods have no network (the cluster's CNI gives them loopback only, a real
// cluster's NetworkPolicy denies everything): a job on network egress, or a
// workspace made with egress, reaches the server's egress proxy through a
// tunnel-only exec of its supervisor (sandbox.OpenTunnel over pods/exec),
// which listens on sandbox.EgressTunnelAddr in the pod. A job's tunnel lives
// as long as its job; a workspace's as long as its pod, opened again when
// the pod is made again or the tunnel broke. Every request still carries
// its job's grant token (HTTP_PROXY, as on Docker's egress network): the
// tunnel carries bytes, the proxy decides.

var _ sandbox.EgressTunneler = (*Runtime)(nil)

// annEgress marks a workspace's pod made with egress: it gets a tunnel.
const annEgress = "dev.sandboxer/egress"

// TunnelEgress serves the egress tunnels with proxy.
func (r *Runtime) TunnelEgress(proxy http.Handler) string {
	r.egressProxy = proxy
	return sandbox.EgressTunnelAddr
}

// checkNetwork refuses a network this runtime cannot give a pod.
func (r *Runtime) checkNetwork(network string) error {
	switch network {
	case "", "none":
		return nil
	case sandbox.NetworkEgress:
		if r.egressProxy == nil {
			return errors.New("network egress: this server runs no egress proxy (policy key egress.allow is empty)")
		}
		return nil
	}
	return fmt.Errorf("network %q needs backend docker: pods on backend kubernetes have no network but the egress tunnel", network)
}

// openTunnel opens an egress tunnel into pod.
func (r *Runtime) openTunnel(ctx context.Context, pod string) (*sandbox.Tunnel, error) {
	t, err := sandbox.OpenTunnel(ctx, sandbox.EgressTunnelAddr, r.egressProxy, func(ctx context.Context, o sandbox.ExecOptions) (int, error) {
		return r.Exec(ctx, pod, o)
	})
	if err != nil {
		return nil, fmt.Errorf("egress tunnel into pod %s: %w", pod, err)
	}
	return t, nil
}

// workspaceTunnel makes sure a running workspace pod made with egress has
// its tunnel (opening it again when it ended); other pods need none. What
// each pod needs is read from its annotation once.
func (r *Runtime) workspaceTunnel(ctx context.Context, id string) error {
	return r.wsTunnels.Ensure(ctx, id, func(ctx context.Context) (bool, error) {
		pod, err := r.core.Pods(r.namespace).Get(ctx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, sandbox.ErrNotFound
		} else if err != nil {
			return false, r.engineErr(fmt.Errorf("get pod %s: %w", id, err))
		}
		return pod.Annotations[annEgress] == "true", nil
	}, func(ctx context.Context) (*sandbox.Tunnel, error) {
		if r.egressProxy == nil {
			return nil, fmt.Errorf("workspace pod %s was made with egress, but this server runs no egress proxy (policy key egress.allow is empty)", id)
		}
		return r.openTunnel(ctx, id)
	})
}

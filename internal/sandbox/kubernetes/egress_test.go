package kubernetes

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// A pod's only network is the egress tunnel, and only once the server
// serves one: another network, or egress without a proxy, is refused with
// the reason.
func TestCheckNetwork(t *testing.T) {
	r := &Runtime{}
	for _, n := range []string{"", "none"} {
		if err := r.checkNetwork(n); err != nil {
			t.Errorf("network %q: %v", n, err)
		}
	}
	if err := r.checkNetwork("bridge"); err == nil || !strings.Contains(err.Error(), "needs backend docker") {
		t.Errorf("network bridge: %v", err)
	}
	if err := r.checkNetwork(sandbox.NetworkEgress); err == nil || !strings.Contains(err.Error(), "egress.allow is empty") {
		t.Errorf("network egress without a proxy: %v", err)
	}
	if addr := r.TunnelEgress(http.NotFoundHandler()); addr != sandbox.EgressTunnelAddr {
		t.Errorf("TunnelEgress answered %q", addr)
	}
	if err := r.checkNetwork(sandbox.NetworkEgress); err != nil {
		t.Errorf("network egress with a proxy: %v", err)
	}
}

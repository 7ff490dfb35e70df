package egress

import (
	"fmt"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// THREATS 92: an install through the tunnel without a policy list (any
// public host) never reaches the server's own loopback, the cluster's
// private addresses (API server, kubelets), link-local or shared addresses,
// a raw address, or a port other than 80 and 443; a grant's handler
// supplies the credentials itself, so a sandbox sends none and a forged
// token is replaced. Every refusal is audited; none dials.
func TestInstallGrantRefusesPrivateAndRawAddresses(t *testing.T) {
	if l := InstallAllow("egress", List{{Host: "pkg.internal"}}); len(l) != 1 || l[0].Host != "pkg.internal" {
		t.Fatalf("egress installs get the policy's list, got %v", l)
	}
	allow := InstallAllow("bridge", nil)
	if _, ok := allow.Match("registry.npmjs.org", 443); !ok {
		t.Fatal("any public host does not match a registry")
	}
	var mu sync.Mutex
	var events []Event
	p := &Proxy{Resolver: names{
		"localhost": "127.0.0.1", "kubernetes.default.svc": "10.96.0.1", "node.test": "192.168.1.5",
		"meta.test": "169.254.169.254", "shared.test": "100.64.0.9", "v6.test": "::1",
	}, Audit: func(e Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}
	h, revoke := p.GrantHandler(Grant{Tenant: "t", Job: "install", Allow: allow})
	defer revoke()
	srv := httptest.NewServer(h)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	targets := []string{"localhost:443", "kubernetes.default.svc:443", "node.test:443", "meta.test:80",
		"shared.test:443", "v6.test:443", "127.0.0.1:443", "10.96.0.1:443", "[::1]:443", "8.8.8.8:443",
		"registry.npmjs.org:22", srv.Listener.Addr().String()}
	for _, target := range targets {
		for _, token := range []string{"", "forged"} {
			if code, _, _ := connectThrough(t, addr, token, target); code != 403 {
				t.Errorf("CONNECT %s (token %q): %d, want 403", target, token, code)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2*len(targets) {
		t.Fatalf("%d audit events for %d requests", len(events), 2*len(targets))
	}
	for _, e := range events {
		if e.Allowed || e.Addr != "" || e.Job != "install" || e.Reason == "" {
			t.Errorf("event %+v", e)
		}
	}
	revoke()
	if code, _, _ := connectThrough(t, addr, "", "localhost:443"); code != 407 {
		t.Errorf("after revoke: %d, want 407", code)
	}
}

// With workspaces.install_network: egress the install grant is the
// policy's list, and egress.hosts pins its names (NewProxy).
func TestInstallGrantKeepsThePolicysListAndPins(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := up.Addr().(*net.TCPAddr).Port
	allow, err := ParseList([]string{fmt.Sprintf("mirror.internal:%d", port)})
	if err != nil {
		t.Fatal(err)
	}
	p := NewProxy(Hosts{"mirror.internal": netip.MustParseAddr("127.0.0.1")}, nil)
	h, revoke := p.GrantHandler(Grant{Job: "install", Allow: InstallAllow("egress", allow)})
	defer revoke()
	srv := httptest.NewServer(h)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	if code, c, _ := connectThrough(t, addr, "", fmt.Sprintf("mirror.internal:%d", port)); code != 200 {
		t.Fatalf("the pinned mirror: %d", code)
	} else {
		c.Close()
	}
	if code, _, _ := connectThrough(t, addr, "", "registry.npmjs.org:443"); code != 403 {
		t.Fatalf("a host off the policy's list: %d", code)
	}
}

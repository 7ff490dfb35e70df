package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// Runtime is a sandbox.Runtime in front of the job runtime: a spec on
// network sandbox.NetworkEgress gets a grant of its own for the job's life,
// and the proxy's address with the grant's token in HTTP_PROXY and
// HTTPS_PROXY (both spellings); NO_PROXY names only loopback. Its
// container is on the egress network, whose only peer is the proxy.
type Runtime struct {
	sandbox.Runtime
	proxy *Proxy
	addr  string // host:port of the proxy on the egress network's gateway
	allow List
	srv   *http.Server
	// unfence takes the proxy's port out of the host's fence.
	unfence func()
}

// Start makes the egress network (through rt), serves the proxy on its
// gateway and returns the runtime that hands grants to jobs.
func Start(ctx context.Context, next sandbox.Runtime, rt sandbox.EgressRuntime, allow List, hosts Hosts, audit func(Event)) (*Runtime, error) {
	gw, bridge, err := rt.EgressGateway(ctx)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(gw, 0).String())
	if err != nil {
		return nil, err
	}
	unfence, err := fence(bridge, ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		ln.Close()
		return nil, err
	}
	p := &Proxy{Audit: audit, Resolver: hosts.resolver(net.DefaultResolver)}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &Runtime{Runtime: next, proxy: p, addr: ln.Addr().String(), allow: allow, srv: srv, unfence: unfence}, nil
}

// StartTunneled is Start for a runtime whose sandboxes have no network
// (sandbox.EgressTunneler): the proxy has no listener, the runtime serves
// it over each egress sandbox's tunnel, and the grants' environment names
// the tunnel's address inside the sandbox. Grants, pins and audit are
// Start's.
func StartTunneled(next sandbox.Runtime, t sandbox.EgressTunneler, allow List, hosts Hosts, audit func(Event)) *Runtime {
	p := NewProxy(hosts, audit)
	return &Runtime{Runtime: next, proxy: p, addr: t.TunnelEgress(p), allow: allow}
}

// Addr is where the proxy listens (for a tunneled runtime: the tunnel,
// inside the sandbox).
func (r *Runtime) Addr() string { return r.addr }

// Start runs spec, with a grant when it is on the egress network: of the
// spec's own list when it has one, else of the policy's.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if spec.Network != sandbox.NetworkEgress || spec.Workspace != "" {
		return r.Runtime.Start(ctx, spec, out)
	}
	var env []string
	var revoke func()
	if spec.Egress != nil {
		var err error
		if env, revoke, err = r.GrantOwn(ctx, spec.JobID, spec.Egress); err != nil {
			return nil, err
		}
	} else {
		env, revoke = r.Grant(ctx, spec.JobID)
	}
	spec.Env = append(append([]string(nil), spec.Env...), env...)
	h, err := r.Runtime.Start(ctx, spec, out)
	if err != nil {
		revoke()
		return nil, err
	}
	go func() {
		<-h.Done()
		revoke()
	}()
	return h, nil
}

// Grant gives job (a name for the audit log) the allowlist until revoke,
// and returns the environment that points it at the proxy.
func (r *Runtime) Grant(ctx context.Context, job string) (env []string, revoke func()) {
	token, revoke := r.proxy.Add(Grant{Tenant: tenant.Owner(ctx), Job: job, Allow: r.allow})
	return ProxyEnv(ProxyURL(token, r.addr)), revoke
}

// GrantOwn gives job its own allowlist, which must lie within the policy's
// (see Narrow), until revoke. It is checked again at each grant, so a list
// kept with a workspace never outlives the policy that allowed it.
func (r *Runtime) GrantOwn(ctx context.Context, job string, entries []string) (env []string, revoke func(), err error) {
	allow, err := Narrow(r.allow, entries)
	if err != nil {
		return nil, nil, fmt.Errorf("egress: %w", err)
	}
	token, revoke := r.proxy.Add(Grant{Tenant: tenant.Owner(ctx), Job: job, Allow: allow})
	return ProxyEnv(ProxyURL(token, r.addr)), revoke, nil
}

// ProxyEnv is the environment that points HTTP clients at a proxy URL.
func ProxyEnv(proxyURL string) []string {
	return []string{
		"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "https_proxy=" + proxyURL,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	}
}

// Close stops the proxy, then closes the runtime behind.
func (r *Runtime) Close() error {
	if r.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.srv.Shutdown(ctx)
		r.unfence()
	}
	return r.Runtime.Close()
}

package egress

import (
	"encoding/base64"
	"net"
	"net/http"
)

// NewProxy is a proxy with no listener of its own, for tunnels: hosts
// (egress.hosts) pins names, audit receives its decisions.
func NewProxy(hosts Hosts, audit func(Event)) *Proxy {
	return &Proxy{Audit: audit, Resolver: hosts.resolver(net.DefaultResolver)}
}

// Proxy is the runtime's proxy, to serve tunnels with the same grants'
// rules, pins and audit.
func (r *Runtime) Proxy() *Proxy { return r.proxy }

// AnyPublic is the allowlist of an install through the tunnel when the
// policy names no list of its own: every host name, on ports 80 and 443.
// It is a wildcard, so it keeps the proxy's refusal of private, loopback,
// link-local and shared addresses (on a cluster the server can reach the
// API server and the kubelets; the sandbox must not), and a raw address
// matches no rule. Hosts (egress.hosts) still pins names.
var AnyPublic = List{{Wildcard: true}}

// InstallAllow is the allowlist of an install that reaches the network
// through the tunnel: the policy's egress.allow when its installs go
// through the proxy (workspaces.install_network: egress), else AnyPublic.
func InstallAllow(installNetwork string, allow List) List {
	if installNetwork == "egress" {
		return allow
	}
	return AnyPublic
}

// GrantHandler registers g and returns a handler that serves it: every
// request reaching it carries g's credentials, put there by the handler,
// so the sandbox at the other end of a tunnel never holds the token (and
// whatever credentials it sends are replaced). revoke ends the grant.
// Decisions go to the proxy's Audit as for any grant.
func (p *Proxy) GrantHandler(g Grant) (h http.Handler, revoke func()) {
	token, revoke := p.Add(g)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(proxyUser+":"+token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Proxy-Authorization", auth)
		p.ServeHTTP(w, r)
	}), revoke
}

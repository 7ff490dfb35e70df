package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// startEgress makes the egress network, serves the allowlist proxy on its
// gateway, and puts the runtime that hands jobs their grants in front of rt;
// for an engine whose sandboxes have no network (Capabilities.EgressTunnel),
// the engine serves the proxy over each egress sandbox's tunnel instead.
// Every decision of the proxy goes to the audit log.
func startEgress(rt sandbox.Runtime, caps sandbox.Capabilities, pol *policy.Policy, auditLog *audit.Log, server string) (*egress.Runtime, error) {
	allow, err := egress.ParseList(pol.Egress.Allow)
	if err != nil {
		return nil, err // the policy was validated: not reached
	}
	hosts, err := egress.ParseHosts(pol.Egress.Hosts)
	if err != nil {
		return nil, err
	}
	if caps.EgressTunnel != nil {
		return egress.StartTunneled(rt, caps.EgressTunnel, allow, hosts, egressAudit(auditLog, server)), nil
	}
	if caps.EgressNetwork == nil {
		return nil, fmt.Errorf("policy egress.allow: this server's runtime has no egress network (backend: %s)", pol.Backend)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := egress.Start(ctx, rt, caps.EgressNetwork, allow, hosts, egressAudit(auditLog, server))
	if err != nil {
		return nil, fmt.Errorf("egress proxy (policy egress.allow): %w", err)
	}
	return e, nil
}

// egressAudit writes each of the proxy's decisions to the audit log.
func egressAudit(auditLog *audit.Log, server string) func(egress.Event) {
	return func(ev egress.Event) {
		entry := audit.Entry{Time: time.Now().UTC(), Client: ev.Tenant, Server: server, Tool: "egress", JobID: ev.Job,
			Decision: audit.Allowed, Outcome: "ok", Host: ev.Host, Port: ev.Port, BytesUp: ev.BytesUp, BytesDown: ev.BytesDown}
		if !ev.Allowed {
			entry.Decision, entry.Outcome, entry.Error = audit.Refused, "error", ev.Reason
		}
		_ = auditLog.Write(entry)
	}
}

// installTunnel grants an install the proxy behind its tunnel: the egress
// runtime's proxy when one runs, else one of its own (egress.hosts pinned,
// decisions audited); the allowlist is egress.InstallAllow's (the policy's
// egress.allow with workspaces.install_network: egress, else any public host).
func installTunnel(e *egress.Runtime, pol *policy.Policy, auditLog *audit.Log, server string) (func(ctx context.Context, job string) (http.Handler, func()), error) {
	allow, err := egress.ParseList(pol.Egress.Allow)
	if err != nil {
		return nil, err // the policy was validated: not reached
	}
	var proxy *egress.Proxy
	if e != nil {
		proxy = e.Proxy()
	} else {
		hosts, err := egress.ParseHosts(pol.Egress.Hosts)
		if err != nil {
			return nil, err
		}
		proxy = egress.NewProxy(hosts, egressAudit(auditLog, server))
	}
	list := egress.InstallAllow(pol.Workspaces.InstallNetwork, allow)
	return func(ctx context.Context, job string) (http.Handler, func()) {
		return proxy.GrantHandler(egress.Grant{Tenant: tenant.Owner(ctx), Job: job, Allow: list})
	}, nil
}

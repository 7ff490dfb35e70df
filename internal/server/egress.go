package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/telemetry"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// startEgress makes the egress network, serves the allowlist proxy on its
// gateway, and puts the runtime that hands jobs their grants in front of rt;
// for an engine whose sandboxes have no network (Capabilities.EgressTunnel),
// the engine serves the proxy over each egress sandbox's tunnel instead.
// Every decision of the proxy goes to decisions (egressDecisions).
func startEgress(rt sandbox.Runtime, caps sandbox.Capabilities, pol *policy.Policy, stateDir string, decisions func(egress.Event)) (*egress.Runtime, error) {
	cfg, err := egressConfig(pol, stateDir, decisions)
	if err != nil {
		return nil, err
	}
	if caps.EgressTunnel != nil {
		return egress.StartTunneled(rt, caps.EgressTunnel, cfg), nil
	}
	if caps.EgressNetwork == nil {
		return nil, fmt.Errorf("policy egress.allow: this server's runtime has no egress network (backend: %s)", pol.Backend)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := egress.Start(ctx, rt, caps.EgressNetwork, cfg)
	if err != nil {
		return nil, fmt.Errorf("egress proxy (policy egress.allow): %w", err)
	}
	return e, nil
}

// Under the state directory: the proxy's CA (for secrets), and the grants
// of running jobs (for a server that adopts them after a restart).
const (
	egressCADir     = "egress-ca"
	egressGrantsDir = "egress-grants"
)

// egressConfig is the proxy's configuration from the policy: the
// allowlist, pinned names, the audit, and the secrets with the CA that
// signs their hosts' certificates (made under the state directory when
// the policy first names a secret).
func egressConfig(pol *policy.Policy, stateDir string, decisions func(egress.Event)) (egress.Config, error) {
	allow, err := egress.ParseList(pol.Egress.Allow)
	if err != nil {
		return egress.Config{}, err // the policy was validated: not reached
	}
	hosts, err := egress.ParseHosts(pol.Egress.Hosts)
	if err != nil {
		return egress.Config{}, err
	}
	cfg := egress.Config{Allow: allow, Hosts: hosts, Audit: decisions, GrantsDir: filepath.Join(stateDir, egressGrantsDir)}
	if len(pol.Secrets) == 0 {
		return cfg, nil
	}
	if cfg.CA, err = egress.LoadCA(filepath.Join(stateDir, egressCADir)); err != nil {
		return egress.Config{}, fmt.Errorf("policy secrets: %w", err)
	}
	cfg.Secrets = map[string]egress.Secret{}
	for name, s := range pol.Secrets {
		list, err := egress.Narrow(allow, s.Hosts)
		if err != nil {
			return egress.Config{}, fmt.Errorf("policy secrets.%s.hosts: %w", name, err) // validated: not reached
		}
		src := s.Source()
		cfg.Secrets[name] = egress.Secret{Hosts: list, Tenants: s.Tenants, Read: func() ([]byte, error) { return src.Read(os.Getenv) }}
	}
	return cfg, nil
}

// egressDecisions writes each of the proxy's decisions to the audit log,
// and exports it as a span of its job's call when traces are on.
func egressDecisions(auditLog *audit.Log, server string, tracer *telemetry.Tracer) func(egress.Event) {
	return func(ev egress.Event) {
		tracer.Egress(telemetry.EgressDecision{Tenant: ev.Tenant, Job: ev.Job, Host: ev.Host, Port: ev.Port, Allowed: ev.Allowed,
			Reason: ev.Reason, BytesUp: ev.BytesUp, BytesDown: ev.BytesDown, Secrets: len(ev.Secrets), Start: ev.Start, End: time.Now()})
		entry := audit.Entry{Time: time.Now().UTC(), Client: ev.Tenant, Server: server, Tool: "egress", JobID: ev.Job,
			Decision: audit.Allowed, Outcome: "ok", Host: ev.Host, Port: ev.Port, BytesUp: ev.BytesUp, BytesDown: ev.BytesDown}
		if len(ev.Secrets) > 0 {
			entry.Tool, entry.Secrets = "secret", ev.Secrets // each use, by name: never the value
		}
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
func installTunnel(e *egress.Runtime, pol *policy.Policy, decisions func(egress.Event)) (func(ctx context.Context, job string) (http.Handler, func()), error) {
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
		proxy = egress.NewProxy(hosts, decisions)
	}
	list := egress.InstallAllow(pol.Workspaces.InstallNetwork, allow)
	return func(ctx context.Context, job string) (http.Handler, func()) {
		return proxy.GrantHandler(egress.Grant{Tenant: tenant.Owner(ctx), Job: job, Allow: list})
	}, nil
}

package server

import (
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
	"github.com/sandboxer/sandboxer/internal/sandbox/pool"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// TestStackShapes builds the runtime stack on the fake for each shape the
// policy and the engine can give it, and checks which layers it holds and
// which is on top: the pool only when asked for and the engine warms, the
// egress grants only with an allowlist (over the egress network or the
// tunnel, as the engine declares), the install tunnel only where installers
// have no network, workspaces only when enabled.
func TestStackShapes(t *testing.T) {
	for _, c := range []struct {
		name                  string
		pool, allow, ws       bool
		noWarm                bool // the engine declares no Warm
		shape                 fake.Egress
		top                   string // "engine", "pool", "egress" or "workspaces"
		wantTunnel, wantGrant bool
	}{
		{name: "bare", shape: fake.EgressGateway, top: "engine"},
		{name: "pool", pool: true, shape: fake.EgressGateway, top: "pool"},
		{name: "pool on an engine that cannot warm", pool: true, noWarm: true, shape: fake.EgressGateway, top: "engine"},
		{name: "workspaces", ws: true, shape: fake.EgressGateway, top: "workspaces"},
		{name: "allowlist on the egress network", allow: true, shape: fake.EgressGateway, top: "egress", wantGrant: true},
		{name: "allowlist through the tunnel", allow: true, shape: fake.EgressTunnelled, top: "egress", wantGrant: true, wantTunnel: true},
		{name: "tunnel without an allowlist", shape: fake.EgressTunnelled, top: "engine", wantTunnel: true},
		{name: "everything, network", pool: true, allow: true, ws: true, shape: fake.EgressGateway, top: "workspaces", wantGrant: true},
		{name: "everything, tunnel", pool: true, allow: true, ws: true, shape: fake.EgressTunnelled, top: "workspaces", wantGrant: true, wantTunnel: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pol := policy.Default()
			pol.Pool.Enabled = c.pool
			pol.Workspaces.Enabled = false // the manager is made all the same: only the engine decides
			if c.allow {
				pol.Egress.Allow = []string{"pkg.example.com"}
			}
			dir := t.TempDir()
			cfg := &config.Config{Policy: pol, StateDir: dir}
			st, err := store.Open(filepath.Join(dir, "sandboxer.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			auditLog, err := audit.Open(dir, audit.DefaultMaxBytes, audit.DefaultKeep)
			if err != nil {
				t.Fatal(err)
			}
			defer auditLog.Close()
			var engine sandbox.Engine = fake.New("stack-test").WithEgress(c.shape)
			engine = partial{engine, !c.ws, c.noWarm}
			s, err := newStack(cfg, engine, lang.NewRegistry(pol.Image, nil), st, egressDecisions(auditLog, "server", nil), "server", observe.Nop{}, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			if (s.warm != nil) != (c.pool && !c.noWarm) || (s.egress != nil) != c.allow || (s.workspaces != nil) != c.ws {
				t.Errorf("layers: pool %v, egress %v, workspaces %v", s.warm != nil, s.egress != nil, s.workspaces != nil)
			}
			if (s.tunnelProxy != nil) != c.wantTunnel {
				t.Errorf("install tunnel: %v, want %v", s.tunnelProxy != nil, c.wantTunnel)
			}
			if got := layer(s.rt, engine); got != c.top {
				t.Errorf("top layer: %s, want %s", got, c.top)
			}
		})
	}
}

// layer names the runtime on top of the stack.
func layer(rt sandbox.Runtime, engine sandbox.Runtime) string {
	switch rt.(type) {
	case *pool.Pool:
		return "pool"
	case *workspace.Runtime:
		return "workspaces"
	}
	if rt == engine {
		return "engine"
	}
	return "egress"
}

// partial is an engine that lacks some of the fake's parts.
type partial struct {
	sandbox.Engine
	noWorkspaces, noWarm bool
}

func (p partial) Capabilities() sandbox.Capabilities {
	c := p.Engine.Capabilities()
	if p.noWorkspaces {
		c.Workspaces = nil
	}
	if p.noWarm {
		c.Warm = nil
	}
	return c
}

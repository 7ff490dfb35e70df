package server

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/baseline"
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/deps"
	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/gobuild"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/pool"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// stack is the runtime jobs start on, layered in front of the engine:
// engine → warm pool → egress grants → workspaces. Each layer is a
// sandbox.Runtime that serves what it knows and passes the rest down; a
// layer the policy or the engine does not have is left out.
type stack struct {
	rt         sandbox.Runtime    // the top layer: what the job manager starts on
	warm       *pool.Pool         // nil: pool off, or the engine cannot warm
	egress     *egress.Runtime    // nil: no egress allowlist
	workspaces *workspace.Manager // nil: the engine keeps no workspaces
	// tunnelProxy grants an install whose sandbox has no network the
	// proxy over its tunnel (nil: installers have networks).
	tunnelProxy func(ctx context.Context, job string) (http.Handler, func())
}

// newStack builds the runtime stack on engine, as the policy asks and the
// engine's capabilities allow.
func newStack(cfg *config.Config, engine sandbox.Engine, languages *lang.Registry, st *store.Store, decisions func(egress.Event), server string, obs observe.Observer, log zerolog.Logger) (*stack, error) {
	pol, caps := cfg.Policy, engine.Capabilities()
	s := &stack{rt: engine}
	if pol.Pool.Enabled && caps.Warm != nil {
		targets, err := poolTargets(pol, languages)
		if err != nil {
			return nil, err
		}
		s.warm = pool.New(caps.Warm, targets, pol.Pool.Parallel, log, pool.WithObserver(obs),
			pool.FollowUse(pool.Follow{MaxTotal: pol.Pool.MaxTotal, Idle: time.Duration(pol.Pool.FollowIdleS) * time.Second,
				// A fresh go job's shape mounts its tenant's shared build cache.
				Volume: func(m sandbox.Mount) bool { return m.Target == gobuild.Dir && m.ReadOnly }}))
		s.rt = s.warm
	}
	if len(pol.Egress.Allow) > 0 && (caps.EgressNetwork != nil || caps.EgressTunnel != nil || caps.TunnelInstalls == nil) {
		// Jobs (and installs) on network egress reach the policy's hosts
		// through the proxy; so do jobs and workspaces that ask for some of
		// them (the egress argument), whatever the policy's network.
		var err error
		if s.egress, err = startEgress(s.rt, caps, pol, cfg.StateDir, decisions); err != nil {
			return nil, err
		}
		s.rt = s.egress
	}
	if len(pol.Secrets) > 0 && s.egress == nil {
		// Only the egress runtime gives a job its placeholders: a spec's
		// secrets below it would be dropped without a word.
		return nil, fmt.Errorf("policy secrets: this server's runtime has no egress proxy to swap them at (backend: %s)", pol.Backend)
	}
	// A runtime whose installers have no network (workspaces' installs,
	// dependency caches) has them reach the proxy through the tunnel over
	// their exec.
	if caps.TunnelInstalls != nil {
		var err error
		if s.tunnelProxy, err = installTunnel(s.egress, pol, decisions); err != nil {
			return nil, err
		}
	}
	// Workspaces sit in front: a job naming one runs in its container. A
	// runtime without workspaces leaves them nil, and their tools refuse.
	opts := workspace.Options{Observer: obs, TunnelProxy: s.tunnelProxy, Baselines: baseline.New(filepath.Join(cfg.StateDir, "baselines")),
		CheckpointDir: filepath.Join(cfg.StateDir, "checkpoints")}
	if s.egress != nil {
		opts.Egress, opts.Through = s.egress.Grant, s.egress.Through
	}
	if s.workspaces = workspace.New(engine, st, pol, server, log, opts); s.workspaces != nil {
		s.rt = workspace.NewRuntime(s.rt, s.workspaces)
	}
	return s, nil
}

// run starts the layers' background loops.
func (s *stack) run() {
	if s.warm != nil {
		go s.warm.Run()
	}
	if s.workspaces != nil {
		go s.workspaces.Run()
	}
}

// drain removes the warm sandboxes at shutdown.
func (s *stack) drain(ctx context.Context) {
	if s.warm != nil {
		s.warm.Drain(ctx)
	}
}

// close closes the stack from the top (the pool removes its warm
// sandboxes, then waits for removals under way) and the workspaces' ports.
func (s *stack) close() {
	_ = s.rt.Close()
	if s.workspaces != nil {
		s.workspaces.ClosePortsAll()
	}
}

// depsOptions wire the dependency caches to the stack: installs through the
// tunnel where installers have no network, and, with a pool, a warm
// sandbox kept with each recently used cache mounted, so a script with
// dependencies starts as fast as one without.
func depsOptions(pol *policy.Policy, s *stack, obs observe.Observer) deps.Options {
	o := deps.Options{Observer: obs, TunnelProxy: s.tunnelProxy}
	if s.warm == nil {
		return o
	}
	o.Warm = func(language, image string, m sandbox.Mount) {
		spec, err := job.PoolSpec(pol, image)
		if err != nil {
			return
		}
		spec.Mounts = []sandbox.Mount{m}
		// Shaped as run_script's job with that cache (tools.runScript).
		if l, ok := lang.Builtin(language); ok && l.Script.MainDeps {
			spec.Prestart = l.Script.Prestart()
		}
		s.warm.AddTarget(pool.Target{Name: "deps " + m.Volume, Spec: spec, Size: 1})
	}
	o.Unwarm = func(ctx context.Context, volume string) {
		s.warm.RemoveTargets(ctx, func(sp sandbox.Spec) bool {
			return slices.ContainsFunc(sp.Mounts, func(m sandbox.Mount) bool { return m.Volume == volume })
		})
	}
	return o
}

// poolTargets are the warm sandboxes the policy asks for, per language.
func poolTargets(pol *policy.Policy, languages *lang.Registry) ([]pool.Target, error) {
	var targets []pool.Target
	for name, size := range pol.Pool.Size {
		if size <= 0 {
			continue
		}
		l, image, ok := languages.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("policy: pool.size.%s: no such language (known: %s)", name, strings.Join(languages.Names(), ", "))
		}
		spec, err := job.PoolSpec(pol, image)
		if err != nil {
			return nil, err
		}
		targets = append(targets, pool.Target{Name: l.Name, Spec: spec, Size: size})
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].Name < targets[j].Name })
	return targets, nil
}

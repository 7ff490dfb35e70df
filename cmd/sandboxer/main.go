// Command sandboxer is an MCP server that runs agents' commands in hardened
// Docker sandboxes. It stays thin: parse, wire, serve.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"

	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/auth"
	"github.com/sandboxer/sandboxer/internal/baseline"
	"github.com/sandboxer/sandboxer/internal/blocklist"
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/console"
	"github.com/sandboxer/sandboxer/internal/deps"
	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/gobuild"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/logging"
	"github.com/sandboxer/sandboxer/internal/mcpserver"
	"github.com/sandboxer/sandboxer/internal/memtrim"
	"github.com/sandboxer/sandboxer/internal/metrics"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/pool"
	"github.com/sandboxer/sandboxer/internal/script"
	"github.com/sandboxer/sandboxer/internal/serverlock"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/tools"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// idleTrimAfter is how long a server goes without tool calls before it
// trims its memory (internal/memtrim): long enough that an agent's next call
// rarely pays for mapping pages back.
const idleTrimAfter = 5 * time.Second

const usage = `usage: sandboxer <command> [flags]

commands:
  serve          serve MCP over stdio (the default)
  images build   build the sandbox images through the Engine API (--force rebuilds)
  images list    show each image's tag and whether it is built
  doctor         check the engine, the images and the hardening profile
  audit          print the audit log (--job ID, --since 1h or 2026-01-02T15:04:05Z, --state-dir DIR, --json)
  version        print the version
`

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(args)
	case "images":
		err = imagesCmd(args)
	case "doctor":
		err = doctor(args)
	case "audit":
		err = auditCmd(args)
	case "version":
		fmt.Println(mcpserver.Version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandboxer:", err)
		os.Exit(1)
	}
}

// loadConfig parses a command's flags and resolves the configuration.
func loadConfig(name string, args []string) (*config.Config, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	flags := config.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return flags.Load(os.Getenv)
}

func serve(args []string) error {
	cfg, err := loadConfig("serve", args)
	if err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, cfg.LogLevel)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	st, err := store.Open(filepath.Join(cfg.StateDir, "sandboxer.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	if st.SetAside != "" {
		log.Warn().Str("moved_to", st.SetAside).AnErr("cause", st.SetAsideErr).Msg("job database was unreadable: set it aside and started a fresh one")
	}
	// Every stdio client starts its own server, often on the same state
	// directory: this identity tells the others what is this server's.
	lock, err := serverlock.Acquire(cfg.StateDir)
	if err != nil {
		return err
	}
	defer lock.Release()
	// The metrics are made first, so every part can report to them; their
	// state families read the parts made below, only once the listener serves.
	var (
		mt         *metrics.Metrics
		tokens     *auth.Tokens
		jobs       *job.Manager
		workspaces *workspace.Manager
		warm       *pool.Pool
		depCaches  *deps.Manager
	)
	if cfg.TokenFile != "" {
		if tokens, err = auth.Load(cfg.TokenFile); err != nil {
			return err
		}
		for _, e := range tokens.Entries() {
			if err := mcpserver.CheckToolsets(e.Toolsets); err != nil {
				return fmt.Errorf("token file %s: %s: toolsets=: %w", cfg.TokenFile, e.Name, err)
			}
		}
	}
	if cfg.MetricsAddr != "" {
		mt = metrics.New(stateSources(&jobs, &workspaces, &warm, &depCaches))
	}
	var onEngineError func(string)
	if mt != nil {
		onEngineError = mt.EngineError
	}
	engine, err := newEngine(cfg, lock.ID(), onEngineError)
	if err != nil {
		return err
	}
	languages := lang.NewRegistry(cfg.Policy)
	mt.SetImageLanguages(imageLanguages(languages))
	var rt sandbox.Runtime = engine
	if cfg.Policy.Pool.Enabled {
		targets, err := poolTargets(cfg.Policy, languages)
		if err != nil {
			return err
		}
		warm = pool.New(engine, targets, cfg.Policy.Pool.Parallel, log)
		if mt != nil {
			warm.OnTake = mt.PoolTake
		}
		warm.FollowUse(pool.Follow{MaxTotal: cfg.Policy.Pool.MaxTotal, Idle: time.Duration(cfg.Policy.Pool.FollowIdleS) * time.Second,
			// A fresh go job's shape mounts its tenant's shared build cache.
			Volume: func(m sandbox.Mount) bool { return m.Target == gobuild.Dir && m.ReadOnly }})
		rt = warm
	}
	auditLog, err := audit.Open(cfg.StateDir, audit.DefaultMaxBytes, audit.DefaultKeep)
	if err != nil {
		return err
	}
	defer auditLog.Close()
	var egressRT *egress.Runtime
	_, tunnelInstalls := engine.(sandbox.TunnelInstaller)
	_, egressNetwork := engine.(sandbox.EgressRuntime)
	_, egressTunnel := engine.(sandbox.EgressTunneler)
	if len(cfg.Policy.Egress.Allow) > 0 && (egressNetwork || egressTunnel || !tunnelInstalls) {
		// Jobs (and installs) on network egress reach the policy's hosts
		// through the proxy; so do jobs and workspaces that ask for some of
		// them (the egress argument), whatever the policy's network.
		if egressRT, err = startEgress(rt, engine, cfg.Policy, auditLog, lock.ID()); err != nil {
			return err
		}
		rt = egressRT
	}
	// A runtime whose installers have no network (workspaces' installs,
	// dependency caches) has them reach the proxy through the tunnel over
	// their exec.
	var tunnelProxy func(ctx context.Context, job string) (http.Handler, func())
	if tunnelInstalls {
		if tunnelProxy, err = installTunnel(egressRT, cfg.Policy, auditLog, lock.ID()); err != nil {
			return err
		}
	}
	// Workspaces sit in front: a job naming one runs in its container. A
	// runtime without workspaces leaves them nil, and their tools refuse.
	if wsRT, ok := engine.(sandbox.WorkspaceRuntime); ok {
		workspaces = workspace.New(wsRT, st, cfg.Policy, lock.ID(), log)
		workspaces.Baselines = baseline.New(filepath.Join(cfg.StateDir, "baselines"))
		if egressRT != nil {
			workspaces.Egress = egressRT.Grant
			workspaces.GrantEgress = egressRT.GrantOwn
		}
		workspaces.TunnelProxy = tunnelProxy
		defer workspaces.ClosePortsAll()
		if mt != nil {
			workspaces.OnInstall = func(manager string, ok bool) { mt.Install(manager, ok) }
		}
		rt = workspace.NewRuntime(rt, workspaces)
	}
	defer rt.Close() // removes the warm sandboxes, then waits for removals under way
	jobOpts := []job.Option{job.WithServer(lock.ID(), serverlock.NewProber(cfg.StateDir)), job.WithMetrics(mt)}
	// Fresh go sandboxes read their tenant's shared build cache, which a
	// trusted builder fills after them.
	if goBuilds := gobuild.New(engine, cfg.Policy, log); goBuilds != nil {
		defer goBuilds.Close()
		if mt != nil {
			goBuilds.OnBuild = func(ok bool) { mt.Install("go-build-cache", ok) }
		}
		jobOpts = append(jobOpts, job.WithExtension(goBuilds))
	}
	if cfg.HTTPAddr != "" && tokens != nil {
		// Each token that may run jobs has its share of the job slots.
		jobOpts = append(jobOpts, job.WithShares(tokens.ShareWeights()))
	}
	jobs, err = job.New(rt, st, cfg.Policy, cfg.StateDir, log, jobOpts...)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	recoverCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := jobs.Recover(recoverCtx); err != nil {
		log.Warn().Err(err).Msg("engine not reachable at start: jobs will fail until it is; recovery retried in the background")
	}
	cancel()
	go jobs.RunCleanup()
	if warm != nil {
		go warm.Run()
	}
	if workspaces != nil {
		go workspaces.Run()
	}

	depCaches = deps.New(engine, cfg.Policy)
	if depCaches != nil {
		depCaches.TunnelProxy = tunnelProxy
	}
	if mt != nil && depCaches != nil {
		depCaches.OnInstall = func(language string, ok bool) { mt.Install("deps-"+language, ok) }
	}
	if warm != nil && depCaches != nil {
		// A script with dependencies starts as fast as one without: the pool
		// keeps a sandbox with each recently used cache mounted.
		depCaches.Warm = func(language, image string, m sandbox.Mount) {
			spec, err := job.PoolSpec(cfg.Policy, image)
			if err != nil {
				return
			}
			spec.Mounts = []sandbox.Mount{m}
			// Shaped as run_script's job with that cache (tools.runScript).
			if sl, ok := script.Lookup(language); ok && sl.MainDeps {
				spec.Prestart = sl.Prestart()
			}
			warm.AddTarget(pool.Target{Name: "deps " + m.Volume, Spec: spec, Size: 1})
		}
		depCaches.Unwarm = func(ctx context.Context, volume string) {
			warm.RemoveTargets(ctx, func(s sandbox.Spec) bool {
				return slices.ContainsFunc(s.Mounts, func(m sandbox.Mount) bool { return m.Volume == volume })
			})
		}
	}
	blocked, err := blocklist.New(cfg.Policy.Block.Commands, st, cfg.Policy.Block.AgentEdits)
	if err != nil {
		return err
	}
	if mt != nil {
		blocked.Observe = func(d blocklist.Decision) { mt.BlockDecision(!d.Allowed, d.Rule.Command) }
	}
	// An idle server hands back what its calls left behind (heap, binary pages).
	trim := memtrim.New(idleTrimAfter, nil)
	defer trim.Close()
	srv, err := mcpserver.New(tools.Deps{
		Jobs: jobs, Policy: cfg.Policy, Languages: languages, Runtime: rt, Pool: warm, Workspaces: workspaces,
		Dependencies: depCaches, Blocklist: blocked, Processes: processInspector(engine),
	}, cfg.Toolsets, mcpserver.WithAudit(auditLog, lock.ID()), mcpserver.WithMetrics(mt), mcpserver.WithIdleTrim(trim))
	if err != nil {
		return err
	}
	// The console (/ui) hangs on both listeners, as /metrics does; it needs
	// tokens to sign in with.
	var ui http.Handler
	if tokens != nil {
		var wsUI console.Workspaces // an untyped nil when there are none
		if workspaces != nil {
			wsUI = workspaces
		}
		ui = console.New(console.Deps{
			Auth: tokens, Jobs: jobs, Workspaces: wsUI, AuditDir: cfg.StateDir, Audit: auditLog,
			Blocklist: blocked.All, Pool: poolStats(warm), Caches: cacheList(depCaches), Done: ctx.Done(),
		})
	}
	mountUI := func(mux *http.ServeMux) {
		if ui != nil {
			mux.Handle("/ui/", ui)
			mux.Handle("GET /ui", http.RedirectHandler("/ui/jobs", http.StatusSeeOther))
		}
	}
	door := auth.NewDoor() // one for every listener: bad credentials count alike everywhere
	if mt != nil {
		stopHTTP, err := serveHTTP(ctx, cfg.MetricsAddr, tokens, door, cfg.Policy.HTTP.Hosts, mt, mountUI, log)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	// Start-up hashed the embedded image contexts (tens of MB, once): give
	// that memory back before serving, so an idle server stays small.
	memtrim.Trim()
	var serveErr error
	if cfg.HTTPAddr != "" {
		serveErr = srv.ServeHTTP(ctx, cfg.HTTPAddr, mcpserver.HTTPOptions{
			Tokens: authenticator(tokens), RatePerTenant: cfg.HTTPRate, TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, Door: door, Hosts: cfg.Policy.HTTP.Hosts,
			Ready: func(addr string) {
				log.Info().Str("state_dir", cfg.StateDir).Str("engine", engine.Host()).Str("instance", cfg.Instance()).Str("server", lock.ID()).
					Str("addr", addr).Bool("tokens", tokens != nil).Bool("tls", cfg.TLSCert != "").Msg("serving MCP on http")
				if tokens != nil && cfg.TLSCert == "" && !mcpserver.IsLoopback(addr) {
					log.Warn().Str("addr", addr).Msg("plain HTTP beyond loopback: tokens cross the network in clear; give --tls-cert and --tls-key")
				}
			},
			Mount: func(mux *http.ServeMux) {
				if mt != nil && tokens != nil {
					mux.Handle("GET /metrics", mt.Scrape(tokens))
				}
				mountUI(mux)
			},
		})
	} else {
		log.Info().Str("state_dir", cfg.StateDir).Str("engine", engine.Host()).Str("instance", cfg.Instance()).Str("server", lock.ID()).Msg("serving MCP on stdio")
		serveErr = srv.ServeStdio(ctx, os.Stdin, os.Stdout, logging.StdLogger(log))
	}

	// stdin ended or a signal came: end every job, flush state, exit promptly.
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelShutdown()
	jobs.Shutdown(shutdownCtx)
	if warm != nil {
		warm.Drain(shutdownCtx)
	}
	jobs.SweepOwn(shutdownCtx)
	log.Info().Msg("stopped")
	if serveErr != nil && !errors.Is(serveErr, context.Canceled) {
		return serveErr
	}
	return nil
}

// authenticator is nil when no token file was given (an untyped nil, so
// the HTTP transport sees none).
func authenticator(t *auth.Tokens) mcpserver.Authenticator {
	if t == nil {
		return nil
	}
	return t
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

// startEgress makes the egress network, serves the allowlist proxy on its
// gateway, and puts the runtime that hands jobs their grants in front of rt;
// for an engine whose sandboxes have no network (sandbox.EgressTunneler),
// the engine serves the proxy over each egress sandbox's tunnel instead.
// Every decision of the proxy goes to the audit log.
func startEgress(rt sandbox.Runtime, engine sandbox.Runtime, pol *policy.Policy, auditLog *audit.Log, server string) (*egress.Runtime, error) {
	allow, err := egress.ParseList(pol.Egress.Allow)
	if err != nil {
		return nil, err // the policy was validated: not reached
	}
	hosts, err := egress.ParseHosts(pol.Egress.Hosts)
	if err != nil {
		return nil, err
	}
	if t, ok := engine.(sandbox.EgressTunneler); ok {
		return egress.StartTunneled(rt, t, allow, hosts, egressAudit(auditLog, server)), nil
	}
	egressEngine, ok := engine.(sandbox.EgressRuntime)
	if !ok {
		return nil, fmt.Errorf("policy egress.allow: this server's runtime has no egress network (backend: %s)", pol.Backend)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := egress.Start(ctx, rt, egressEngine, allow, hosts, egressAudit(auditLog, server))
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

// processInspector is the engine's process view; nil (an untyped nil, so
// the tools see none) when the runtime has none.
func processInspector(e engine) sandbox.ProcessInspector {
	if p, ok := e.(sandbox.ProcessInspector); ok {
		return p
	}
	return nil
}

// Package server assembles sandboxer from its configuration: it makes every
// part in order (store, engine, runtime stack, managers, tools, listeners),
// passing each its collaborators at construction, and runs it until its
// transport ends. docs/architecture.md draws the result.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/auth"
	"github.com/sandboxer/sandboxer/internal/blocklist"
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/console"
	"github.com/sandboxer/sandboxer/internal/deps"
	"github.com/sandboxer/sandboxer/internal/e2b"
	"github.com/sandboxer/sandboxer/internal/gobuild"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/logging"
	"github.com/sandboxer/sandboxer/internal/mcpserver"
	"github.com/sandboxer/sandboxer/internal/memtrim"
	"github.com/sandboxer/sandboxer/internal/metrics"
	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/serverlock"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/telemetry"
	"github.com/sandboxer/sandboxer/internal/template"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// idleTrimAfter is how long a server goes without tool calls before it
// trims its memory (internal/memtrim): long enough that an agent's next call
// rarely pays for mapping pages back.
const idleTrimAfter = 5 * time.Second

// recoverWithin bounds the start-up recovery of the jobs a previous server
// left; past it, recovery goes on in the background.
const recoverWithin = 30 * time.Second

// Server is sandboxer, assembled: New makes it, Serve runs it, Close
// releases what New took.
type Server struct {
	cfg       *config.Config
	log       zerolog.Logger
	st        *store.Store
	lock      *serverlock.Lock
	tokens    *auth.Tokens      // nil: no token file
	tracer    *telemetry.Tracer // nil: no OTLP endpoint in the environment
	e2b       *e2b.Server       // nil: no --e2b
	mt        *metrics.Metrics  // nil: no metrics
	engine    sandbox.Engine
	audit     *audit.Log
	stack     *stack
	goBuilds  *gobuild.Cache
	jobs      *job.Manager
	caches    *deps.Manager
	templates *template.Manager
	blocked   *blocklist.List
	trim      *memtrim.Trimmer
	mcp       *mcpserver.Server
	closers   []func() // in the order they run
}

// New makes every part of the server from cfg, in order. It starts no
// background work and listens on nothing (Serve does).
func New(cfg *config.Config, log zerolog.Logger) (_ *Server, err error) {
	s := &Server{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if s.st, err = store.Open(filepath.Join(cfg.StateDir, "sandboxer.db")); err != nil {
		return nil, err
	}
	s.onClose(func() { s.st.Close() })
	if s.st.SetAside != "" {
		log.Warn().Str("moved_to", s.st.SetAside).AnErr("cause", s.st.SetAsideErr).Msg("job database was unreadable: set it aside and started a fresh one")
	}
	// Every stdio client starts its own server, often on the same state
	// directory: this identity tells the others what is this server's.
	if s.lock, err = serverlock.Acquire(cfg.StateDir); err != nil {
		return nil, err
	}
	s.onClose(s.lock.Release)
	if s.tokens, err = loadTokens(cfg.TokenFile); err != nil {
		return nil, err
	}
	// The built-in languages under the policy's images: the pool's shapes
	// and the metrics' families. The registry the tools read adds the
	// templates, once they are made.
	builtins := lang.NewRegistry(cfg.Policy.Image, nil)
	var obs observe.Observer = observe.Nop{}
	if cfg.MetricsAddr != "" {
		s.mt = metrics.New(imageLanguages(builtins))
		obs = s.mt
	}
	if s.engine, err = NewEngine(cfg, s.lock.ID(), obs.EngineError); err != nil {
		return nil, err
	}
	if s.audit, err = audit.Open(cfg.StateDir, audit.DefaultMaxBytes, audit.DefaultKeep); err != nil {
		return nil, err
	}
	s.onClose(func() { s.audit.Close() })
	if s.tracer, err = telemetry.FromEnv(context.Background(), mcpserver.Version); err != nil {
		return nil, err
	}
	if s.tracer != nil {
		s.onClose(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := s.tracer.Shutdown(ctx); err != nil {
				log.Warn().Err(err).Msg("traces: export at shutdown")
			}
		})
		log.Info().Msg("traces: exporting call timelines as OpenTelemetry spans (OTEL_* variables)")
	}
	decisions := egressDecisions(s.audit, s.lock.ID(), s.tracer)
	if s.stack, err = newStack(cfg, s.engine, builtins, s.st, decisions, s.lock.ID(), obs, log); err != nil {
		return nil, err
	}
	s.onClose(s.stack.close)
	var buildEgress template.Egress
	if s.stack.egress != nil {
		buildEgress = s.stack.egress.Grant
	}
	s.templates = template.New(cfg.Policy, s.engine.Capabilities().Images, s.st, buildEgress, log)
	languages := lang.NewRegistry(cfg.Policy.Image, s.templates)
	jobOpts := []job.Option{job.WithServer(s.lock.ID(), serverlock.NewProber(cfg.StateDir)), job.WithObserver(obs)}
	// Fresh go sandboxes read their tenant's shared build cache, which a
	// trusted builder fills after them.
	if s.goBuilds = gobuild.New(s.engine, cfg.Policy, log, obs); s.goBuilds != nil {
		s.onClose(s.goBuilds.Close)
		jobOpts = append(jobOpts, job.WithExtension(s.goBuilds))
	}
	if c := s.engine.Capabilities().Capacity; c != nil {
		jobOpts = append(jobOpts, job.WithCapacity(c))
	}
	if cfg.HTTPAddr != "" && s.tokens != nil {
		// Each token that may run jobs has its share of the job slots.
		jobOpts = append(jobOpts, job.WithShares(s.tokens.ShareWeights()))
	}
	if s.jobs, err = job.New(s.stack.rt, s.st, cfg.Policy, cfg.StateDir, log, jobOpts...); err != nil {
		return nil, err
	}
	s.caches = deps.New(s.engine, cfg.Policy, depsOptions(cfg.Policy, s.stack, obs))
	if s.blocked, err = blocklist.New(cfg.Policy.Block.Commands, s.st, cfg.Policy.Block.AgentEdits, obs); err != nil {
		return nil, err
	}
	// An idle server hands back what its calls left behind (heap, binary pages).
	s.trim = memtrim.New(idleTrimAfter, nil)
	s.onClose(s.trim.Close)
	s.mcp, err = mcpserver.New(tools.Deps{
		Jobs: s.jobs, Policy: cfg.Policy, Languages: languages, Runtime: s.stack.rt, Pool: s.stack.warm,
		Workspaces: s.stack.workspaces, Dependencies: s.caches, Blocklist: s.blocked,
		Processes: s.engine.Capabilities().Processes, Templates: s.templates,
	}, cfg.Toolsets, mcpserver.WithAudit(s.audit, s.lock.ID()), mcpserver.WithObserver(obs), mcpserver.WithIdleTrim(s.trim),
		callTimelines(log, s.tracer))
	if err == nil && cfg.E2BAddr != "" {
		var keys e2b.Authenticator // an untyped nil without tokens
		if s.tokens != nil {
			keys = s.tokens
		}
		d := e2b.Deps{Call: s.mcp, Jobs: s.jobs, Tokens: keys, Registry: s.st, Policy: cfg.Policy}
		if s.stack.workspaces != nil { // untyped nils without them
			d.Workspaces = s.stack.workspaces
		}
		if s.templates.Supported() {
			d.Templates = s.templates
		}
		s.e2b = e2b.New(d)
	}
	return s, err
}

// callTimelines logs where each tool call's time went at debug level
// ("call timeline": bench -trace reads it; docs/benchmark.md),
// and exports it as OpenTelemetry spans when the OTEL_* variables name an
// OTLP endpoint (internal/telemetry); with neither, no timeline is kept.
func callTimelines(log zerolog.Logger, tracer *telemetry.Tracer) mcpserver.Option {
	debug := log.GetLevel() <= zerolog.DebugLevel
	if !debug && tracer == nil {
		return func(*mcpserver.Server) {}
	}
	return mcpserver.WithCallTimelines(func(t *observe.Timeline) {
		if debug {
			log.Debug().Str("timeline", t.String()).Msg("call timeline")
		}
		tracer.Export(t)
	})
}

// loadTokens reads the token file ("" = none) and checks each token's toolsets.
func loadTokens(file string) (*auth.Tokens, error) {
	if file == "" {
		return nil, nil
	}
	tokens, err := auth.Load(file)
	if err != nil {
		return nil, err
	}
	for _, e := range tokens.Entries() {
		if err := mcpserver.CheckToolsets(e.Toolsets); err != nil {
			return nil, fmt.Errorf("token file %s: %s: toolsets=: %w", file, e.Name, err)
		}
	}
	return tokens, nil
}

func (s *Server) onClose(f func()) { s.closers = append(s.closers, f) }

// Close releases what New took, in reverse order (the runtime stack removes
// its warm sandboxes and waits for removals under way).
func (s *Server) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// Serve recovers the jobs a previous server left, starts the background
// loops and the listeners, and serves MCP (on stdio, or on HTTP with
// --http) until ctx ends or stdin does; then it ends every job of this
// server and returns.
func (s *Server) Serve(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
	cfg, log := s.cfg, s.log
	if err := s.checkEscapes(ctx); err != nil {
		return err
	}
	recoverCtx, cancel := context.WithTimeout(ctx, recoverWithin)
	if err := s.jobs.Recover(recoverCtx); err != nil {
		log.Warn().Err(err).Msg("engine not reachable at start: jobs will fail until it is; recovery retried in the background")
	}
	cancel()
	go s.jobs.RunCleanup()
	s.stack.run()
	if cfg.BuildImages {
		if err := s.buildImages(ctx); err != nil {
			return err
		}
	}
	mux := s.pages(ctx)
	door := auth.NewDoor(auth.DoorConfig{Tokens: s.tokens, TrustedProxies: cfg.Policy.HTTP.TrustedPrefixes()}) // one for every listener: bad credentials count alike everywhere
	if s.mt != nil {
		stopHTTP, err := serveHTTP(ctx, cfg.MetricsAddr, s.tokens, door, cfg.Policy.HTTP.Hosts, s.mt, s.sources(), mux, log)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	if s.e2b != nil {
		stopE2B, err := serveE2B(ctx, cfg, s.e2b, s.tokens, door, log)
		if err != nil {
			return err
		}
		defer stopE2B()
	}
	// Start-up hashed the embedded image contexts (tens of MB, once): give
	// that memory back before serving, so an idle server stays small.
	memtrim.Trim()
	fields := func(e *zerolog.Event) *zerolog.Event {
		return e.Str("state_dir", cfg.StateDir).Str("engine", s.engine.Host()).Str("instance", cfg.Instance()).Str("server", s.lock.ID())
	}
	var serveErr error
	if cfg.HTTPAddr != "" {
		serveErr = s.mcp.ServeHTTP(ctx, cfg.HTTPAddr, mcpserver.HTTPOptions{
			Tokens: authenticator(s.tokens), RatePerTenant: cfg.HTTPRate, TLSCert: cfg.TLSCert, TLSKey: cfg.TLSKey, Door: door, Hosts: cfg.Policy.HTTP.Hosts,
			Ready: func(addr string) {
				fields(log.Info()).Str("addr", addr).Bool("tokens", s.tokens != nil).Bool("tls", cfg.TLSCert != "").Msg("serving MCP on http")
				if s.tokens != nil && cfg.TLSCert == "" && !mcpserver.IsLoopback(addr) {
					log.Warn().Str("addr", addr).Msg("plain HTTP beyond loopback: tokens cross the network in clear; give --tls-cert and --tls-key")
				}
			},
			Mount: func(m *http.ServeMux) {
				if s.mt != nil && s.tokens != nil {
					m.Handle("GET /metrics", s.mt.Scrape(s.tokens, s.sources()))
				}
				mux(m)
			},
		})
	} else {
		fields(log.Info()).Msg("serving MCP on stdio")
		serveErr = s.mcp.ServeStdio(ctx, stdin, stdout, logging.StdLogger(log))
	}

	// stdin ended or a signal came: end every job, flush state, exit promptly.
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelShutdown()
	s.jobs.Shutdown(shutdownCtx)
	s.stack.drain(shutdownCtx)
	s.jobs.SweepOwn(shutdownCtx)
	log.Info().Msg("stopped")
	if serveErr != nil && !errors.Is(serveErr, context.Canceled) {
		return serveErr
	}
	return nil
}

// pages mounts the console (/ui) on a listener's mux; it hangs on both
// listeners, as /metrics does, and needs tokens to sign in with.
func (s *Server) pages(ctx context.Context) func(*http.ServeMux) {
	if s.tokens == nil {
		return func(*http.ServeMux) {}
	}
	var wsUI console.Workspaces // an untyped nil when there are none
	if s.stack.workspaces != nil {
		wsUI = s.stack.workspaces
	}
	ui := console.New(console.Deps{
		Auth: s.tokens, Jobs: s.jobs, Workspaces: wsUI, AuditDir: s.cfg.StateDir, Audit: s.audit,
		Blocklist: s.blocked.All, Pool: poolStats(s.stack.warm), Caches: cacheList(s.caches), Done: ctx.Done(),
	})
	return func(mux *http.ServeMux) {
		mux.Handle("/ui/", ui)
		mux.Handle("GET /ui", http.RedirectHandler("/ui/jobs", http.StatusSeeOther))
	}
}

// authenticator is nil when no token file was given (an untyped nil, so
// the HTTP transport sees none).
func authenticator(t *auth.Tokens) mcpserver.Authenticator {
	if t == nil {
		return nil
	}
	return t
}

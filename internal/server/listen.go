package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/auth"
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/deps"
	"github.com/sandboxer/sandboxer/internal/e2b"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/mcpserver"
	"github.com/sandboxer/sandboxer/internal/metrics"
	"github.com/sandboxer/sandboxer/internal/sandbox/pool"
)

// loopbackAddr makes a bare ":PORT" listen on loopback only: exposing the
// listener beyond the host is a choice the operator writes out.
func loopbackAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host == "" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// serveHTTP serves /metrics (and what else mux holds) on addr until ctx
// ends. The listener is bound before it returns, so a bad address fails the
// start; it returns a stop function that waits for the server to end.
func serveHTTP(ctx context.Context, addr string, tokens *auth.Tokens, door *auth.Door, hosts []string, m *metrics.Metrics, src metrics.Sources, mount func(*http.ServeMux), log zerolog.Logger) (func(), error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Scrape(tokens, src))
	mount(mux)
	ln, err := net.Listen("tcp", loopbackAddr(addr))
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	srv := &http.Server{
		Handler:           door.Wrap(m.CountRequests(tokens, mux), mcpserver.IsLoopback(ln.Addr().String()), hosts...),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("metrics listener")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("serving /metrics")
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
	go func() {
		<-ctx.Done()
		stop()
	}()
	return stop, nil
}

// sources read the server's parts for the metrics' state families; any
// part may be nil (no pool, no workspaces, no dependency caches).
func (s *Server) sources() metrics.Sources {
	src := metrics.Sources{LiveJobs: s.jobs.LiveCounts}
	if ws := s.stack.workspaces; ws != nil {
		src.Workspaces = func(ctx context.Context) (map[string]int, error) {
			if !ws.Enabled() {
				return nil, nil
			}
			list, err := ws.List(ctx)
			if err != nil {
				return nil, err
			}
			n := map[string]int{}
			for _, w := range list {
				n[w.State]++
			}
			return n, nil
		}
	}
	if warm := s.stack.warm; warm != nil {
		src.PoolReady = func() map[string]int {
			n := map[string]int{}
			for _, st := range warm.Stats() {
				n[st.Image] += st.Ready
			}
			return n
		}
	}
	if caches := s.caches; caches != nil {
		src.Caches = func(ctx context.Context) ([]metrics.Cache, error) {
			list, err := caches.List(ctx)
			if err != nil {
				return nil, err
			}
			out := make([]metrics.Cache, 0, len(list))
			for _, c := range list {
				out = append(out, metrics.Cache{Language: c.Language, SizeBytes: c.SizeBytes})
			}
			return out, nil
		}
	}
	return src
}

// poolStats reads the pool for the console (nil: no pool).
func poolStats(warm *pool.Pool) func() []pool.Stat {
	if warm == nil {
		return nil
	}
	return warm.Stats
}

// cacheList reads the dependency caches for the console (nil: none).
func cacheList(caches *deps.Manager) func(context.Context) ([]deps.Cache, error) {
	if caches == nil {
		return nil
	}
	return caches.List
}

// imageLanguages maps each language's image to its name (the first name,
// sorted, when languages share an image).
func imageLanguages(languages *lang.Registry) map[string]string {
	m := map[string]string{}
	for _, name := range languages.Names() {
		if _, image, ok := languages.Lookup(name); ok {
			if _, taken := m[image]; !taken {
				m[image] = name
			}
		}
	}
	return m
}

// serveE2B serves E2B's API (internal/e2b) on its own listener behind the
// server's front door, with TLS as --http's, until ctx ends; the sandboxes
// past their timeout are killed meanwhile.
func serveE2B(ctx context.Context, cfg *config.Config, api *e2b.Server, tokens *auth.Tokens, door *auth.Door, log zerolog.Logger) (func(), error) {
	if tokens == nil && !mcpserver.IsLoopback(cfg.E2BAddr) {
		return nil, fmt.Errorf("--e2b %s: without --token-file the E2B API listens on loopback only (127.0.0.1:PORT); give a token file (its tokens are the API keys) to listen elsewhere", cfg.E2BAddr)
	}
	ln, err := net.Listen("tcp", cfg.E2BAddr)
	if err != nil {
		return nil, fmt.Errorf("--e2b: %w", err)
	}
	srv := &http.Server{
		Handler:           door.WrapWith(api.Handler(), api.Credentials, mcpserver.IsLoopback(ln.Addr().String()), cfg.Policy.HTTP.Hosts...),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		if cfg.TLSCert != "" {
			err = srv.ServeTLS(ln, cfg.TLSCert, cfg.TLSKey)
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("E2B listener")
		}
	}()
	reapCtx, stopReap := context.WithCancel(ctx)
	go api.Reap(reapCtx, e2bReapEvery)
	log.Info().Str("addr", ln.Addr().String()).Bool("tls", cfg.TLSCert != "").Msg("serving the E2B API on http")
	stop := func() {
		stopReap()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
	return stop, nil
}

// e2bReapEvery is how often sandboxes past their timeout are looked for.
const e2bReapEvery = 5 * time.Second

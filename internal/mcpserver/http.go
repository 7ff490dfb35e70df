package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/auth"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// Limits of the Streamable HTTP transport.
const (
	MaxHTTPBody        = 4 << 20 // a request's body (tool arguments are capped below this)
	httpHeaderTimeout  = 10 * time.Second
	httpIdleTimeout    = 2 * time.Minute
	httpMaxHeaderBytes = 64 << 10
	// SessionIdleTTL ends an MCP session that sent nothing for this long.
	SessionIdleTTL  = 30 * time.Minute
	shutdownTimeout = 30 * time.Second
)

// Authenticator says whose a bearer token is (internal/auth.Tokens is one).
type Authenticator interface {
	Authenticate(token string) (name, role string, ok bool)
}

// HTTPOptions configure ServeHTTP.
type HTTPOptions struct {
	// Tokens authenticates every request; nil serves loopback only, every
	// client as the tenant "local".
	Tokens Authenticator
	// RatePerTenant is how many requests a second one tenant may make
	// (burst: twice that); 0: unlimited.
	RatePerTenant float64
	// Mount adds handlers (/metrics, /ui) beside /mcp on the same listener.
	Mount func(mux *http.ServeMux)
	// TLSCert and TLSKey, when set, serve HTTPS.
	TLSCert, TLSKey string
	// Ready, when set, is told the address once the listener is bound.
	Ready func(addr string)
	// Door is the server's front door, shared by its listeners (nil: one
	// of this listener's own).
	Door *auth.Door
	// Hosts are the Host names a listener beyond loopback answers to
	// (policy http.hosts; empty: any).
	Hosts []string
}

// IsLoopback says whether addr (host:port) is bound to loopback only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ServeHTTP serves MCP over Streamable HTTP at /mcp on addr until ctx ends,
// then drains the requests in flight. Each request's bearer token names its
// tenant (internal/tenant): the store shows a tenant only what it owns.
func (s *Server) ServeHTTP(ctx context.Context, addr string, o HTTPOptions) error {
	if o.Tokens == nil && !IsLoopback(addr) {
		return fmt.Errorf("--http %s: without --token-file the server listens on loopback only (127.0.0.1:PORT); give a token file to listen elsewhere", addr)
	}
	streamable := server.NewStreamableHTTPServer(s.mcp,
		server.WithEndpointPath("/mcp"),
		server.WithSessionIdleTTL(SessionIdleTTL),
		server.WithHTTPContextFunc(func(ctx context.Context, r *http.Request) context.Context {
			ctx = tools.WithKeepOnCancel(ctx)
			if t, ok := r.Context().Value(requestTenant{}).(tenant.Tenant); ok {
				return tenant.With(ctx, t)
			}
			return ctx
		}),
	)
	mux := http.NewServeMux()
	mux.Handle("/mcp", s.guard(o, s.frontHTTP(streamable, ctx.Done())))
	if s.deps.Workspaces != nil {
		mux.Handle("/preview/", s.guard(o, s.preview()))
	}
	if o.Mount != nil {
		o.Mount(mux)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	door := o.Door
	if door == nil {
		door = auth.NewDoor(auth.DoorConfig{Tokens: o.Tokens})
	}
	srv := &http.Server{
		// Every path behind one door: Host on loopback, Origin, and bad
		// credentials limited per source address (auth.Door).
		Handler:           door.Wrap(mux, IsLoopback(ln.Addr().String()), o.Hosts...),
		ReadHeaderTimeout: httpHeaderTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
	}
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	served := make(chan error, 1)
	go func() {
		if o.TLSCert != "" {
			served <- srv.ServeTLS(ln, o.TLSCert, o.TLSKey)
		} else {
			served <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	_ = streamable.Shutdown(sctx)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

type requestTenant struct{}

// limiter gives a token's limits (internal/auth.Tokens is one).
type limiter interface {
	Limits(name string) (jobs, workspaces int, toolsets []string)
}

// CheckToolsets says what is wrong with a token's toolsets limit, if anything.
func CheckToolsets(names []string) error {
	_, err := selectTools(names)
	return err
}

// guard checks a request before any MCP processing (after the listener's
// door: Host, Origin, bad-credential limits): its token (401 with
// WWW-Authenticate), its size (413) and its tenant's rate (429 with
// Retry-After).
func (s *Server) guard(o HTTPOptions, next http.Handler) http.Handler {
	limits := &rateLimits{rate: o.RatePerTenant, buckets: map[string]*bucket{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := tenant.Tenant{Name: tenant.Local}
		if o.Tokens != nil {
			name, role, ok := o.Tokens.Authenticate(auth.BearerToken(r))
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxer"`)
				http.Error(w, "a valid token is needed: Authorization: Bearer TOKEN", http.StatusUnauthorized)
				return
			}
			if role == "metrics" {
				http.Error(w, "a token of role metrics may only read /metrics", http.StatusForbidden)
				return
			}
			t = tenant.Tenant{Name: name, Admin: role == "admin", ReadOnly: role == "readonly"}
			if l, ok := o.Tokens.(limiter); ok {
				t.MaxJobs, t.MaxWorkspaces, t.Toolsets = l.Limits(name)
			}
		}
		if v := r.Header.Get("MCP-Protocol-Version"); v != "" && !mcp.IsValidProtocolVersion(v) {
			unsupportedVersion(w, r, v)
			return
		}
		if r.ContentLength > MaxHTTPBody {
			http.Error(w, "request body over "+strconv.Itoa(MaxHTTPBody)+" bytes", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxHTTPBody)
		if wait, ok := limits.take(t.Name); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+1)))
			http.Error(w, "too many requests from "+t.Name, http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestTenant{}, t)))
	})
}

// unsupportedVersion answers a request whose MCP-Protocol-Version this
// server does not speak: JSON-RPC -32022 naming the versions it does, with
// HTTP 400, and the request's id when its body has one.
func unsupportedVersion(w http.ResponseWriter, r *http.Request, v string) {
	var id json.RawMessage
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(io.LimitReader(r.Body, MaxHTTPBody))
		if m, ok := members(body); ok {
			if s, ok := m["id"]; ok {
				if kind := idKind(s.of(body)); kind == "string" || kind == "number" {
					id = json.RawMessage(s.of(body))
				}
			}
		}
	}
	if id == nil {
		id = json.RawMessage("null")
	}
	e := mcp.UnsupportedProtocolVersionError{Version: truncate(v, 40), Supported: mcp.ValidProtocolVersions}.JSONRPCError()
	data, _ := json.Marshal(struct {
		JSONRPC string                  `json:"jsonrpc"`
		ID      json.RawMessage         `json:"id"`
		Error   mcp.JSONRPCErrorDetails `json:"error"`
	}{mcp.JSONRPC_VERSION, id, e.Error})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(data)
}

// rateLimits are token buckets, one per tenant.
type rateLimits struct {
	rate    float64
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func (l *rateLimits) take(name string) (time.Duration, bool) {
	if l.rate <= 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	burst := 2 * l.rate
	b := l.buckets[name]
	now := time.Now()
	if b == nil {
		b = &bucket{tokens: burst, at: now}
		l.buckets[name] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
	}
	b.tokens--
	return 0, true
}

// roleMiddleware keeps a read-only token to the tools that change nothing.
func (s *Server) roleMiddleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		t, ok := tenant.From(ctx)
		if ok && t.ReadOnly && !s.readOnly[req.Params.Name] {
			return mcp.NewToolResultError(fmt.Sprintf("%s: this token (%s) is read-only: it may call only tools that change nothing (get_job, list_jobs, read_output, list_workspaces, …)", req.Params.Name, t.Name)), nil
		}
		if ok && len(t.Toolsets) > 0 {
			if sel, err := selectTools(t.Toolsets); err != nil || !sel.enabled(s.tools[req.Params.Name]) {
				return mcp.NewToolResultError(fmt.Sprintf("%s: this token (%s) may call only the tools of %s", req.Params.Name, t.Name, strings.Join(t.Toolsets, ", "))), nil
			}
		}
		return next(ctx, req)
	}
}

// preview serves /preview/<workspace>/<port>/... : an HTTP reverse proxy to
// a port expose_port opened, through the same relay as its loopback URL,
// for the workspace's own tenant (another tenant's workspace is unknown: 404).
// The bearer token stays here: it is never passed on to the workspace.
func (s *Server) preview() http.Handler {
	ws := s.deps.Workspaces
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/preview/"), "/", 3)
		if len(parts) < 2 {
			http.Error(w, "use /preview/<workspace>/<port>/", http.StatusNotFound)
			return
		}
		name := parts[0]
		port, err := strconv.Atoi(parts[1])
		if err != nil || port < 1 || port > 65535 {
			http.Error(w, "bad port in /preview/<workspace>/<port>/", http.StatusNotFound)
			return
		}
		if len(parts) == 2 {
			http.Redirect(w, r, r.URL.Path+"/", http.StatusFound)
			return
		}
		ctx := r.Context()
		if t, ok := ctx.Value(requestTenant{}).(tenant.Tenant); ok {
			ctx = tenant.With(ctx, t)
		}
		rec, err := ws.Get(ctx, name)
		if err != nil {
			http.Error(w, "no such workspace or port", http.StatusNotFound)
			return
		}
		open := false
		for _, p := range ws.Ports(rec.ID) {
			open = open || p.Port == port
		}
		if !open {
			http.Error(w, "no such workspace or port (expose_port opens a port)", http.StatusNotFound)
			return
		}
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "127.0.0.1:"+parts[1]
				pr.Out.URL.Path = "/" + parts[2]
				pr.Out.URL.RawPath = ""
				pr.Out.Host = "127.0.0.1:" + parts[1]
				pr.Out.Header.Del("Authorization")
				pr.SetXForwarded()
			},
			Transport: &http.Transport{
				DialContext: func(context.Context, string, string) (net.Conn, error) {
					return ws.DialPort(ctx, name, port)
				},
				DisableKeepAlives: true,
			},
		}
		proxy.ServeHTTP(w, r)
	})
}

// Package e2b serves E2B's API (its control plane and its in-sandbox envd),
// so the e2b SDK works against sandboxer with only E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY changed. An E2B sandbox is a sandboxer
// workspace; every call is translated into the MCP tools' own calls
// (Caller), so each policy, limit, block-list entry, approval and audit
// line holds exactly as over MCP. The in-sandbox API is Connect RPC (the
// generated code of E2B's envd protos under envd/) and plain HTTP for
// files; the sandbox is named by the E2b-Sandbox-Id header, its access
// token checked on every request.
package e2b

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/e2b/envd/filesystem/filesystemconnect"
	"github.com/sandboxer/sandboxer/internal/e2b/envd/process"
	"github.com/sandboxer/sandboxer/internal/e2b/envd/process/processconnect"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// EnvdVersion is the envd version sandboxes report: the SDK picks its
// paths by it (multipart uploads below 0.5.7; closeStdin from 0.5.2).
const EnvdVersion = "0.5.2"

// defaultTimeout is a sandbox's life when create names none (E2B's).
const defaultTimeout = 300 * time.Second

// maxTimeout bounds a sandbox's timeout.
const maxTimeout = 24 * time.Hour

// Caller runs an MCP tool as ctx's tenant, as a tools/call would.
type Caller interface {
	CallTool(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error)
}

// Authenticator names a token's tenant (internal/auth.Tokens); nil: every
// caller is the local tenant (a loopback listener).
type Authenticator interface {
	Authenticate(token string) (name, role string, ok bool)
}

// Server is the E2B API of one sandboxer server.
type Server struct {
	call       Caller
	jobs       *job.Manager
	workspaces Workspaces // nil: no workspaces
	tokens     Authenticator

	mu        sync.Mutex
	sandboxes map[string]*sandbox
}

// sandbox is one E2B sandbox: a workspace of a tenant.
type sandbox struct {
	id, tenant, template string
	token                string // envd's access token
	envs                 map[string]string
	metadata             map[string]string
	started, endAt       time.Time

	mu    sync.Mutex
	procs map[uint32]*proc // by pid
	next  uint32
}

// proc is one process of a sandbox: its job and how it was started.
type proc struct {
	job    string
	tag    string
	config *process.ProcessConfig
	pty    bool // a terminal: a session's job
}

// New makes the E2B API over the MCP tools (call), the job manager's reads
// (jobs) and the workspace manager (workspaces).
func New(call Caller, jobs *job.Manager, workspaces Workspaces, tokens Authenticator) *Server {
	return &Server{call: call, jobs: jobs, workspaces: workspaces, tokens: tokens, sandboxes: map[string]*sandbox{}}
}

// Handler is the whole API on one listener: a request naming a sandbox
// (E2b-Sandbox-Id) is envd's, any other the control plane's.
func (s *Server) Handler() http.Handler {
	control := http.NewServeMux()
	for _, p := range []string{"/sandboxes", "/v2/sandboxes"} {
		control.HandleFunc("POST "+p, s.create)
		control.HandleFunc("GET "+p, s.list)
	}
	control.HandleFunc("GET /sandboxes/{id}", s.get)
	control.HandleFunc("DELETE /sandboxes/{id}", s.kill)
	control.HandleFunc("POST /sandboxes/{id}/timeout", s.setTimeout)
	control.HandleFunc("POST /v2/sandboxes/{id}/connect", s.connect)
	control.HandleFunc("POST /sandboxes/{id}/pause", s.pause)
	control.HandleFunc("POST /sandboxes/{id}/resume", s.connect)
	for _, op := range []string{"fork", "snapshots", "network", "metrics"} {
		control.HandleFunc("POST /sandboxes/{id}/"+op, notYet(op))
	}

	envd := http.NewServeMux()
	envd.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	envd.HandleFunc("GET /files", s.readFile)
	envd.HandleFunc("POST /files", s.writeFile)
	path, h := processconnect.NewProcessHandler(&processService{s: s})
	envd.Handle(path, h)
	path, h = filesystemconnect.NewFilesystemHandler(&fsService{s: s})
	envd.Handle(path, h)

	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
			sb := s.sandbox(id)
			if sb == nil || subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(sb.token)) != 1 {
				// Another tenant's sandbox is as unknown as a missing one.
				apiError(w, http.StatusNotFound, "sandbox %q not found (or its access token is wrong)", id)
				return
			}
			envd.ServeHTTP(w, r.WithContext(withSandbox(tenant.With(r.Context(), tenant.Tenant{Name: sb.tenant}), sb)))
			return
		}
		t, ok := s.tenantOf(r)
		if !ok {
			apiError(w, http.StatusUnauthorized, "a valid API key is needed: X-API-KEY (a token of the token file)")
			return
		}
		control.ServeHTTP(w, r.WithContext(tenant.With(r.Context(), t)))
	})
}

// tenantOf authenticates a control-plane request by its X-API-KEY.
func (s *Server) tenantOf(r *http.Request) (tenant.Tenant, bool) {
	if s.tokens == nil {
		return tenant.Tenant{Name: tenant.Local}, true
	}
	name, role, ok := s.tokens.Authenticate(r.Header.Get("X-API-KEY"))
	if !ok || role == "metrics" {
		return tenant.Tenant{}, false
	}
	return tenant.Tenant{Name: name, Admin: role == "admin", ReadOnly: role == "readonly"}, true
}

type sandboxKey struct{}

func withSandbox(ctx context.Context, sb *sandbox) context.Context {
	return context.WithValue(ctx, sandboxKey{}, sb)
}

func sandboxOf(ctx context.Context) *sandbox {
	sb, _ := ctx.Value(sandboxKey{}).(*sandbox)
	return sb
}

// ownedOr404 is the request's {id} sandbox of its tenant, or nil after
// answering 404.
func (s *Server) ownedOr404(w http.ResponseWriter, r *http.Request) *sandbox {
	sb := s.owned(r.Context(), r.PathValue("id"))
	if sb == nil {
		apiError(w, http.StatusNotFound, "sandbox %q not found", r.PathValue("id"))
	}
	return sb
}

func (s *Server) sandbox(id string) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sandboxes[id]
}

// owned is ctx's tenant's sandbox id, or nil.
func (s *Server) owned(ctx context.Context, id string) *sandbox {
	sb := s.sandbox(id)
	if sb == nil || sb.tenant != tenant.Owner(ctx) {
		return nil
	}
	return sb
}

// templateLanguages maps E2B template names to sandboxer languages; any
// other template name is taken as a language or template of sandboxer's.
var templateLanguages = map[string]string{
	"base": "python", "code-interpreter-v1": "python", "code-interpreter": "python",
}

func languageOf(template string) string {
	if l, ok := templateLanguages[template]; ok {
		return l
	}
	return template
}

// newSandbox is create's body (E2B's NewSandbox).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int              `json:"timeout"`
	EnvVars             map[string]string `json:"envVars"`
	Metadata            map[string]string `json:"metadata"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	AutoPause           *bool             `json:"autoPause"`
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "the body is not a sandbox to create: %v", err)
		return
	}
	if req.TemplateID == "" {
		req.TemplateID = "base"
	}
	if req.AutoPause != nil && *req.AutoPause {
		apiError(w, http.StatusBadRequest, "autoPause: pausing E2B sandboxes is not supported by sandboxer yet (workspaces pause on their own when idle)")
		return
	}
	timeout := defaultTimeout
	if req.Timeout != nil {
		timeout = time.Duration(*req.Timeout) * time.Second
		if timeout <= 0 || timeout > maxTimeout {
			apiError(w, http.StatusBadRequest, "timeout %d s is out of range: 1 to %d", *req.Timeout, int(maxTimeout.Seconds()))
			return
		}
	}
	id := "e2b-" + randomHex(6)
	args := map[string]any{"name": id, "language": languageOf(req.TemplateID)}
	if req.AllowInternetAccess != nil && !*req.AllowInternetAccess {
		args["egress"] = []string{}
	}
	if _, err := s.tool(r.Context(), "create_workspace", args); err != nil {
		apiError(w, http.StatusBadRequest, "templateID %q: %v", req.TemplateID, err)
		return
	}
	now := time.Now()
	sb := &sandbox{id: id, tenant: tenant.Owner(r.Context()), template: req.TemplateID,
		token: randomHex(16), envs: req.EnvVars, metadata: req.Metadata, started: now, endAt: now.Add(timeout), procs: map[uint32]*proc{}}
	s.mu.Lock()
	s.sandboxes[id] = sb
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, connection(sb))
}

// connection is what create and connect answer (E2B's Sandbox).
func connection(sb *sandbox) map[string]any {
	return map[string]any{
		"templateID": sb.template, "sandboxID": sb.id, "clientID": "sandboxer", "envdVersion": EnvdVersion,
		"envdAccessToken": sb.token,
	}
}

// listed is a sandbox as list and get state it (E2B's ListedSandbox).
func (s *Server) listed(ctx context.Context, sb *sandbox) map[string]any {
	state := "running"
	if s.workspaces != nil {
		if w, err := s.workspaces.Get(ctx, sb.id); err == nil && (w.State == "paused" || w.State == "hibernated") {
			state = "paused"
		}
	}
	md := sb.metadata
	if md == nil {
		md = map[string]string{}
	}
	return map[string]any{
		"templateID": sb.template, "sandboxID": sb.id, "clientID": "sandboxer",
		"startedAt": sb.started.UTC().Format(time.RFC3339Nano), "endAt": sb.endAt.UTC().Format(time.RFC3339Nano),
		"cpuCount": 1, "memoryMB": 512, "diskSizeMB": 0, "metadata": md, "state": state, "envdVersion": EnvdVersion,
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	owner := tenant.Owner(r.Context())
	s.mu.Lock()
	out := []map[string]any{}
	for _, sb := range s.sandboxes {
		if sb.tenant == owner {
			out = append(out, s.listed(r.Context(), sb))
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i]["sandboxID"].(string) < out[j]["sandboxID"].(string) })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	d := s.listed(r.Context(), sb)
	d["envdAccessToken"] = sb.token
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	if err := s.remove(r.Context(), sb); err != nil {
		apiError(w, http.StatusInternalServerError, "kill %s: %v", sb.id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// remove deletes a sandbox's workspace and forgets it.
func (s *Server) remove(ctx context.Context, sb *sandbox) error {
	s.mu.Lock()
	delete(s.sandboxes, sb.id)
	s.mu.Unlock()
	_, err := s.tool(ctx, "delete_workspace", map[string]any{"name": sb.id})
	return err
}

// connect answers an owned, running sandbox's connection details, and
// extends its timeout when the body names one.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	var req struct {
		Timeout *int `json:"timeout"`
	}
	_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req)
	if req.Timeout != nil && *req.Timeout > 0 && time.Duration(*req.Timeout)*time.Second <= maxTimeout {
		s.mu.Lock()
		sb.endAt = time.Now().Add(time.Duration(*req.Timeout) * time.Second)
		s.mu.Unlock()
	}
	writeJSON(w, http.StatusOK, connection(sb))
}

// pause freezes a sandbox's workspace with its processes (the workspace
// pause of an idle one); the next call into it, or connect, resumes it.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	if s.workspaces == nil {
		apiError(w, http.StatusNotImplemented, "pause: this server has no workspaces")
		return
	}
	if err := s.workspaces.PauseNow(r.Context(), sb.id); err != nil {
		apiError(w, http.StatusConflict, "pause %s: %v", sb.id, err)
		return
	}
	if ws, err := s.workspaces.Get(r.Context(), sb.id); err != nil || ws.State != "paused" {
		apiError(w, http.StatusConflict, "pause %s: it is busy (a job or process runs in it): kill it first, or let the workspace pause when idle", sb.id)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// notYet refuses an operation sandboxer's E2B API does not serve, saying so.
func notYet(op string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		apiError(w, http.StatusNotImplemented, "%s is not served by sandboxer's E2B API yet (docs/e2b.md lists what is)", op)
	}
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	var req struct {
		Timeout int `json:"timeout"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || req.Timeout <= 0 || time.Duration(req.Timeout)*time.Second > maxTimeout {
		apiError(w, http.StatusBadRequest, "timeout must be 1 to %d seconds", int(maxTimeout.Seconds()))
		return
	}
	s.mu.Lock()
	sb.endAt = time.Now().Add(time.Duration(req.Timeout) * time.Second)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Reap kills the sandboxes whose timeout has passed, every interval,
// until ctx ends.
func (s *Server) Reap(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			var due []*sandbox
			for _, sb := range s.sandboxes {
				if now.After(sb.endAt) {
					due = append(due, sb)
				}
			}
			s.mu.Unlock()
			for _, sb := range due {
				_ = s.remove(tenant.With(ctx, tenant.Tenant{Name: sb.tenant}), sb)
			}
		}
	}
}

// tool calls an MCP tool and returns its structured result, or its error
// sentence as the error.
func (s *Server) tool(ctx context.Context, name string, args map[string]any) (map[string]any, error) {
	res, err := s.call.CallTool(ctx, name, args)
	if err != nil {
		return nil, err
	}
	if res.IsError {
		var text []string
		for _, c := range res.Content {
			if t, ok := c.(mcp.TextContent); ok {
				text = append(text, t.Text)
			}
		}
		return nil, errors.New(strings.Join(text, " "))
	}
	out := map[string]any{}
	if b, err := json.Marshal(res.StructuredContent); err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError answers as E2B's API does: {code, message}.
func apiError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]any{"code": status, "message": fmt.Sprintf(format, args...)})
}

// Package e2b serves E2B's API (its control plane and its in-sandbox envd),
// so the e2b SDK works against sandboxer with only E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY changed. An E2B sandbox is a sandboxer
// workspace, its record the store's (Registry), by tenant, so a restart
// loses none; every call is translated into the MCP tools' own calls
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
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/e2b/envd/filesystem/filesystemconnect"
	"github.com/sandboxer/sandboxer/internal/e2b/envd/process"
	"github.com/sandboxer/sandboxer/internal/e2b/envd/process/processconnect"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// EnvdVersion is the envd version sandboxes report: the SDK picks its
// paths by it (multipart uploads below 0.5.7; closeStdin from 0.5.2).
const EnvdVersion = "0.5.2"

// defaultTimeout is a sandbox's life when create names none (E2B's).
const defaultTimeout = 300 * time.Second

// maxTimeout bounds a sandbox's timeout.
const maxTimeout = 24 * time.Hour

// Caller runs an MCP tool as ctx's tenant, as a tools/call would
// (internal/mcpserver), and says which tools its toolsets serve.
type Caller interface {
	CallTool(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error)
	HasTool(name string) bool
}

// Authenticator names a token's tenant (internal/auth.Tokens); nil: every
// caller is the local tenant (a loopback listener).
type Authenticator interface {
	Authenticate(token string) (name, role string, ok bool)
}

// Registry keeps the sandboxes (internal/store), each its tenant's.
type Registry interface {
	PutE2BSandbox(ctx context.Context, sb *record.E2BSandbox) error
	E2BSandbox(ctx context.Context, id string) (*record.E2BSandbox, error)
	E2BSandboxForToken(ctx context.Context, id string) (*record.E2BSandbox, error)
	ListE2BSandboxes(ctx context.Context) ([]*record.E2BSandbox, error)
	DueE2BSandboxes(ctx context.Context, now time.Time) ([]*record.E2BSandbox, error)
	DeleteE2BSandbox(ctx context.Context, id string) error
}

// Server is the E2B API of one sandboxer server.
type Server struct {
	call       Caller
	jobs       *job.Manager
	workspaces Workspaces // nil: no workspaces
	tokens     Authenticator
	reg        Registry
	templates  Templates // nil: no templates
	pol        *policy.Policy

	mu   sync.Mutex
	live map[string]*running // by sandbox id
}

// sandbox is one E2B sandbox as a request sees it: its record, read for
// the request, and what this server runs in it, shared by every request.
type sandbox struct {
	*record.E2BSandbox
	*running
}

// running is what this server started in a sandbox: its processes and
// polled watchers.
type running struct {
	tenant   string
	mu       sync.Mutex
	procs    map[uint32]*proc // by pid
	next     uint32
	watchers map[string]*watcher // polled watches, by id
}

// proc is one process of a sandbox: its job and how it was started.
type proc struct {
	job    string
	tag    string
	config *process.ProcessConfig
	pty    bool // a terminal: a session's job
}

// Deps are what the E2B API works through.
type Deps struct {
	Call       Caller         // the MCP tools
	Jobs       *job.Manager   // job records and output, read
	Workspaces Workspaces     // nil: no workspaces
	Tokens     Authenticator  // nil: every key is the local tenant (loopback)
	Registry   Registry       // the sandboxes' records
	Templates  Templates      // nil: no templates (no snapshots listed)
	Policy     *policy.Policy // its limits bound commands' time
}

// New makes the E2B API.
func New(d Deps) *Server {
	return &Server{call: d.Call, jobs: d.Jobs, workspaces: d.Workspaces, tokens: d.Tokens, reg: d.Registry,
		templates: d.Templates, pol: d.Policy, live: map[string]*running{}}
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
	control.HandleFunc("GET /sandboxes/{id}/metrics", s.metrics)
	control.HandleFunc("POST /sandboxes/{id}/snapshots", s.snapshot)
	control.HandleFunc("GET /snapshots", s.listSnapshots)
	control.HandleFunc("DELETE /templates/{id}", s.deleteSnapshot)
	control.HandleFunc("POST /sandboxes/{id}/fork", s.fork)
	control.HandleFunc("PUT /sandboxes/{id}/network", unsupported("network",
		"a sandbox's egress is the policy's allowlist, fixed at create (allow_internet_access: false turns it off)"))

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
			rec, err := s.reg.E2BSandboxForToken(r.Context(), id)
			if err != nil || subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(rec.Token)) != 1 {
				// Another tenant's sandbox is as unknown as a missing one.
				apiError(w, http.StatusNotFound, "sandbox %q not found (or its access token is wrong)", id)
				return
			}
			if u := userOf(r); u != "" && u != sandboxUser {
				refuseUser(w, r, u)
				return
			}
			envd.ServeHTTP(w, r.WithContext(withSandbox(tenant.With(r.Context(), tenant.Tenant{Name: rec.Tenant}), s.liveOf(rec))))
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

// sandboxUser is E2B's default user, the one name sandboxer answers to:
// every command runs as the sandbox's unprivileged user.
const sandboxUser = "user"

// userOf is the user an envd request asks to act as (the SDK's user
// option): Basic authorization's name, or /files' username; "" for none.
func userOf(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok {
		return u
	}
	return r.URL.Query().Get("username")
}

// refuseUser answers a request for another user than sandboxUser, in the
// protocol it came in (Connect for the RPCs, E2B's JSON for /files).
func refuseUser(w http.ResponseWriter, r *http.Request, u string) {
	why := fmt.Errorf("user %q: sandboxer runs every command and file operation as the sandbox's unprivileged user (%q); install packages with install_packages or a template, not as root", truncate(u, 32), sandboxUser)
	if strings.HasPrefix(r.URL.Path, "/process.") || strings.HasPrefix(r.URL.Path, "/filesystem.") {
		_ = connect.NewErrorWriter().Write(w, r, connect.NewError(connect.CodePermissionDenied, why))
		return
	}
	apiError(w, http.StatusForbidden, "%v", why)
}

// Credentials judges what a request presents, for the front door
// (auth.Door.WrapWith), so bad API keys and sandbox tokens count against
// their source as bad bearer tokens do: a sandbox named (E2b-Sandbox-Id)
// with its access token, or an X-API-KEY.
func (s *Server) Credentials(r *http.Request) (presented, good bool) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		rec, err := s.reg.E2BSandboxForToken(r.Context(), id)
		return true, err == nil && subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Access-Token")), []byte(rec.Token)) == 1
	}
	if r.Header.Get("X-API-KEY") == "" {
		return false, false
	}
	_, ok := s.tenantOf(r)
	return true, ok
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

// liveOf is the sandbox of rec with what this server runs in it.
func (s *Server) liveOf(rec *record.E2BSandbox) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.live[rec.ID]
	if r == nil || r.tenant != rec.Tenant {
		r = &running{tenant: rec.Tenant, procs: map[uint32]*proc{}, watchers: map[string]*watcher{}}
		s.live[rec.ID] = r
	}
	return &sandbox{E2BSandbox: rec, running: r}
}

// owned is ctx's tenant's sandbox id, or nil.
func (s *Server) owned(ctx context.Context, id string) *sandbox {
	rec, err := s.reg.E2BSandbox(ctx, id)
	if err != nil {
		return nil
	}
	return s.liveOf(rec)
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
	Network             *network          `json:"network"`
	AutoPause           *bool             `json:"autoPause"`
	// Not served: refused when given, never ignored.
	MCP             json.RawMessage `json:"mcp"`
	IAM             json.RawMessage `json:"iam"`
	VolumeMounts    json.RawMessage `json:"volumeMounts"`
	AutoResume      json.RawMessage `json:"autoResume"`
	AutoPauseMemory json.RawMessage `json:"autoPauseMemory"`
}

// unserved names the first option of create sandboxer does not serve, with why.
func (n *newSandbox) unserved() string {
	for _, o := range []struct {
		name string
		raw  json.RawMessage
		why  string
	}{
		{"mcp", n.MCP, "E2B's MCP gateway in a sandbox is not served (sandboxer is itself an MCP server)"},
		{"iam", n.IAM, "workload identity tokens are not served (the policy's secrets reach hosts through the egress proxy)"},
		{"volumeMounts", n.VolumeMounts, "E2B volumes are not served (a sandbox's files are its workspace's volume)"},
		{"autoResume", n.AutoResume, "pausing on timeout is not served, so neither is resuming from it"},
		{"autoPauseMemory", n.AutoPauseMemory, "pausing on timeout is not served"},
	} {
		if len(o.raw) > 0 && string(o.raw) != "null" {
			return o.name + ": " + o.why
		}
	}
	return ""
}

// Bounds of what a create may ask.
const (
	maxEnvs     = 256
	maxMetadata = 64
	maxEntry    = 4096 // bytes of one key plus its value
)

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "the body is not a sandbox to create: %v", err)
		return
	}
	if req.TemplateID == "" {
		req.TemplateID = "base"
	}
	if why := req.unserved(); why != "" {
		apiError(w, http.StatusBadRequest, "%s", why)
		return
	}
	if req.AutoPause != nil && *req.AutoPause {
		apiError(w, http.StatusBadRequest, "autoPause: pausing E2B sandboxes on their timeout is not supported by sandboxer (workspaces pause on their own when idle)")
		return
	}
	timeout, problem := timeoutOf(req.Timeout, defaultTimeout)
	if problem != "" {
		apiError(w, http.StatusBadRequest, "%s", problem)
		return
	}
	if problem := checkStrings("envVars", req.EnvVars, maxEnvs); problem != "" {
		apiError(w, http.StatusBadRequest, "%s", problem)
		return
	}
	if problem := checkStrings("metadata", req.Metadata, maxMetadata); problem != "" {
		apiError(w, http.StatusBadRequest, "%s", problem)
		return
	}
	egress, why := egressOf(req.AllowInternetAccess, req.Network)
	if why != "" {
		apiError(w, http.StatusBadRequest, "%s", why)
		return
	}
	id := newID()
	args := map[string]any{"name": id, "language": languageOf(req.TemplateID)}
	if egress != nil {
		args["egress"] = egress
	}
	if _, err := s.tool(r.Context(), "create_workspace", args); err != nil {
		apiError(w, http.StatusBadRequest, "a sandbox of template %q: %v", req.TemplateID, err)
		return
	}
	now := time.Now()
	sb, err := s.register(r.Context(), &record.E2BSandbox{ID: id, Template: req.TemplateID, Token: randomHex(16),
		Envs: req.EnvVars, Metadata: req.Metadata, StartedAt: now, EndAt: now.Add(timeout)})
	if err != nil {
		apiError(w, http.StatusInternalServerError, "create %s: %v", id, err)
		return
	}
	writeJSON(w, http.StatusCreated, connection(sb))
}

func newID() string { return "e2b-" + randomHex(6) }

// register stores a new sandbox as ctx's tenant's; a failure removes its
// workspace again.
func (s *Server) register(ctx context.Context, rec *record.E2BSandbox) (*sandbox, error) {
	if err := s.reg.PutE2BSandbox(ctx, rec); err != nil {
		_, _ = s.tool(context.WithoutCancel(ctx), "delete_workspace", map[string]any{"name": rec.ID})
		return nil, err
	}
	return s.liveOf(rec), nil
}

// timeoutOf reads a timeout in seconds (def when absent), or says what is wrong.
func timeoutOf(secs *int, def time.Duration) (time.Duration, string) {
	if secs == nil {
		return def, ""
	}
	d := time.Duration(*secs) * time.Second
	if d <= 0 || d > maxTimeout {
		return 0, fmt.Sprintf("timeout %d s is out of range: 1 to %d", *secs, int(maxTimeout.Seconds()))
	}
	return d, ""
}

// checkStrings bounds a map of create's body, naming it.
func checkStrings(name string, m map[string]string, most int) string {
	if len(m) > most {
		return fmt.Sprintf("%s: %d entries, at most %d", name, len(m), most)
	}
	for k, v := range m {
		if k == "" || len(k)+len(v) > maxEntry {
			return fmt.Sprintf("%s: the key %q is empty or its entry is over %d bytes", name, truncate(k, 40), maxEntry)
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// connection is what create and connect answer (E2B's Sandbox).
func connection(sb *sandbox) map[string]any {
	return map[string]any{
		"templateID": sb.Template, "sandboxID": sb.ID, "clientID": "sandboxer", "envdVersion": EnvdVersion,
		"envdAccessToken": sb.Token,
	}
}

// listed is a sandbox as list and get state it (E2B's ListedSandbox), from
// its workspace; nil once the workspace is gone (deleted over MCP), and the
// sandbox is then forgotten.
func (s *Server) listed(ctx context.Context, sb *sandbox) map[string]any {
	state, cpus, memMB, diskMB := "running", 1, int64(0), int64(0)
	if s.workspaces != nil {
		ws, err := s.workspaces.Get(ctx, sb.ID)
		if errors.Is(err, record.ErrWorkspaceNotFound) {
			s.forget(ctx, sb.ID)
			return nil
		}
		if err == nil {
			if ws.State == "paused" || ws.State == "hibernated" {
				state = "paused"
			}
			cpus = max(1, int(math.Ceil(float64(ws.Limits.NanoCPUs)/1e9)))
			memMB, diskMB = ws.Limits.MemoryBytes>>20, ws.Limits.DiskBytes>>20
		}
	}
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return map[string]any{
		"templateID": sb.Template, "sandboxID": sb.ID, "clientID": "sandboxer",
		"startedAt": sb.StartedAt.UTC().Format(time.RFC3339Nano), "endAt": sb.EndAt.UTC().Format(time.RFC3339Nano),
		"cpuCount": cpus, "memoryMB": memMB, "diskSizeMB": diskMB, "metadata": md, "state": state, "envdVersion": EnvdVersion,
	}
}

// forget drops a sandbox's record and what this server kept of it (its
// watchers end).
func (s *Server) forget(ctx context.Context, id string) {
	_ = s.reg.DeleteE2BSandbox(ctx, id)
	s.mu.Lock()
	r := s.live[id]
	delete(s.live, id)
	s.mu.Unlock()
	if r != nil {
		r.mu.Lock()
		ids := slices.Collect(maps.Keys(r.watchers))
		r.mu.Unlock()
		for _, id := range ids {
			r.removeWatcher(id)
		}
	}
}

// maxListLimit bounds one page of list.
const maxListLimit = 1000

// pageLimit is a list's page size (limit, at most maxListLimit), or false
// after answering 400.
func pageLimit(w http.ResponseWriter, q url.Values) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return maxListLimit, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxListLimit {
		apiError(w, http.StatusBadRequest, "limit %q: must be 1 to %d", truncate(v, 20), maxListLimit)
		return 0, false
	}
	return n, true
}

// list answers ctx's tenant's sandboxes by id, filtered as E2B's list is
// (metadata, state, template), a page at a time (limit, nextToken).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := pageLimit(w, q)
	if !ok {
		return
	}
	md, err := url.ParseQuery(q.Get("metadata"))
	if err != nil {
		apiError(w, http.StatusBadRequest, "metadata %q: not key=value pairs: %v", truncate(q.Get("metadata"), 80), err)
		return
	}
	var states []string
	for _, v := range q["state"] {
		states = append(states, strings.Split(v, ",")...)
	}
	recs, err := s.reg.ListE2BSandboxes(r.Context())
	if err != nil {
		apiError(w, http.StatusInternalServerError, "list: %v", err)
		return
	}
	after := q.Get("nextToken")
	out := []map[string]any{}
	for _, rec := range recs {
		if rec.ID <= after || (q.Get("template") != "" && rec.Template != q.Get("template")) || !hasMetadata(rec.Metadata, md) {
			continue
		}
		if len(out) == limit {
			w.Header().Set("X-Next-Token", out[len(out)-1]["sandboxID"].(string))
			break
		}
		d := s.listed(r.Context(), s.liveOf(rec))
		if d == nil || (len(states) > 0 && !slices.Contains(states, d["state"].(string))) {
			continue
		}
		out = append(out, d)
	}
	writeJSON(w, http.StatusOK, out)
}

// hasMetadata says whether md holds every pair of want (E2B's decoded filter).
func hasMetadata(md map[string]string, want url.Values) bool {
	for k, vs := range want {
		key, _ := url.QueryUnescape(k)
		for _, v := range vs {
			val, _ := url.QueryUnescape(v)
			if md[key] != val {
				return false
			}
		}
	}
	return true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	d := s.listed(r.Context(), sb)
	if d == nil {
		apiError(w, http.StatusNotFound, "sandbox %q not found (its workspace was deleted)", sb.ID)
		return
	}
	d["envdAccessToken"] = sb.Token
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	if err := s.remove(r.Context(), sb.ID); err != nil {
		apiError(w, http.StatusInternalServerError, "kill %s: %v", sb.ID, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// remove deletes a sandbox's workspace, then forgets it (one already
// deleted is forgotten too; another failure keeps it, to be tried again).
func (s *Server) remove(ctx context.Context, id string) error {
	if _, err := s.tool(ctx, "delete_workspace", map[string]any{"name": id}); err != nil && !isNotFound(err) {
		return err
	}
	s.forget(ctx, id)
	return nil
}

// isNotFound says whether a tool's error sentence is a missing workspace's.
func isNotFound(err error) bool {
	return strings.Contains(err.Error(), record.ErrWorkspaceNotFound.Error())
}

// connect answers an owned sandbox's connection details (waking a paused
// one on its next call), and moves its timeout when the body names one.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	var req struct {
		Timeout *int `json:"timeout"`
	}
	_ = json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req)
	if d, problem := timeoutOf(req.Timeout, 0); problem == "" && d > 0 {
		if err := s.moveTimeout(r.Context(), sb, d); err != nil {
			apiError(w, http.StatusInternalServerError, "connect %s: %v", sb.ID, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, connection(sb))
}

// moveTimeout makes a sandbox end d from now.
func (s *Server) moveTimeout(ctx context.Context, sb *sandbox, d time.Duration) error {
	rec := *sb.E2BSandbox
	rec.EndAt = time.Now().Add(d)
	if err := s.reg.PutE2BSandbox(ctx, &rec); err != nil {
		return err
	}
	s.liveOf(&rec)
	return nil
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
	if err := s.workspaces.PauseNow(r.Context(), sb.ID); err != nil {
		apiError(w, http.StatusConflict, "pause %s: %v", sb.ID, err)
		return
	}
	if ws, err := s.workspaces.Get(r.Context(), sb.ID); err != nil || ws.State != "paused" {
		apiError(w, http.StatusConflict, "pause %s: it is busy (a job or process runs in it): kill it first, or let the workspace pause when idle", sb.ID)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// unsupported refuses an operation sandboxer's E2B API does not serve, saying why.
func unsupported(op, why string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		apiError(w, http.StatusNotImplemented, "%s is not served by sandboxer's E2B API: %s (docs/e2b.md lists what is)", op, why)
	}
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	var req struct {
		Timeout *int `json:"timeout"`
	}
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req)
	d, problem := timeoutOf(req.Timeout, 0)
	if err != nil || req.Timeout == nil || problem != "" {
		apiError(w, http.StatusBadRequest, "timeout must be 1 to %d seconds", int(maxTimeout.Seconds()))
		return
	}
	if err := s.moveTimeout(r.Context(), sb, d); err != nil {
		apiError(w, http.StatusInternalServerError, "timeout of %s: %v", sb.ID, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Reap kills the sandboxes whose timeout has passed, every interval,
// until ctx ends: the store's, so a restart loses none.
func (s *Server) Reap(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.reapDue(ctx, now)
		}
	}
}

// reapDue kills the sandboxes due at now.
func (s *Server) reapDue(ctx context.Context, now time.Time) {
	due, err := s.reg.DueE2BSandboxes(ctx, now)
	if err != nil {
		return
	}
	for _, rec := range due {
		_ = s.remove(tenant.With(ctx, tenant.Tenant{Name: rec.Tenant}), rec.ID)
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

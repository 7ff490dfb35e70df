// Package console is the operator's web console at /ui: live jobs, a job's
// output, a session's screen, workspaces, the audit log, the block list, the
// pool and the dependency caches. It is read-only, except that an admin may
// kill a job or delete a workspace.
//
// A browser signs in with a token; the console keeps a server-side session
// and gives the browser only its random id, in an HttpOnly, SameSite=Strict
// cookie. Every read goes through the job manager, the workspace manager and
// the audit reader with the signed-in tenant in the context, so a tenant sees
// only what it owns (an admin sees everything). Pages are rendered by
// html/template and a small embedded script; the Content-Security-Policy
// allows no inline script and nothing from another origin.
package console

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/auth"
	"github.com/sandboxer/sandboxer/internal/blocklist"
	"github.com/sandboxer/sandboxer/internal/deps"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox/pool"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/terminal"
)

// Authenticator says whose a token is (internal/auth.Tokens is one).
type Authenticator interface {
	Authenticate(token string) (tenant, role string, ok bool)
}

// Jobs is what the console reads of jobs (internal/job.Manager).
type Jobs interface {
	List(ctx context.Context, f record.ListFilter) ([]*record.Job, string, error)
	Get(ctx context.Context, id string) (*record.Job, error)
	Read(ctx context.Context, id string, req job.ReadRequest) (*job.ReadResult, error)
	Screen(ctx context.Context, id string) (terminal.Screen, *record.Job, error)
	Kill(ctx context.Context, id, signal string, grace time.Duration, reason string) (*record.Job, error)
}

// Workspaces is what the console reads of workspaces (internal/workspace.Manager).
type Workspaces interface {
	Enabled() bool
	List(ctx context.Context) ([]*record.Workspace, error)
	Get(ctx context.Context, name string) (*record.Workspace, error)
	Delete(ctx context.Context, name string) error
	DiskUsage(ctx context.Context, name string) (int64, error)
	ListFiles(ctx context.Context, name, rel string, recursive bool, glob string, max int) (*proto.FSResult, error)
	ReadFile(ctx context.Context, name, rel string, offset, limit int, maxBytes int64) (*proto.FSResult, error)
}

// Deps are the parts the console reads. Jobs and Auth are required; any
// other may be nil (its page says it is off).
type Deps struct {
	Auth       Authenticator
	Jobs       Jobs
	Workspaces Workspaces
	// AuditDir is the state directory holding the audit log.
	AuditDir string
	// Audit, when set, gets a line for each console action: sign-ins (good
	// and bad), kills and deletes, with the tenant and source address.
	Audit     *audit.Log
	Blocklist func() []blocklist.Listed
	Pool      func() []pool.Stat
	Caches    func(ctx context.Context) ([]deps.Cache, error)
	// Done ends the console's live streams (the server is stopping).
	Done <-chan struct{}
}

//go:embed assets templates
var files embed.FS

// Console is the /ui handler.
type Console struct {
	Deps
	auth     Authenticator
	sessions sessions
	// streams counts open live streams, bounded by maxStreams.
	streams chan struct{}
	pages   map[string]*template.Template
	mux     *http.ServeMux
}

// New makes the console.
func New(d Deps) *Console {
	c := &Console{Deps: d, auth: d.Auth, sessions: sessions{m: map[string]*session{}},
		streams: make(chan struct{}, maxStreams)}
	c.pages = parsePages()
	static, _ := fs.Sub(files, "assets")
	mux := http.NewServeMux()
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /ui/login", c.loginForm)
	mux.HandleFunc("POST /ui/login", c.login)
	mux.HandleFunc("POST /ui/logout", c.signedIn(c.logout))
	mux.HandleFunc("GET /ui/{$}", c.signedIn(func(w http.ResponseWriter, r *http.Request, _ *session) {
		http.Redirect(w, r, "/ui/jobs", http.StatusSeeOther)
	}))
	mux.HandleFunc("GET /ui/jobs", c.signedIn(c.jobsPage))
	mux.HandleFunc("GET /ui/jobs/events", c.signedIn(c.jobsEvents))
	mux.HandleFunc("GET /ui/jobs/{id}", c.signedIn(c.jobPage))
	mux.HandleFunc("GET /ui/jobs/{id}/events", c.signedIn(c.jobEvents))
	mux.HandleFunc("POST /ui/jobs/{id}/kill", c.signedIn(c.admin(c.killJob)))
	mux.HandleFunc("GET /ui/workspaces", c.signedIn(c.workspacesPage))
	mux.HandleFunc("GET /ui/workspaces/{name}", c.signedIn(c.workspacePage))
	mux.HandleFunc("POST /ui/workspaces/{name}/delete", c.signedIn(c.admin(c.deleteWorkspace)))
	mux.HandleFunc("GET /ui/audit", c.signedIn(c.auditPage))
	mux.HandleFunc("GET /ui/blocklist", c.signedIn(c.blocklistPage))
	mux.HandleFunc("GET /ui/pool", c.signedIn(c.poolPage))
	mux.HandleFunc("GET /ui/caches", c.signedIn(c.cachesPage))
	c.mux = mux
	return c
}

// csp allows the console's own script, styles and streams, nothing inline,
// nothing from elsewhere, and no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // no-referrer would make a form's Origin "null"
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

type handler func(w http.ResponseWriter, r *http.Request, sess *session)

// signedIn refuses a request without a valid sign-in (401: a page shows the
// sign-in form) or of a token of role metrics (403), and runs h with the
// client's tenant in the request's context, so every read is filtered by it.
func (c *Console) signedIn(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess := c.who(r)
		if sess == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxer"`)
			if r.Method == http.MethodGet && r.Header.Get("Accept") != "text/event-stream" {
				c.render(w, http.StatusUnauthorized, "login", page{Title: "Sign in", Data: loginData{Next: r.URL.RequestURI()}})
				return
			}
			http.Error(w, "sign in first: a valid token is needed", http.StatusUnauthorized)
			return
		}
		if sess.role == auth.RoleMetrics {
			http.Error(w, "a token of role metrics may only read /metrics", http.StatusForbidden)
			return
		}
		t := tenant.Tenant{Name: sess.tenant, Admin: sess.role == auth.RoleAdmin, ReadOnly: sess.role != auth.RoleAdmin}
		h(w, r.WithContext(tenant.With(r.Context(), t)), sess)
	}
}

// admin guards the console's only writes: an admin's sign-in, a POST from
// the console's own origin, and the session's CSRF token.
func (c *Console) admin(h handler) handler {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		switch {
		case sess.role != auth.RoleAdmin:
			http.Error(w, "only an admin token may do this", http.StatusForbidden)
		case !sameOrigin(r):
			http.Error(w, "cross-site request refused", http.StatusForbidden)
		case !csrfOK(r, sess):
			http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
		default:
			h(w, r, sess)
		}
	}
}

type loginData struct {
	Next, Error string
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, http.StatusOK, "login", page{Title: "Sign in", Data: loginData{Next: r.URL.Query().Get("next")}})
}

// login checks a token and starts a session. A sign-in posted from another
// site is refused (it would sign the browser in as someone else).
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if !sameOrigin(r) {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	// A failed sign-in answers 401, which the listener's door (auth.Door)
	// counts against the source address, as a bad token on any path.
	name, role, ok := c.auth.Authenticate(r.PostFormValue("token"))
	c.audited(r, "console.sign_in", name, "", map[bool]string{true: "ok", false: "error"}[ok && role != auth.RoleMetrics], nil)
	if !ok || role == auth.RoleMetrics {
		msg := "That token is not valid."
		if ok {
			msg = "A token of role metrics may only read /metrics."
		}
		c.render(w, http.StatusUnauthorized, "login", page{Title: "Sign in", Data: loginData{Next: next, Error: msg}})
		return
	}
	id, _ := c.sessions.add(name, role)
	c.setCookie(w, r, id, int(SessionTTL.Seconds()))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// audited writes a console action's audit line: tool is "console.<action>",
// tenant the signed-in one ("" for a failed sign-in), err the failure.
func (c *Console) audited(r *http.Request, tool, tenant, jobID, outcome string, err error) {
	if c.Audit == nil {
		return
	}
	e := audit.Entry{Tool: tool, Client: "console", Tenant: tenant, Source: auth.SourceOf(r), JobID: jobID,
		Decision: audit.Allowed, Outcome: outcome}
	if outcome == "error" && tenant == "" {
		e.Decision = audit.Refused // a bad sign-in
	}
	if err != nil {
		e.Outcome, e.Error = "error", trim(err.Error(), 1000)
	}
	_ = c.Audit.Write(e)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, sess *session) {
	if !sameOrigin(r) || !csrfOK(r, sess) {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	if ck, err := r.Cookie(cookieName); err == nil {
		c.sessions.remove(ck.Value)
	}
	c.setCookie(w, r, "", -1)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// safeNext keeps a redirect after sign-in inside the console.
func safeNext(next string) string {
	if len(next) > 1 && len(next) < 2048 && next[0] == '/' && next[1] != '/' && next[1] != '\\' &&
		(next == "/ui" || len(next) >= 4 && next[:4] == "/ui/") {
		return next
	}
	return "/ui/jobs"
}

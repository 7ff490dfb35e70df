package console

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/auth"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/terminal"
)

const (
	adminTok = "admin-token-0123456789"
	userTok  = "user-token-0123456789a"
	promTok  = "prom-token-0123456789a"
)

type tokens map[string][2]string

func (t tokens) Authenticate(tok string) (string, string, bool) {
	v, ok := t[tok]
	return v[0], v[1], ok
}

// recordJobs is a fixed set of job records; it keeps what was asked of it.
// The real job manager (and its store's tenant filter) is exercised by the
// browser test in test/e2e.
type recordJobs struct {
	mu     sync.Mutex
	jobs   []*record.Job
	killed []string
	scopes []string
}

func (f *recordJobs) List(ctx context.Context, _ record.ListFilter) ([]*record.Job, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scopes = append(f.scopes, tenant.Scope(ctx))
	return f.jobs, "", nil
}
func (f *recordJobs) Get(_ context.Context, id string) (*record.Job, error) {
	for _, j := range f.jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return nil, errors.New("not found")
}
func (f *recordJobs) Read(ctx context.Context, id string, _ job.ReadRequest) (*job.ReadResult, error) {
	j, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &job.ReadResult{Data: []byte(j.Error), Job: j, NextCursor: int64(len(j.Error))}, nil
}
func (f *recordJobs) Screen(context.Context, string) (terminal.Screen, *record.Job, error) {
	return terminal.Screen{}, nil, errors.New("no terminal")
}
func (f *recordJobs) Kill(_ context.Context, id, _ string, _ time.Duration, _ string) (*record.Job, error) {
	f.mu.Lock()
	f.killed = append(f.killed, id)
	f.mu.Unlock()
	return f.Get(context.Background(), id)
}

func newTestConsole(t *testing.T) (*Console, *recordJobs) {
	t.Helper()
	jobs := &recordJobs{jobs: []*record.Job{{ID: "job-1", Kind: "command", Status: "running", Command: "echo <b>hi</b>",
		Error: "\x1b[31mred\x1b[0m <script>alert(1)</script>", CreatedAt: time.Now()}}}
	c := New(Deps{Auth: tokens{adminTok: {"ops", "admin"}, userTok: {"alice", "user"}, promTok: {"prom", "metrics"}},
		Jobs: jobs, AuditDir: t.TempDir()})
	return c, jobs
}

func do(t *testing.T, h http.Handler, method, target string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var r *http.Request
	if form != nil {
		r = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// signIn posts the sign-in form and returns the session cookie.
func signIn(t *testing.T, c *Console, tok string) *http.Cookie {
	t.Helper()
	w := do(t, c, "POST", "/ui/login", url.Values{"token": {tok}, "next": {"/ui/jobs"}}, map[string]string{"Origin": "http://example.com"})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", w.Code, w.Body)
	}
	for _, ck := range w.Result().Cookies() {
		if ck.Name == cookieName {
			return ck
		}
	}
	t.Fatal("no session cookie")
	return nil
}

var pages = []string{"/ui/", "/ui/jobs", "/ui/jobs/events", "/ui/jobs/job-1", "/ui/jobs/job-1/events", "/ui/workspaces",
	"/ui/workspaces/w", "/ui/audit", "/ui/blocklist", "/ui/pool", "/ui/caches"}

// TestEveryPageRefusedWithoutToken: no cookie, a forged cookie, a wrong
// bearer token → 401 on every page; a metrics token → 403.
func TestEveryPageRefusedWithoutToken(t *testing.T) {
	c, _ := newTestConsole(t)
	for _, p := range pages {
		for name, hdr := range map[string]map[string]string{
			"none":         nil,
			"forged":       {"Cookie": cookieName + "=" + randomID()},
			"wrong bearer": {"Authorization": "Bearer not-a-token-at-all"},
		} {
			if w := do(t, c, "GET", p, nil, hdr); w.Code != http.StatusUnauthorized {
				t.Errorf("GET %s (%s): %d, want 401", p, name, w.Code)
			} else if strings.Contains(w.Body.String(), "alert") || strings.Contains(w.Body.String(), "echo") {
				t.Errorf("GET %s (%s): the refusal shows a job", p, name)
			}
		}
		if w := do(t, c, "GET", p, nil, map[string]string{"Authorization": "Bearer " + promTok}); w.Code != http.StatusForbidden {
			t.Errorf("GET %s with a metrics token: %d, want 403", p, w.Code)
		}
	}
	for _, p := range []string{"/ui/jobs/job-1/kill", "/ui/workspaces/w/delete", "/ui/logout"} {
		if w := do(t, c, "POST", p, url.Values{}, nil); w.Code != http.StatusUnauthorized {
			t.Errorf("POST %s: %d, want 401", p, w.Code)
		}
	}
	if w := do(t, c, "POST", "/ui/login", url.Values{"token": {"wrong-token-0123456789"}}, nil); w.Code != http.StatusUnauthorized {
		t.Errorf("sign in with a wrong token: %d", w.Code)
	}
}

// TestSignInCookie: the cookie is HttpOnly, SameSite=Strict, limited to /ui,
// and holds neither the token nor anything derived from it alone.
func TestSignInCookie(t *testing.T) {
	c, jobs := newTestConsole(t)
	ck := signIn(t, c, userTok)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui" {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui", ck)
	}
	if strings.Contains(ck.Value, userTok) || len(ck.Value) < 40 {
		t.Errorf("cookie value %q", ck.Value)
	}
	w := do(t, c, "GET", "/ui/jobs", nil, map[string]string{"Cookie": ck.String()})
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "job-1") {
		t.Fatalf("jobs page: %d", w.Code)
	}
	// A user's reads are scoped to its tenant; its tenant filter is ignored.
	do(t, c, "GET", "/ui/jobs?tenant=ops", nil, map[string]string{"Cookie": ck.String()})
	if got := jobs.scopes; len(got) != 2 || got[0] != "alice" || got[1] != "alice" {
		t.Errorf("scopes %q, want alice twice", got)
	}
	// An open redirect after sign-in is refused.
	if got := safeNext("//evil.example/ui/"); got != "/ui/jobs" {
		t.Errorf("safeNext: %q", got)
	}
}

// TestConsoleRendersOutputAsText (threat 47): output with markup and ANSI
// colours becomes escaped text in coloured spans; the CSP forbids inline script.
func TestConsoleRendersOutputAsText(t *testing.T) {
	c, _ := newTestConsole(t)
	ck := signIn(t, c, adminTok)
	w := do(t, c, "GET", "/ui/jobs/job-1", nil, map[string]string{"Cookie": ck.String()})
	body := w.Body.String()
	if w.Code != http.StatusOK {
		t.Fatalf("job page: %d %s", w.Code, body)
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "<b>hi") {
		t.Errorf("output or command put in as markup:\n%s", body)
	}
	if !strings.Contains(body, `<span class="f1">red</span>`) || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("output not rendered as escaped, coloured text:\n%s", body)
	}
	csp := w.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Contains(body, "<script>") && !strings.Contains(body, `<script src="/ui/static/app.js" defer></script>`) {
		t.Errorf("inline script on the page")
	}
}

// TestCrossSiteKillRefused (threat 48): a kill posted from another origin,
// or without the session's CSRF token, or by a non-admin, or as a GET, is
// refused; the same POST from the console's page with its token works.
func TestCrossSiteKillRefused(t *testing.T) {
	c, jobs := newTestConsole(t)
	admin := signIn(t, c, adminTok).String()
	user := signIn(t, c, userTok).String()
	var csrf string
	for _, s := range c.sessions.m {
		if s.role == "admin" {
			csrf = s.csrf
		}
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		hdr    map[string]string
		method string
	}{
		{"other origin", url.Values{"csrf": {csrf}}, map[string]string{"Cookie": admin, "Origin": "http://evil.example"}, "POST"},
		{"same host, other port", url.Values{"csrf": {csrf}}, map[string]string{"Cookie": admin, "Origin": "http://example.com:8080"}, "POST"},
		{"cross-site fetch", url.Values{"csrf": {csrf}}, map[string]string{"Cookie": admin, "Sec-Fetch-Site": "cross-site"}, "POST"},
		{"no csrf token", url.Values{}, map[string]string{"Cookie": admin, "Origin": "http://example.com"}, "POST"},
		{"wrong csrf token", url.Values{"csrf": {"x" + csrf}}, map[string]string{"Cookie": admin, "Origin": "http://example.com"}, "POST"},
		{"not admin", url.Values{"csrf": {csrf}}, map[string]string{"Cookie": user, "Origin": "http://example.com"}, "POST"},
		{"GET", nil, map[string]string{"Cookie": admin}, "GET"},
	} {
		w := do(t, c, tc.method, "/ui/jobs/job-1/kill?csrf="+url.QueryEscape(csrf), tc.form, tc.hdr)
		if w.Code < 400 {
			t.Errorf("%s: %d, want a refusal", tc.name, w.Code)
		}
	}
	if len(jobs.killed) != 0 {
		t.Fatalf("killed %q by a refused request", jobs.killed)
	}
	w := do(t, c, "POST", "/ui/jobs/job-1/kill", url.Values{"csrf": {csrf}}, map[string]string{"Cookie": admin, "Origin": "http://example.com"})
	if w.Code != http.StatusSeeOther || len(jobs.killed) != 1 {
		t.Fatalf("the console's own kill: %d, killed %q", w.Code, jobs.killed)
	}
	// Signing in from another site is refused too.
	if w := do(t, c, "POST", "/ui/login", url.Values{"token": {adminTok}}, map[string]string{"Origin": "http://evil.example"}); w.Code != http.StatusForbidden {
		t.Errorf("cross-site sign-in: %d", w.Code)
	}
}

func TestANSI(t *testing.T) {
	for _, tc := range []struct {
		chunks []string
		want   []Segment
	}{
		{[]string{"plain"}, []Segment{{Text: "plain"}}},
		{[]string{"\x1b[1;32mok\x1b[0m done"}, []Segment{{"ok", "f2 bold"}, {" done", ""}}},
		{[]string{"\x1b[3", "1mred"}, []Segment{{"red", "f1"}}},                         // a sequence cut by a chunk
		{[]string{"a\x1b]0;title\x07b\x1b[2Kc\r\n"}, []Segment{{"abc\n", ""}}},          // title, erase, CR dropped
		{[]string{"\x1b[38;5;9mx\x1b[38;2;1;2;3my"}, []Segment{{"x", "f9"}, {"y", ""}}}, // 256 and true colour
		{[]string{"\xe2\x82", "\xac"}, []Segment{{"€", ""}}},                            // a rune cut by a chunk
		{[]string{"<script>&"}, []Segment{{"<script>&", ""}}},                           // text stays text (escaped where shown)
	} {
		a := newANSI()
		var got []Segment
		for _, ch := range tc.chunks {
			for _, s := range a.feed([]byte(ch)) {
				if n := len(got); n > 0 && got[n-1].Class == s.Class {
					got[n-1].Text += s.Text
					continue
				}
				got = append(got, s)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%q: got %q, want %q", tc.chunks, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%q: got %q, want %q", tc.chunks, got, tc.want)
				break
			}
		}
	}
}

// TestSignInGuessingLimited (THREATS 46, 109): behind the listener's door,
// a source that fails to sign in ten times in a minute is refused even with
// a good token until the minute ends.
func TestSignInGuessingLimited(t *testing.T) {
	console, _ := newTestConsole(t)
	c := auth.NewDoor(auth.DoorConfig{}).Wrap(console, false)
	for i := 0; i < auth.MaxFailedCredentials; i++ {
		if w := do(t, c, "POST", "/ui/login", url.Values{"token": {"guess-0123456789abcdef"}}, nil); w.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, w.Code)
		}
	}
	if w := do(t, c, "POST", "/ui/login", url.Values{"token": {adminTok}}, nil); w.Code != http.StatusTooManyRequests {
		t.Fatalf("after %d failures: %d, want 429", auth.MaxFailedCredentials, w.Code)
	}
}

// TestStreamsBounded: live streams past the bound get 503, and a closed
// stream frees its place.
func TestStreamsBounded(t *testing.T) {
	c, _ := newTestConsole(t)
	ck := signIn(t, c, adminTok).String()
	srv := httptest.NewServer(c)
	defer srv.Close()
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/ui/jobs/events", nil)
		req.Header.Set("Cookie", ck)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := 0; i < maxStreams; i++ {
		resp := get()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %s", i, resp.Status)
		}
		open = append(open, resp)
	}
	if resp := get(); resp.StatusCode != http.StatusServiceUnavailable {
		resp.Body.Close()
		t.Fatalf("stream past the bound: %s, want 503", resp.Status)
	} else {
		resp.Body.Close()
	}
	open[0].Body.Close()
	open = open[1:]
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp := get()
		if resp.StatusCode == http.StatusOK {
			open = append(open, resp)
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("a closed stream's place was not freed")
		}
	}
}

// TestConsoleActionsAudited (THREATS 109): sign-ins, good and bad, and an
// admin's kill are each an audit line with the tenant and source address;
// the jobs list shows an admin whose each job is, and a tenant not.
func TestConsoleActionsAudited(t *testing.T) {
	c, jobs := newTestConsole(t)
	dir := t.TempDir()
	log, err := audit.Open(dir, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	c.Audit = log
	jobs.jobs[0].Tenant = "alice"
	if w := do(t, c, "POST", "/ui/login", url.Values{"token": {"guess-0123456789abcdef"}}, nil); w.Code != http.StatusUnauthorized {
		t.Fatalf("bad sign-in: %d", w.Code)
	}
	admin := signIn(t, c, adminTok).String()
	var csrf string
	for _, s := range c.sessions.m {
		if s.role == "admin" {
			csrf = s.csrf
		}
	}
	if w := do(t, c, "POST", "/ui/jobs/job-1/kill", url.Values{"csrf": {csrf}}, map[string]string{"Cookie": admin, "Origin": "http://example.com"}); w.Code != http.StatusSeeOther {
		t.Fatalf("kill: %d", w.Code)
	}
	var lines []audit.Entry
	if err := audit.Read(dir, audit.Filter{}, func(e audit.Entry, _ []byte) error { lines = append(lines, e); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []struct{ tool, tenant, outcome, decision, job string }{
		{"console.sign_in", "", "error", audit.Refused, ""},
		{"console.sign_in", "ops", "ok", audit.Allowed, ""},
		{"console.kill_job", "ops", "ok", audit.Allowed, "job-1"},
	}
	if len(lines) != len(want) {
		t.Fatalf("audit lines: %+v", lines)
	}
	for i, w := range want {
		e := lines[i]
		if e.Tool != w.tool || e.Tenant != w.tenant || e.Outcome != w.outcome || e.Decision != w.decision || e.JobID != w.job || e.Source != "192.0.2.1" {
			t.Errorf("line %d: %+v, want %+v from 192.0.2.1", i, e, w)
		}
	}
	if body := do(t, c, "GET", "/ui/jobs", nil, map[string]string{"Cookie": admin}).Body.String(); !strings.Contains(body, "<th>Tenant</th>") || !strings.Contains(body, "<td>alice</td>") {
		t.Fatalf("the admin's jobs list does not say whose the job is:\n%s", body)
	}
	user := signIn(t, c, userTok).String()
	if body := do(t, c, "GET", "/ui/jobs", nil, map[string]string{"Cookie": user}).Body.String(); strings.Contains(body, "<th>Tenant</th>") {
		t.Fatalf("a tenant's jobs list has a tenant column:\n%s", body)
	}
}

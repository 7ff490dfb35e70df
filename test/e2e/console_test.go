package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browserWait bounds each wait for the console to show something (it polls
// every second and streams output as it comes: far under this).
const browserWait = 90 * time.Second

// artifactsDir is where browser tests save screenshots (git-ignored).
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SANDBOXER_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "artifacts")
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser starts Debian's chromium headless with a fresh profile. Without
// chromium the test skips (fails under CI=true): `make test` installs it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium required under CI=true (scripts/test-deps.sh installs it)")
		}
		t.Skip("skipping: chromium not installed (apt-get install chromium, or make test)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// netChanged is Chromium's error for a request under way when the host's
// network interfaces change. The engine adds and removes container
// interfaces (and bridges, with addresses) all the time while the other
// tests run, so a page load can fail so; it is loaded again, not failed.
const netChanged = "ERR_NETWORK_CHANGED"

// netChangedTries bounds how often one load is taken again for it.
const netChangedTries = 5

// navigate loads url, again when Chromium ends the load with netChanged.
func navigate(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	for try := 1; ; try++ {
		err := chromedp.Do(ctx, chromedp.Navigate(url))
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), netChanged) || try == netChangedTries {
			t.Fatalf("load %s: %v", url, err)
		}
		t.Logf("load %s: %v (the host's interfaces changed): again", url, err)
	}
}

// waitFor polls a JavaScript predicate in the page until it holds. A
// navigation under way replaces the page's context: the poll starts again
// in the new page. A page that failed to load with netChanged is reloaded
// (every page a test waits on this way came from a GET).
func waitFor(t *testing.T, ctx context.Context, what, predicate string) {
	t.Helper()
	for try := 1; !waitForLoaded(t, ctx, what, predicate); try++ {
		if try == netChangedTries {
			t.Fatalf("waiting for %s: the page failed to load with %s %d times", what, netChanged, try)
		}
		t.Logf("waiting for %s: the page failed to load with %s: reloading", what, netChanged)
		if err := chromedp.Do(ctx, chromedp.Reload()); err != nil && !strings.Contains(err.Error(), netChanged) {
			t.Fatalf("reload: %v", err)
		}
	}
}

// posted runs submit (which posts a form) and waits for predicate in the
// answer. A POST's failed load is not reloaded: redo brings the form back,
// and submit runs again.
func posted(t *testing.T, ctx context.Context, what, predicate string, submit, redo func()) {
	t.Helper()
	for try := 1; ; try++ {
		submit()
		if waitForLoaded(t, ctx, what, predicate) {
			return
		}
		if try == netChangedTries {
			t.Fatalf("waiting for %s: the POST failed with %s %d times", what, netChanged, try)
		}
		t.Logf("waiting for %s: the POST failed with %s: again", what, netChanged)
		redo()
	}
}

// waitForLoaded is waitFor's poll: false when the page is Chromium's error
// page for netChanged instead (a POST's answer is taken again by its caller).
func waitForLoaded(t *testing.T, ctx context.Context, what, predicate string) bool {
	t.Helper()
	const errorPage = `location.href.startsWith("chrome-error:")`
	deadline := time.Now().Add(browserWait)
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool]("("+predicate+") || "+errorPage, chromedp.WithPollingTimeout(time.Until(deadline)), chromedp.WithPollingInterval(100*time.Millisecond)))
		if err == nil {
			if !eval[bool](t, ctx, errorPage) {
				return true
			}
			page := eval[string](t, ctx, `document.documentElement.innerText.slice(0, 3000)`)
			if strings.Contains(page, netChanged) {
				return false
			}
			t.Fatalf("waiting for %s: the page failed to load:\n%s", what, page)
		}
		// The page navigated under the poll ("Cannot find context with
		// specified id", "Inspected target navigated or closed", ...).
		navigating := strings.Contains(err.Error(), "(-32000)") || strings.Contains(err.Error(), "context was destroyed")
		if !navigating || time.Now().After(deadline) {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 3000) : ""`))
			t.Fatalf("waiting for %s (%s): %v\npage:\n%s", what, predicate, err, html)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(artifactsDir(t), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}

// TestConsoleInBrowser drives the console in headless Chromium against a real
// server: refused before signing in; signed in, a job started through MCP
// appears without a reload, its page streams its output (markup in it stays
// text: threat 47), a Python session's screen shows >>>, and a form posted
// from another origin cannot kill a job (threat 48). Screenshots are saved.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	s := startServer(t, metricsEnv(t)...)
	base := s.httpAddr()
	ctx := browser(t)

	// Refused without a token: the page is the sign-in form, nothing else.
	navigate(t, ctx, base+"/ui/jobs")
	signInForm := `!!document.getElementById("login") && !document.getElementById("jobs")`
	waitFor(t, ctx, "the sign-in form", signInForm)
	screenshot(t, ctx, "signin.png")
	resp, err := http.Get(base + "/ui/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /ui/jobs without a token: %s, want 401", resp.Status)
	}

	// Sign in; the jobs list goes live.
	posted(t, ctx, "the live jobs list", `!!document.getElementById("jobs") && document.getElementById("live").classList.contains("on")`,
		func() {
			if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#token"), adminToken), chromedp.Submit(chromedp.CSS("#token"))); err != nil {
				t.Fatal(err)
			}
		},
		func() { navigate(t, ctx, base+"/ui/jobs"); waitFor(t, ctx, "the sign-in form", signInForm) })
	eval[any](t, ctx, `window.__sameDocument = 42`)

	// A job started through MCP appears without a reload.
	r := s.ok("run_command", map[string]any{"background": true, "command": `echo first; read go; for i in 1 2 3; do echo "tick-$i"; sleep 0.2; done; ` +
		`printf '\033[31mred\033[0m <script>window.pwned=1</script><img src=x onerror="window.pwned=2">\n'; echo END`})
	id := str(r, "job_id")
	waitFor(t, ctx, "job "+id+" in the list", fmt.Sprintf(`!!document.querySelector('#jobs tr[data-id=%q]') && window.__sameDocument === 42`, id))
	s.ok("run_command", map[string]any{"command": `printf '\033[1;32mPASS\033[0m build ok\n'`})
	s.ok("run_script", map[string]any{"language": "python", "code": "print(sum(range(10)))"})
	s.call("run_command", map[string]any{"command": "exit 3"})

	// Its page streams the output in as it comes. The live list redraws its
	// rows as jobs change (three just did), so the link is clicked in the
	// page, on the row as it is then: a click dispatched by position could
	// land on a row already replaced, and go nowhere.
	eval[bool](t, ctx, fmt.Sprintf(`(document.querySelector('#jobs tr[data-id=%q] a').click(), true)`, id))
	waitFor(t, ctx, "the job's first output", `(document.getElementById("output") || {textContent: ""}).textContent.includes("first")`)
	if txt := eval[string](t, ctx, `document.getElementById("output").textContent`); strings.Contains(txt, "END") {
		t.Fatalf("the job ended before it was given input: %q", txt)
	}
	eval[any](t, ctx, `window.__sameDocument = 43`)
	s.ok("send_input", map[string]any{"job_id": id, "text": "go", "enter": true})
	waitFor(t, ctx, "the rest of the output, streamed", `document.getElementById("output").textContent.includes("END") && window.__sameDocument === 43`)
	waitFor(t, ctx, "the status to follow", `document.getElementById("status").textContent === "completed"`)
	// Threat 47: markup in the output is text; nothing in it ran.
	if pwned := eval[bool](t, ctx, `window.pwned !== undefined`); pwned {
		t.Fatal("script from the job's output ran in the console")
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#output script, #output img").length`); n != 0 {
		t.Fatalf("the job's output became %d elements", n)
	}
	if !strings.Contains(eval[string](t, ctx, `document.getElementById("output").textContent`), `<script>window.pwned=1</script>`) {
		t.Fatal("the markup is not shown as text")
	}
	if c := eval[string](t, ctx, `(document.querySelector("#output span.f1") || {textContent: ""}).textContent`); c != "red" {
		t.Fatalf("ANSI red not rendered as a coloured span: %q", c)
	}
	screenshot(t, ctx, "job.png")

	// A Python session's screen.
	r = s.startSession(map[string]any{"language": "python", "command": "python3", "mode": "pty", "until": ">>> $"})
	sid := str(r, "job_id")
	navigate(t, ctx, base+"/ui/jobs/"+sid)
	waitFor(t, ctx, "the session's prompt", `(document.getElementById("screen") || {textContent: ""}).textContent.includes(">>>")`)
	s.typeLine(sid, "print(6*7)")
	waitFor(t, ctx, "the session's answer on its screen", `document.getElementById("screen").textContent.includes("\n42")`)
	screenshot(t, ctx, "session.png")

	// Threat 48: a page of another origin posts a kill with the admin's cookie.
	victim := str(s.ok("run_command", map[string]any{"background": true, "command": "sleep 600"}), "job_id")
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/ui/jobs/%s/kill"><input name="csrf" value="guess"></form>`+
			`<script>document.getElementById("f").submit()</script>`, base, victim)
	}))
	defer hostile.Close()
	// The hostile page posts its form as it loads.
	posted(t, ctx, "the cross-site POST's answer", fmt.Sprintf(`location.href.startsWith(%q) && document.body.innerText.includes("refused")`, base),
		func() { navigate(t, ctx, hostile.URL) }, func() {})
	if st := str(s.ok("get_job", map[string]any{"job_id": victim}), "status"); st != "running" {
		t.Fatalf("a cross-site POST killed the job: status %s", st)
	}
	// The console's own kill form works (the form's submit() skips the confirm dialog).
	killed := `(document.getElementById("status") || {}).textContent === "killed"`
	jobPage := func() {
		navigate(t, ctx, base+"/ui/jobs/"+victim)
		waitFor(t, ctx, "the kill button", `!!document.getElementById("kill") || `+killed)
	}
	jobPage()
	// Again after a failed load only if the kill did not get through.
	posted(t, ctx, "the killed job's page", killed, func() { eval[any](t, ctx, `(k => k && k.submit())(document.getElementById("kill"))`) }, jobPage)
	if st := str(s.ok("get_job", map[string]any{"job_id": victim}), "status"); st != "killed" {
		t.Fatalf("the console's kill: status %s", st)
	}
	// The sign-in and the kill are on the record, with the tenant and the
	// source address (THREATS 109); an admin sees whose each job is.
	if log, err := os.ReadFile(filepath.Join(s.stateDir, "audit.log")); err != nil ||
		!strings.Contains(string(log), `"client":"console","tenant":"ops","source":"127.0.0.1","tool":"console.sign_in"`) ||
		!strings.Contains(string(log), `"client":"console","tenant":"ops","source":"127.0.0.1","tool":"console.kill_job","job_id":"`+victim+`"`) {
		t.Fatalf("the console's sign-in and kill are not audited: %v\n%s", err, log)
	}

	// The jobs list as the docs show it, light and dark.
	navigate(t, ctx, base+"/ui/jobs")
	waitFor(t, ctx, "the jobs list", fmt.Sprintf(`!!document.querySelector('#jobs tr[data-id=%q]')`, victim))
	waitFor(t, ctx, "the tenant column", fmt.Sprintf(`document.querySelector('#jobs tr[data-id=%q] td').textContent === "local"`, victim))
	screenshot(t, ctx, "jobs-light.png")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#theme"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the dark theme", `document.documentElement.dataset.theme === "dark"`)
	screenshot(t, ctx, "jobs-dark.png")
	for _, p := range []string{"/ui/workspaces", "/ui/audit", "/ui/blocklist", "/ui/pool", "/ui/caches"} {
		navigate(t, ctx, base+p)
		waitFor(t, ctx, p, `!!document.querySelector("main h1")`)
		screenshot(t, ctx, strings.TrimPrefix(p, "/ui/")+".png")
	}
}

// TestConsoleTenantScope: through the real store, a user's token sees only
// its own tenant's jobs (the stdio client's are tenant "local"); an admin's
// sees them all.
func TestConsoleTenantScope(t *testing.T) {
	t.Parallel()
	s := startServer(t, metricsEnv(t)...)
	base := s.httpAddr()
	id := str(s.ok("run_command", map[string]any{"command": "echo local-job"}), "job_id")
	get := func(token, path string) (int, string) { return uiGet(t, base, token, path) }
	if code, body := get(adminToken, "/ui/jobs"); code != http.StatusOK || !strings.Contains(body, id) {
		t.Fatalf("admin's jobs list: %d, has job %s: %v", code, id, strings.Contains(body, id))
	}
	// The filters reach the store: each of these leaves the completed bash job out.
	for _, q := range []string{"status=failed", "language=python", "kind=script", "workspace=none", "tenant=alice"} {
		if code, body := get(adminToken, "/ui/jobs?"+q); code != http.StatusOK || strings.Contains(body, id) {
			t.Errorf("admin's jobs list ?%s: %d, shows the job: %v", q, code, strings.Contains(body, id))
		}
	}
	for _, q := range []string{"status=completed", "language=bash", "kind=command", "tenant=local"} {
		if code, body := get(adminToken, "/ui/jobs?"+q); code != http.StatusOK || !strings.Contains(body, id) {
			t.Errorf("admin's jobs list ?%s: %d, leaves the job out", q, code)
		}
	}
	if code, body := get(userToken, "/ui/jobs"); code != http.StatusOK || strings.Contains(body, id) {
		t.Fatalf("alice's jobs list: %d, shows the local tenant's job: %v", code, strings.Contains(body, id))
	}
	if code, _ := get(userToken, "/ui/jobs/"+id); code != http.StatusNotFound {
		t.Fatalf("alice opening the local tenant's job: %d, want 404", code)
	}
	if code, body := get(userToken, "/ui/audit"); code != http.StatusOK || strings.Contains(body, id) {
		t.Fatalf("alice's audit log: %d, shows the local tenant's call: %v", code, strings.Contains(body, id))
	}
	if code, _ := get(metricsToken, "/ui/jobs"); code != http.StatusForbidden {
		t.Fatalf("a metrics token on the console: %d, want 403", code)
	}
}

// uiGet fetches a console page with a bearer token.
func uiGet(t *testing.T, base, token, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestConsoleOnHTTPListener: the console hangs on the --http listener too;
// a tenant's workspace shows its size and files (read-only, markup in a
// file shown as text), another tenant's does not show at all.
func TestConsoleOnHTTPListener(t *testing.T) {
	t.Parallel()
	h := startHTTPServer(t)
	alice := h.client(aliceToken)
	name := "e2e-console-ws"
	okHTTP(t, alice, "create_workspace", map[string]any{"name": name})
	cleanupWorkspace(t, name)
	okHTTP(t, alice, "write_file", map[string]any{"workspace": name, "path": "notes/page.html", "content": "<script>alert(1)</script>\n"})

	if code, body := uiGet(t, h.base, aliceToken, "/ui/workspaces"); code != http.StatusOK || !strings.Contains(body, name) {
		t.Fatalf("alice's workspaces page: %d, lists %s: %v", code, name, strings.Contains(body, name))
	}
	if code, body := uiGet(t, h.base, bobToken, "/ui/workspaces"); code != http.StatusOK || strings.Contains(body, name) {
		t.Fatalf("bob's workspaces page: %d, lists alice's workspace: %v", code, strings.Contains(body, name))
	}
	if code, _ := uiGet(t, h.base, bobToken, "/ui/workspaces/"+name); code != http.StatusNotFound {
		t.Fatalf("bob opening alice's workspace: %d, want 404", code)
	}
	code, body := uiGet(t, h.base, aliceToken, "/ui/workspaces/"+name+"?path=notes")
	if code != http.StatusOK || !strings.Contains(body, "page.html") || !strings.Contains(body, "<dt>size</dt>") {
		t.Fatalf("alice's workspace page: %d\n%s", code, body)
	}
	code, body = uiGet(t, h.base, aliceToken, "/ui/workspaces/"+name+"?file=notes/page.html")
	if code != http.StatusOK || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") || strings.Contains(body, "<script>alert") {
		t.Fatalf("the file as text: %d\n%s", code, body)
	}
	// Without a token the listener's console refuses, as /mcp does.
	resp, err := http.Get(h.base + "/ui/workspaces/" + name)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %s, want 401", resp.Status)
	}
}

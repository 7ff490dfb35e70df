package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// requireCheckpoints skips unless the engine has runsc and serves
// checkpoints (its experimental mode: make gvisor turns it on).
func requireCheckpoints(t *testing.T) {
	t.Helper()
	requireRunsc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Experimental}}").Output()
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Skip("the engine serves no checkpoints (its experimental mode is off: `make gvisor` turns it on); skipping hibernation")
	}
}

// TestGVisorWorkspaceHibernates: on runsc, a workspace whose only process
// is an idle Python REPL (serving HTTP from a thread) is checkpointed and
// stopped after hibernate_after_s; the next call restores it, and so does a
// server that died meanwhile, to take the REPL over: the REPL keeps its
// variables and takes input, and its server answers through expose_port
// again.
func TestGVisorWorkspaceHibernates(t *testing.T) {
	requireCheckpoints(t)
	t.Parallel()
	ws := fmt.Sprintf("hb%d", time.Now().UnixNano()%1_000_000)
	cleanupWorkspace(t, ws)
	pol := policyEnv(t, runscPolicy+"workspaces:\n  hibernate_after_s: 2\n")
	s := startServer(t, pol)
	id := s.replServing(ws, "http.server.SimpleHTTPRequestHandler")
	s.ok("write_file", map[string]any{"workspace": ws, "path": "hello.txt", "content": "from the workspace\n"})
	url := str(s.ok("expose_port", map[string]any{"workspace": ws, "port": 8000}), "url")
	get := func() string {
		t.Helper()
		resp, err := http.Get(url + "hello.txt")
		if err != nil {
			t.Fatalf("GET through expose_port: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := get(); got != "from the workspace\n" {
		t.Fatalf("the REPL's server answered %q", got)
	}
	engine := func() string { return engineState(ws) }
	listed := func(s *server) string { return s.listedState(ws) }
	waitHibernated := func(s *server) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for engine() != "exited" || listed(s) != "hibernated" {
			if time.Now().After(deadline) {
				t.Fatalf("the workspace with an idle REPL was not hibernated: engine %q, list_workspaces %q", engine(), listed(s))
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	waitHibernated(s)
	// Restored by the next call: the REPL's variable and its server.
	out, _ := s.typeLine(id, "print(x + 1)", "until", `42\s*\n>>> $`, "wait_s", 45) // the restore first
	if !strings.Contains(out, "42") {
		t.Fatalf("after the restore the REPL answered %q (its variable lost?)", out)
	}
	if got := get(); got != "from the workspace\n" {
		t.Fatalf("after the restore the REPL's server answered %q", got)
	}

	// Hibernated again, then the server dies: the next one restores it to
	// adopt the session, whose input its daemon kept: the REPL's variable
	// and its server, a thread of a process that lived through it all.
	waitHibernated(s)
	s.kill9() // as a crash would: a clean stop ends its sessions
	s = startServerIn(t, s.stateDir, pol)
	out, _ = s.typeLine(id, "x = x * 2; print(x)", "until", `82\s*\n>>> $`, "wait_s", 45)
	if !strings.Contains(out, "82") {
		t.Fatalf("after a restart and a restore the REPL answered %q", out)
	}
	url = str(s.ok("expose_port", map[string]any{"workspace": ws, "port": 8000}), "url")
	if got := get(); got != "from the workspace\n" {
		t.Fatalf("after a restart and a restore the REPL's server answered %q", got)
	}
	if l := listed(s); l != "running" {
		t.Fatalf("after the restore list_workspaces says %q", l)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})
}

// TestGVisorForkCarriesMemory: two copies of a runsc workspace with its
// processes: the REPL is a session of each copy, with the source's
// variable, and each goes its own way (its server thread answers with its
// own x; the source's, set anew, with the source's). Each copy has its own
// hostname.
func TestGVisorForkCarriesMemory(t *testing.T) {
	requireCheckpoints(t)
	t.Parallel()
	ws := fmt.Sprintf("fk%d", time.Now().UnixNano()%1_000_000)
	for _, name := range []string{ws, ws + "c-1", ws + "c-2"} {
		cleanupWorkspace(t, name)
	}
	s := startServer(t, policyEnv(t, runscPolicy))
	// The handler answers with the REPL's x.
	id := s.replServing(ws, `type("H", (http.server.BaseHTTPRequestHandler,), {"do_GET": lambda self: (self.send_response(200), self.end_headers(), self.wfile.write(str(x).encode()))})`)
	value := func(name string) string {
		t.Helper()
		url := str(s.ok("expose_port", map[string]any{"workspace": name, "port": 8000}), "url")
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s's server: %v", name, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := value(ws); got != "41" {
		t.Fatalf("the source's server answered %q", got)
	}
	res := s.ok("create_workspace", map[string]any{"name": ws + "c", "from": ws, "with_processes": true, "count": 2})
	origin, _ := res["origin"].(map[string]any)
	jobs, _ := origin["jobs"].([]any)
	if copies, _ := res["copies"].([]any); len(copies) != 2 || origin["processes"] != true || len(jobs) != 2 {
		t.Fatalf("a fork of two with processes: %v", res)
	}
	// Each copy's REPL is a session of that copy: it has x, and its own.
	for _, j := range jobs {
		cj := j.(map[string]any)
		if cj["from"] != id {
			t.Fatalf("a copied job from %v, want the REPL %s", cj["from"], id)
		}
		copyID := str(cj, "job_id")
		if out, _ := s.typeLine(copyID, "x = x + 1; print(x)", "until", `42\s*\n>>> $`, "wait_s", 30); !strings.Contains(out, "42") {
			t.Fatalf("the copy %v's REPL answered %q", cj["workspace"], out)
		}
		defer s.ok("kill_job", map[string]any{"job_id": copyID, "signal": "KILL", "grace_s": 0})
	}
	s.typeLines(id, "x = 100")
	if got := value(ws); got != "100" {
		t.Fatalf("the source after x = 100 answered %q", got)
	}
	hosts := map[string]bool{}
	for _, c := range []string{ws + "c-1", ws + "c-2"} {
		if got := value(c); got != "42" {
			t.Fatalf("copy %s answered %q, want its own x, 42", c, got)
		}
		hosts[s.wsOut(c, "hostname")] = true
	}
	hosts[s.wsOut(ws, "hostname")] = true
	if len(hosts) != 3 {
		t.Fatalf("the source and its copies share hostnames: %v", hosts)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})
}

// typeLines types each line into a Python REPL session, waiting for its
// next prompt.
func (s *server) typeLines(id string, lines ...string) {
	s.t.Helper()
	for _, line := range lines {
		if out, _ := s.typeLine(id, line, "until", ">>> $", "wait_s", 30); !strings.HasSuffix(out, ">>> ") {
			s.t.Fatalf("%s answered %q", line, out)
		}
	}
}

// replServing makes python workspace ws and starts a Python REPL session in
// it that sets x = 41 and serves HTTP on 127.0.0.1:8000 from a thread, with
// handler (a Python expression naming a handler class); it returns the
// session's job id.
func (s *server) replServing(ws, handler string) string {
	s.t.Helper()
	s.ok("create_workspace", map[string]any{"name": ws, "language": "python"})
	r := s.startSession(map[string]any{"workspace": ws, "language": "python", "command": "python3", "until": ">>> $"})
	id := str(r, "job_id")
	s.typeLines(id,
		"x = 41",
		"import http.server, threading",
		`srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8000), `+handler+`)`,
		"t = threading.Thread(target=srv.serve_forever, daemon=True); t.start()",
	)
	return id
}

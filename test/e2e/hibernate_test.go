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

	"github.com/sandboxer/sandboxer/internal/sandbox"
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
// stopped after hibernate_after_s; a server restart finds it hibernated and
// restores it to take the REPL over: the REPL keeps its variables, and its
// server answers through expose_port again.
func TestGVisorWorkspaceHibernates(t *testing.T) {
	requireCheckpoints(t)
	t.Parallel()
	ws := fmt.Sprintf("hb%d", time.Now().UnixNano()%1_000_000)
	cleanupWorkspace(t, ws)
	pol := policyEnv(t, runscPolicy+"workspaces:\n  hibernate_after_s: 2\n")
	s := startServer(t, pol)
	s.ok("create_workspace", map[string]any{"name": ws, "language": "python"})
	r := s.startSession(map[string]any{"workspace": ws, "language": "python", "command": "python3", "until": ">>> $"})
	id := str(r, "job_id")
	for _, line := range []string{
		"x = 41",
		"import http.server, threading",
		`srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8000), http.server.SimpleHTTPRequestHandler)`,
		"t = threading.Thread(target=srv.serve_forever, daemon=True); t.start()",
	} {
		if out, _ := s.typeLine(id, line, "until", ">>> $"); !strings.HasSuffix(out, ">>> ") {
			t.Fatalf("%s answered %q", line, out)
		}
	}
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
	engine := func() string {
		out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelWorkspace+"="+ws).Output()
		st, _ := exec.Command("docker", "inspect", "--format", "{{.State.Status}}", strings.TrimSpace(string(out))).Output()
		return strings.TrimSpace(string(st))
	}
	listed := func(s *server) string {
		for _, w := range s.ok("list_workspaces", map[string]any{})["workspaces"].([]any) {
			if m := w.(map[string]any); m["name"] == ws {
				return str(m, "state")
			}
		}
		return ""
	}
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
	out, _ := s.typeLine(id, "print(x + 1)", "until", `42\s*\n>>> $`)
	if !strings.Contains(out, "42") {
		t.Fatalf("after the restore the REPL answered %q (its variable lost?)", out)
	}
	if got := get(); got != "from the workspace\n" {
		t.Fatalf("after the restore the REPL's server answered %q", got)
	}

	// Hibernated again, then the server dies: the next one restores it to
	// adopt the session (whose stdin a restart closes, as for any job), and
	// the REPL's server, a thread of a process that lived through it all,
	// answers again.
	waitHibernated(s)
	s.kill9() // as a crash would: a clean stop ends its sessions
	s = startServerIn(t, s.stateDir, pol)
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
// processes: a REPL's variable, served by a thread of that REPL, is in each
// copy; set anew in the source, the copies keep the old value. Each copy has
// its own hostname.
func TestGVisorForkCarriesMemory(t *testing.T) {
	requireCheckpoints(t)
	t.Parallel()
	ws := fmt.Sprintf("fk%d", time.Now().UnixNano()%1_000_000)
	for _, name := range []string{ws, ws + "c-1", ws + "c-2"} {
		cleanupWorkspace(t, name)
	}
	s := startServer(t, policyEnv(t, runscPolicy))
	s.ok("create_workspace", map[string]any{"name": ws, "language": "python"})
	r := s.startSession(map[string]any{"workspace": ws, "language": "python", "command": "python3", "until": ">>> $"})
	id := str(r, "job_id")
	for _, line := range []string{
		"x = 41",
		"import http.server, threading",
		`H = type("H", (http.server.BaseHTTPRequestHandler,), {"do_GET": lambda self: (self.send_response(200), self.end_headers(), self.wfile.write(str(x).encode()))})`,
		`srv = http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H)`,
		"t = threading.Thread(target=srv.serve_forever, daemon=True); t.start()",
	} {
		if out, _ := s.typeLine(id, line, "until", ">>> $"); !strings.HasSuffix(out, ">>> ") {
			t.Fatalf("%s answered %q", line, out)
		}
	}
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
	if copies, _ := res["copies"].([]any); len(copies) != 2 || origin["processes"] != true {
		t.Fatalf("a fork of two with processes: %v", res)
	}
	if out, _ := s.typeLine(id, "x = 100", "until", ">>> $"); !strings.HasSuffix(out, ">>> ") {
		t.Fatalf("x = 100 answered %q", out)
	}
	if got := value(ws); got != "100" {
		t.Fatalf("the source after x = 100 answered %q", got)
	}
	hosts := map[string]bool{}
	for _, c := range []string{ws + "c-1", ws + "c-2"} {
		if got := value(c); got != "41" {
			t.Fatalf("copy %s answered %q, want the value at the fork, 41", c, got)
		}
		hosts[s.wsOut(c, "hostname")] = true
	}
	hosts[s.wsOut(ws, "hostname")] = true
	if len(hosts) != 3 {
		t.Fatalf("the source and its copies share hostnames: %v", hosts)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})
}

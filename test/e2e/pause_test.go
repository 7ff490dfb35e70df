package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

// TestWorkspacePausesAndThaws: with workspaces.pause_after_s, a workspace
// whose only job is a Python REPL waiting for input is frozen (the engine
// says paused, list_workspaces says paused); the next input thaws it and
// the REPL still has its variables; a job thaws it the same way.
func TestWorkspacePausesAndThaws(t *testing.T) {
	testutil.RequireDocker(t)
	t.Parallel()
	ws := fmt.Sprintf("pz%d", time.Now().UnixNano()%1_000_000)
	cleanupWorkspace(t, ws)
	s := startServer(t, policyEnv(t, "workspaces:\n  pause_after_s: 1\n"))
	s.ok("create_workspace", map[string]any{"name": ws, "language": "python"})
	r := s.startSession(map[string]any{"workspace": ws, "language": "python", "command": "python3", "until": ">>> $"})
	id := str(r, "job_id")
	if out, _ := s.typeLine(id, "x = 41", "until", ">>> $"); !strings.HasSuffix(out, ">>> ") {
		t.Fatalf("x = 41 answered %q", out)
	}
	engine := func() string { return engineState(ws) }
	listed := func() string { return s.listedState(ws) }
	deadline := time.Now().Add(30 * time.Second)
	for engine() != "paused" || listed() != "paused" {
		if time.Now().After(deadline) {
			t.Fatalf("the workspace with an idle REPL was not paused: engine %q, list_workspaces %q", engine(), listed())
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, _ := s.typeLine(id, "print(x + 1)", "until", `42\s*\n>>> $`)
	if !strings.Contains(out, "42") {
		t.Fatalf("after the thaw the REPL answered %q (its variable lost?)", out)
	}
	if e, l := engine(), listed(); e != "running" || l != "running" {
		t.Fatalf("after the input: engine %q, list_workspaces %q; want running", e, l)
	}
	deadline = time.Now().Add(30 * time.Second)
	for engine() != "paused" {
		if time.Now().After(deadline) {
			t.Fatal("the workspace was not paused again")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := s.wsOut(ws, "echo thawed"); got != "thawed\n" {
		t.Fatalf("a job of the paused workspace: %q", got)
	}
	if e := engine(); e != "running" {
		t.Fatalf("after a job the engine says %q", e)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})

	// A restarted server finds it paused and keeps it so until a call.
	deadline = time.Now().Add(30 * time.Second)
	for engine() != "paused" {
		if time.Now().After(deadline) {
			t.Fatal("the workspace was not paused before the restart")
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.stop()
	s = startServerIn(t, s.stateDir, policyEnv(t, "workspaces:\n  pause_after_s: 1\n"))
	time.Sleep(3 * time.Second) // its idle loop has run
	if e, l := engine(), listed(); e != "paused" || l != "paused" {
		t.Fatalf("after a restart: engine %q, list_workspaces %q; want paused", e, l)
	}
	if got := s.wsOut(ws, "echo after restart"); got != "after restart\n" {
		t.Fatalf("a job after the restart: %q", got)
	}
}

// TestWorkspaceSessionTakesInputAfterRestart: a server that dies leaves a
// workspace's REPL to its daemon, which keeps its input: the next server
// adopts it and the REPL answers as before, its variable kept.
func TestWorkspaceSessionTakesInputAfterRestart(t *testing.T) {
	testutil.RequireDocker(t)
	t.Parallel()
	ws := fmt.Sprintf("rs%d", time.Now().UnixNano()%1_000_000)
	cleanupWorkspace(t, ws)
	s := startServer(t)
	s.ok("create_workspace", map[string]any{"name": ws, "language": "python"})
	id := str(s.startSession(map[string]any{"workspace": ws, "language": "python", "command": "python3", "until": ">>> $"}), "job_id")
	s.typeLines(id, "x = 41")
	s.kill9()
	s = startServerIn(t, s.stateDir)
	out, _ := s.typeLine(id, "print(x + 1)", "until", `42\s*\n>>> $`, "wait_s", 30)
	if !strings.Contains(out, "42") {
		t.Fatalf("after a restart the REPL answered %q", out)
	}
	if j := s.ok("get_job", map[string]any{"job_id": id}); str(j, "status") != "running" {
		t.Fatalf("the adopted session: %v", j)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})
}

// engineState is the engine's word for workspace ws's container's state
// (running, paused, exited).
func engineState(ws string) string {
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+sandbox.LabelWorkspace+"="+ws).Output()
	st, _ := exec.Command("docker", "inspect", "--format", "{{.State.Status}}", strings.TrimSpace(string(out))).Output()
	return strings.TrimSpace(string(st))
}

// listedState is workspace ws's state as list_workspaces shows it.
func (s *server) listedState(ws string) string {
	s.t.Helper()
	for _, w := range s.ok("list_workspaces", map[string]any{})["workspaces"].([]any) {
		if m := w.(map[string]any); m["name"] == ws {
			return str(m, "state")
		}
	}
	return ""
}

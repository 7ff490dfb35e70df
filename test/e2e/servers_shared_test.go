package e2e

import (
	"strings"
	"testing"
	"time"
)

// Two servers on one state directory (two agent windows, one user): each
// keeps running its own jobs through several cleanup passes, closing one
// server's client kills only that server's jobs, and a server started after
// both have died adopts what is left of both.
func TestServersShareStateDir(t *testing.T) {
	t.Parallel()
	fast := policyEnv(t, "jobs:\n  cleanup_interval_s: 1\n")
	a := startServer(t, fast)
	b := startServerIn(t, a.stateDir, fast)

	bg := func(s *server, cmd string) string {
		return str(s.ok("run_command", map[string]any{"command": cmd, "background": true, "timeout_s": 300}), "job_id")
	}
	counter := "for i in $(seq 1 300); do echo tick$i; sleep 1; done"
	a1, a2 := bg(a, counter), bg(a, "sleep 300")
	b1, b2 := bg(b, counter), bg(b, "sleep 300")

	// Many cleanup passes of both servers.
	time.Sleep(12 * time.Second)
	for _, c := range []struct {
		s  *server
		id string
	}{{a, a1}, {a, a2}, {b, b1}, {b, b2}} {
		g := c.s.ok("get_job", map[string]any{"job_id": c.id})
		if str(g, "status") != "running" {
			t.Fatalf("job %s of its own server is %v after 12 s of shared cleanup passes\nA stderr:\n%s\nB stderr:\n%s",
				c.id, g, tail(a.stderr.String(), 3000), tail(b.stderr.String(), 3000))
		}
	}
	for _, c := range []struct {
		s  *server
		id string
	}{{a, a1}, {b, b1}} {
		// Its output goes on (on a busy machine a job may have started late:
		// wait for the line rather than assume how far it got in 12 s).
		out := str(c.s.ok("read_output", map[string]any{"job_id": c.id, "cursor": 0, "until": "tick10\n", "wait_s": 40}), "output")
		if !strings.Contains(out, "tick10\n") {
			t.Errorf("job %s output after its 10th second: %q", c.id, out)
		}
	}
	if strings.Contains(a.stderr.String()+b.stderr.String(), "adopted running job") {
		t.Error("a server adopted a job of a live server")
	}
	// One server may not steer the other's job, and says why.
	if msg := a.toolErr("kill_job", map[string]any{"job_id": b2, "grace_s": 0}); !strings.Contains(msg, "another sandboxer server") {
		t.Errorf("kill_job of the other server's job: %q", msg)
	}
	// But it can read it: the output files and the database are shared.
	if g := a.ok("get_job", map[string]any{"job_id": b1}); str(g, "status") != "running" {
		t.Errorf("A's view of B's job: %v", g)
	}

	// Closing A's client kills A's jobs, not B's.
	a.stop()
	time.Sleep(3 * time.Second)
	for _, id := range []string{a1, a2} {
		if g := b.ok("get_job", map[string]any{"job_id": id}); str(g, "status") != "killed" || str(g, "reason") != "server_shutdown" {
			t.Errorf("A's job %s after A's shutdown: %v", id, g)
		}
	}
	for _, id := range []string{b1, b2} {
		if g := b.ok("get_job", map[string]any{"job_id": id}); str(g, "status") != "running" {
			t.Errorf("B's job %s after A's shutdown: %v", id, g)
		}
	}

	// Both die without a word; a third server adopts the survivors of both:
	// B's jobs, and A's new one started by a fourth server that then dies too.
	d := startServerIn(t, a.stateDir, fast)
	d1 := bg(d, counter)
	if r := d.ok("read_output", map[string]any{"job_id": d1, "cursor": 0, "until": "tick1", "wait_s": 20}); r["matched"] != true {
		t.Fatalf("D's job never started: %v", r)
	}
	d.kill9()
	b.kill9()
	c := startServerIn(t, a.stateDir, fast)
	for _, id := range []string{b1, b2, d1} {
		if g := c.ok("get_job", map[string]any{"job_id": id}); str(g, "status") != "running" {
			t.Errorf("job %s after its server died and another started: %v\nC stderr:\n%s", id, g, tail(c.stderr.String(), 3000))
		}
	}
	if n := strings.Count(c.stderr.String(), "adopted running job"); n != 3 {
		t.Errorf("C adopted %d jobs, want 3", n)
	}
	// Adopted means steerable: C kills them.
	for _, id := range []string{b1, b2, d1} {
		if g := c.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL"}); str(g, "status") != "killed" {
			t.Errorf("kill of adopted job %s: %v", id, g)
		}
	}
	c.waitNoContainers(15 * time.Second)
}

package e2e

import (
	"strings"
	"testing"
	"time"
)

// The timing-sensitive tests in this file do not call t.Parallel: they run
// first, one at a time, so a loaded machine does not blur their clocks.

func TestJobsWaitReturnsRunningThenCompletes(t *testing.T) {
	s := startServer(t)
	// The job lasts about 6 s: a call bounded by its wait (1 s) returns
	// while it runs, with part of its output. (How long the sandbox took to
	// start is the bench's business, not this test's.)
	r := s.ok("run_command", map[string]any{"command": "for i in 1 2 3; do echo $i; sleep 2; done", "wait_s": 1})
	id := str(r, "job_id")
	if id == "" || str(r, "status") != "running" {
		t.Fatalf("want a running job with a job_id, got %v", r)
	}
	if out := str(r, "stdout"); out == "" || out == "1\n2\n3\n" || !strings.HasPrefix("1\n2\n3\n", out) {
		t.Errorf("want partial output (a proper prefix of 1 2 3), got %q", out)
	}

	g := s.ok("get_job", map[string]any{"job_id": id, "wait_s": 30})
	if str(g, "status") != "completed" || exitCode(t, g) != 0 {
		t.Fatalf("get_job wait_s 30: want completed/0, got %v", g)
	}

	all, rd := s.readAll(id)
	if all != "1\n2\n3\n" {
		t.Fatalf("read_output cursor 0 = %q, want %q", all, "1\n2\n3\n")
	}
	next := num(t, rd, "next_cursor")
	if next != float64(len("1\n2\n3\n")) {
		t.Errorf("next_cursor = %v, want %d", next, len("1\n2\n3\n"))
	}
	more := s.ok("read_output", map[string]any{"job_id": id, "cursor": next})
	if out := str(more, "output"); out != "" || more["has_more"] == true {
		t.Errorf("reading from next_cursor %v gave %q (has_more %v), want nothing", next, out, more["has_more"])
	}
	s.waitNoContainers(10 * time.Second)
}

func TestJobsBackgroundReturnsAtOnce(t *testing.T) {
	s := startServer(t)
	start := time.Now()
	r := s.ok("run_command", map[string]any{"command": "sleep 5", "background": true})
	took := time.Since(start)
	t.Logf("background run_command returned in %s", took)
	if took >= 500*time.Millisecond {
		t.Errorf("background run_command took %s, want < 0.5 s", took)
	}
	if st := str(r, "status"); st != "running" && st != "queued" {
		t.Fatalf("want running or queued, got %v", r)
	}
	if str(r, "job_id") == "" {
		t.Fatalf("no job_id: %v", r)
	}
}

func TestJobsReadOutputUntil(t *testing.T) {
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "sleep 2; echo READY; sleep 30", "background": true})
	id := str(r, "job_id")
	start := time.Now()
	rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "READY", "wait_s": 20})
	took := time.Since(start)
	if rd["matched"] != true {
		t.Fatalf("until READY did not match: %v", rd)
	}
	if !strings.Contains(str(rd, "output"), "READY") {
		t.Errorf("output %q does not hold READY", str(rd, "output"))
	}
	if took < 1500*time.Millisecond || took > 18*time.Second {
		t.Errorf("read_output until READY took %s, want between 1.5 s and its wait_s (20)", took)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL"})
}

func TestJobsTailLines(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "seq 1 1000"})
	if str(r, "status") != "completed" {
		t.Fatalf("want completed, got %v", r)
	}
	rd := s.ok("read_output", map[string]any{"job_id": str(r, "job_id"), "tail_lines": 2})
	if out := str(rd, "output"); out != "999\n1000\n" {
		t.Fatalf("tail_lines 2 = %q, want %q", out, "999\n1000\n")
	}
}

func TestJobsSendInput(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "cat", "background": true})
	id := str(r, "job_id")
	if st := str(r, "status"); st != "running" {
		t.Fatalf("want running, got %v", r)
	}
	in := s.ok("send_input", map[string]any{"job_id": id, "text": "hello", "enter": true, "until": "hello", "wait_s": 10})
	if !strings.Contains(str(in, "output"), "hello") {
		t.Fatalf("send_input hello: answer %q does not hold hello; result %v", str(in, "output"), in)
	}
	s.ok("send_input", map[string]any{"job_id": id, "eof": true})
	g := s.ok("get_job", map[string]any{"job_id": id, "wait_s": 5})
	if str(g, "status") != "completed" || exitCode(t, g) != 0 {
		t.Fatalf("after eof: want completed/0, got %v", g)
	}
	if all, _ := s.readAll(id); all != "hello\n" {
		t.Errorf("output = %q, want %q", all, "hello\n")
	}
}

func TestJobsKillJob(t *testing.T) {
	s := startServer(t)

	r := s.ok("run_command", map[string]any{"command": "sleep 1000", "background": true})
	id := str(r, "job_id")
	k := s.ok("kill_job", map[string]any{"job_id": id})
	if str(k, "status") != "killed" || str(k, "reason") != "requested" {
		t.Fatalf("kill_job sleep: want killed/requested, got %v", k)
	}
	if g := s.ok("get_job", map[string]any{"job_id": id}); str(g, "status") != "killed" || str(g, "reason") != "requested" {
		t.Fatalf("get_job after kill: want killed/requested, got %v", g)
	}

	// TERM is ignored by the main shell (no exec: the loop keeps bash alive),
	// so only removing the sandbox after the grace ends it.
	r = s.ok("run_command", map[string]any{"command": "trap '' TERM; echo trapped; while true; do sleep 1; done", "background": true})
	id = str(r, "job_id")
	// Bash installs the trap before the signal comes, however late it runs.
	if rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "trapped", "wait_s": 30}); rd["matched"] != true {
		t.Fatalf("the TERM-ignoring job never said trapped: %v", rd)
	}
	start := time.Now()
	k = s.ok("kill_job", map[string]any{"job_id": id, "grace_s": 2})
	took := time.Since(start)
	if took < 1900*time.Millisecond {
		t.Errorf("kill_job of a TERM-ignoring job took %s, want >= 2 s (the grace)", took)
	}
	if took > 15*time.Second {
		t.Errorf("kill_job of a TERM-ignoring job took %s, want about 2 s", took)
	}
	if str(k, "status") != "killed" || str(k, "reason") != "requested" {
		t.Fatalf("kill_job trap: want killed/requested, got %v", k)
	}
	s.waitNoContainers(10 * time.Second)
}

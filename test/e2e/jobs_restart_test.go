package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestJobsRecoverAfterCrash(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{
		"command":    "for i in $(seq 1 12); do echo line$i; sleep 1; done; exit 7",
		"background": true,
	})
	id := str(r, "job_id")
	rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "line2", "wait_s": 15})
	if rd["matched"] != true {
		t.Fatalf("line2 never came before the crash: %v", rd)
	}
	before := str(rd, "output")

	s.kill9()
	time.Sleep(3 * time.Second)
	s2 := startServerIn(t, s.stateDir)

	g := s2.ok("get_job", map[string]any{"job_id": id, "wait_s": 20})
	if str(g, "status") != "failed" || str(g, "reason") != "exit_code" || exitCode(t, g) != 7 {
		t.Fatalf("after restart: want failed/exit_code/7, got %v", g)
	}
	out, _ := s2.readAll(id)
	var want []string
	for i := 1; i <= 12; i++ {
		want = append(want, fmt.Sprintf("line%d", i))
	}
	if got := lines(out); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("output after restart:\n got %q\nwant %q", got, want)
	}
	if !strings.HasPrefix(out, before) {
		t.Errorf("output read before the crash %q is not a prefix of the whole %q", before, out)
	}
	s2.waitNoContainers(10 * time.Second)
}

func TestJobsListedAfterGracefulRestart(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ok := s.ok("run_command", map[string]any{"command": "echo alpha"})
	bad := s.ok("run_command", map[string]any{"command": "echo beta >&2; exit 2"})
	if str(ok, "status") != "completed" || str(bad, "status") != "failed" {
		t.Fatalf("want completed and failed, got %v and %v", ok, bad)
	}
	s.stop()

	s2 := startServerIn(t, s.stateDir)
	jobs := s2.jobList(nil)
	if len(jobs) != 2 {
		t.Fatalf("list_jobs after restart shows %d jobs, want 2: %v", len(jobs), jobs)
	}
	for _, c := range []struct {
		id, status, out string
		code            int
	}{{str(ok, "job_id"), "completed", "alpha\n", 0}, {str(bad, "job_id"), "failed", "beta\n", 2}} {
		j := findJob(jobs, c.id)
		if j == nil {
			t.Fatalf("job %s missing from list_jobs after restart: %v", c.id, jobs)
		}
		if str(j, "status") != c.status || exitCode(t, j) != c.code {
			t.Errorf("job %s after restart: %v, want %s/%d", c.id, j, c.status, c.code)
		}
		if out, _ := s2.readAll(c.id); out != c.out {
			t.Errorf("job %s output after restart = %q, want %q", c.id, out, c.out)
		}
	}
}

// A job that ends while the server is down is recorded with its real exit
// code and all its output when the server comes back.
func TestJobsEndedDuringOutage(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "echo before; sleep 2; echo after >&2; exit 3", "background": true})
	id := str(r, "job_id")
	s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "before", "wait_s": 10})
	s.kill9()
	time.Sleep(4 * time.Second) // the job ends meanwhile
	again := startServerIn(t, s.stateDir)
	rec := again.ok("get_job", map[string]any{"job_id": id, "wait_s": 20})
	if str(rec, "status") != "failed" || str(rec, "reason") != "exit_code" || num(t, rec, "exit_code") != 3 {
		t.Fatalf("want failed/exit_code 3, got %v", rec)
	}
	out := again.ok("read_output", map[string]any{"job_id": id, "cursor": 0})
	if str(out, "output") != "before\nafter\n" {
		t.Fatalf("output %q, want before and after", str(out, "output"))
	}
	again.waitNoContainers(10 * time.Second)
}

// With output.engine_log: none there is no engine log to read back, yet a
// running job is still adopted after a crash: its end and exit code are
// recorded and output printed after the restart is captured.
func TestJobsRecoverWithoutEngineLog(t *testing.T) {
	t.Parallel()
	env := policyEnv(t, "output:\n  engine_log: none\n")
	s := startServer(t, env)
	r := s.ok("run_command", map[string]any{"command": "for i in $(seq 1 10); do echo line$i; sleep 1; done; exit 4", "background": true})
	id := str(r, "job_id")
	s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "line2", "wait_s": 20})
	s.kill9()
	time.Sleep(2 * time.Second)
	again := startServerIn(t, s.stateDir, env)
	rec := again.ok("get_job", map[string]any{"job_id": id, "wait_s": 30})
	if str(rec, "status") != "failed" || str(rec, "reason") != "exit_code" || num(t, rec, "exit_code") != 4 {
		t.Fatalf("want failed/exit_code 4, got %v", rec)
	}
	out := str(again.ok("read_output", map[string]any{"job_id": id, "cursor": 0}), "output")
	if !strings.HasPrefix(out, "line1\nline2\n") || !strings.HasSuffix(out, "line10\n") {
		t.Fatalf("output %q: want the lines from before the crash and after the restart", out)
	}
	again.waitNoContainers(10 * time.Second)
}

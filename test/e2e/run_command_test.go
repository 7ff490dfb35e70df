package e2e

import (
	"strings"
	"testing"
	"time"
)

func TestRunCommandExitCodeAndStreams(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	if str(r, "status") != "failed" || str(r, "reason") != "exit_code" || num(t, r, "exit_code") != 3 {
		t.Fatalf("want failed/exit_code/3, got %v", r)
	}
	if str(r, "stdout") != "out\n" || str(r, "stderr") != "err\n" {
		t.Fatalf("stdout %q stderr %q", str(r, "stdout"), str(r, "stderr"))
	}
	r = s.ok("run_command", map[string]any{"command": "echo hello"})
	if str(r, "status") != "completed" || num(t, r, "exit_code") != 0 || str(r, "stdout") != "hello\n" {
		t.Fatalf("want completed hello, got %v", r)
	}
	s.waitNoContainers(10 * time.Second)
}

func TestRunCommandTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	start := time.Now()
	r := s.ok("run_command", map[string]any{"command": "sleep 1000", "timeout_s": 2})
	if took := time.Since(start); took > 12*time.Second {
		t.Errorf("timeout took %s, want it bounded by timeout_s 2 (well within 12 s)", took)
	}
	if str(r, "status") != "timed_out" {
		t.Fatalf("want timed_out, got %v", r)
	}
	s.waitNoContainers(5 * time.Second)
	if !strings.Contains(text(s.call("get_job", map[string]any{"job_id": str(r, "job_id")})), "timed_out") {
		t.Error("get_job does not say timed_out")
	}
}

// A cwd below /workspace exists, is writable and is where the command runs.
func TestRunCommandCwdBelowWorkspace(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "pwd; echo x > f && cat f", "cwd": "src/app"})
	if str(r, "status") != "completed" || str(r, "stdout") != "/workspace/src/app\nx\n" {
		t.Fatalf("cwd src/app: %v", r)
	}
	r = s.ok("run_command", map[string]any{"command": "echo $GREETING; cat", "env": map[string]any{"GREETING": "hi there"}, "stdin": "from stdin\n"})
	if str(r, "stdout") != "hi there\nfrom stdin\n" {
		t.Fatalf("env and stdin: %v", r)
	}
	// Without stdin, a command that reads it gets end-of-file, not a hang.
	start := time.Now()
	r = s.ok("run_command", map[string]any{"command": "cat; echo done", "timeout_s": 20})
	if str(r, "stdout") != "done\n" || time.Since(start) > 10*time.Second {
		t.Fatalf("cat without stdin: %v after %s", r, time.Since(start))
	}
}

package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/testutil"
)

// The hardening and isolation tests once more with the policy's
// `runtime: runsc` (gVisor), when the engine has that runtime registered
// (make gvisor registers it); skipped, saying so, when it does not.

func requireRunsc(t *testing.T) {
	t.Helper()
	testutil.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{json .Runtimes}}").Output()
	if err != nil || !strings.Contains(string(out), `"runsc"`) {
		t.Skip("the engine has no runsc runtime (gVisor): run `make gvisor` to install and register it; skipping the runsc re-runs")
	}
}

const runscPolicy = "runtime: runsc\n"

func TestGVisorJobRunsUnderRunsc(t *testing.T) {
	requireRunsc(t)
	s := startServer(t, policyEnv(t, runscPolicy))
	r := s.ok("run_command", map[string]any{"command": "cat /proc/version; uname -r"})
	if str(r, "status") != "completed" || !strings.Contains(str(r, "stdout"), "gvisor") {
		t.Fatalf("a job under runsc: %v", r)
	}
	// The engine says so too.
	bg := s.ok("run_command", map[string]any{"command": "sleep 30", "background": true})
	id := str(bg, "job_id")
	s.waitJob(id, "running", 30*time.Second)
	// The engine's record of the job's container (get_job names it).
	runtime := containerRuntime(t, "id="+jobContainer(t, s, id))
	if runtime != "runsc" {
		t.Errorf("the job's container runtime is %q, want runsc", runtime)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})
	// doctor says gVisor is there and works.
	out, err := exec.Command(binPath, "doctor", "--state-dir", t.TempDir()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "runsc works") {
		t.Errorf("doctor with runsc registered: %v\n%s", err, out)
	}
}

// TestGVisorThreadsStart: under runsc, whose seccomp answers EPERM where
// the engine's profile says ENOSYS, threads still start (clone3 answers
// ENOSYS, and glibc falls back to clone): Python's threading, node, and a
// workspace's plain execs.
func TestGVisorThreadsStart(t *testing.T) {
	requireRunsc(t)
	t.Parallel()
	s := startServer(t, policyEnv(t, runscPolicy))
	r := s.ok("run_command", map[string]any{"language": "python", "command": `python3 -c "import threading; t = threading.Thread(target=print, args=('thread ok',)); t.start(); t.join()"`})
	if str(r, "stdout") != "thread ok\n" {
		t.Fatalf("a Python thread under runsc: %v", r)
	}
	r = s.ok("run_script", map[string]any{"language": "javascript", "code": "console.log('node ok')"})
	if str(r, "stdout") != "node ok\n" {
		t.Fatalf("node under runsc: %v", r)
	}
}

func TestGVisorSandboxHardening(t *testing.T) {
	requireRunsc(t)
	s := startServer(t, policyEnv(t, runscPolicy), "SANDBOXER_E2E_CANARY=leak")
	r := fRun(s, map[string]any{"command": fHardeningProbe + fCgroupProbe, "env": map[string]any{"PROBE_VAR": "agent-set"}})
	if str(r, "status") != "completed" {
		t.Fatalf("hardening probe under runsc did not complete: %v", r)
	}
	t.Logf("probe output:\n%s\nstderr:\n%s", str(r, "stdout"), str(r, "stderr"))
	// gVisor is its own kernel: what a process sees of its confinement is
	// gVisor's emulation, not the host's. Seccomp shows 0 and NoNewPrivs is
	// absent (the host's filters apply to gVisor's Sentry, outside the
	// sandbox), the read-only root refuses writes with EACCES instead of
	// EROFS, /sys/class/net does not exist and a connect fails with "No route
	// to host". The engine-side profile (caps, no-new-privileges, read-only
	// root, limits) is the same container config as under runc
	// (TestFoundationSandboxHardening checks it).
	f := fFields(str(r, "stdout"))
	if f["uid"] == "" || f["uid"] == "0" {
		t.Errorf("uid %q", f["uid"])
	}
	if f["CapEff"] != "0000000000000000" {
		t.Errorf("CapEff %q", f["CapEff"])
	}
	if !strings.HasPrefix(f["rootfs_opts"], "ro,") {
		t.Errorf("root mount options %q, want ro", f["rootfs_opts"])
	}
	for _, k := range []string{"write_root", "write_etc"} {
		if f[k] == "written" {
			t.Errorf("%s: the read-only root took a write", k)
		}
	}
	if f["write_tmp"] != "written" {
		t.Errorf("/tmp not writable: %q", f["write_tmp"])
	}
	if f["connect"] == "connected" || f["routes"] != "0" {
		t.Errorf("network under runsc: connect %q, routes %q", f["connect"], f["routes"])
	}
	if f["docker_sock"] != "" || f["leaked_env"] != "" || f["probe_var"] != "agent-set" {
		t.Errorf("socket %q, leaked env %q, probe var %q", f["docker_sock"], f["leaked_env"], f["probe_var"])
	}
	s.waitNoContainers(10 * time.Second)
}

func TestGVisorIsolationAndTimeout(t *testing.T) {
	requireRunsc(t)
	s := startServer(t, policyEnv(t, runscPolicy))
	first := s.ok("run_command", map[string]any{
		"command":    "echo secret > /tmp/secret; echo secret > /dev/shm/secret; echo ready; exec sleep 60",
		"background": true,
	})
	s.ok("read_output", map[string]any{"job_id": str(first, "job_id"), "cursor": 0, "until": "ready", "wait_s": 30})
	r := s.ok("run_command", map[string]any{"command": "ls /tmp /dev/shm; ps -eo comm | grep -c sleep || true"})
	if strings.Contains(str(r, "stdout"), "secret") || !strings.HasSuffix(str(r, "stdout"), "0\n") {
		t.Fatalf("under runsc the second job sees the first one's files or processes:\n%s", str(r, "stdout"))
	}
	s.ok("kill_job", map[string]any{"job_id": str(first, "job_id"), "signal": "KILL"})
	start := time.Now()
	r = s.ok("run_command", map[string]any{"command": "trap '' TERM; setsid sleep 100 & sleep 100", "timeout_s": 2, "wait_s": 30})
	if str(r, "status") != "timed_out" || time.Since(start) > 15*time.Second {
		t.Fatalf("timeout under runsc: %v after %v", r, time.Since(start))
	}
	s.waitNoContainers(15 * time.Second)
}

package e2e

import (
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fHardeningProbe prints what a sandboxed process can see about its own
// confinement, one key=value per line.
const fHardeningProbe = `
w() { if (echo x > "$1") 2>/tmp/werr; then echo "$2=written"; else echo "$2=$(tr '\n' ' ' </tmp/werr)"; fi; }
echo "uid=$(id -u)"
grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | sed 's/:[[:space:]]*/=/'
echo "rootfs_opts=$(awk '$2=="/"{print $4}' /proc/mounts)"
w /sandboxer-probe write_root
w /etc/sandboxer-probe write_etc
w /tmp/sandboxer-probe write_tmp
echo "netifs=$(ls /sys/class/net | tr '\n' ' ')"
echo "routes=$(tail -n +2 /proc/net/route | wc -l)"
if (timeout 5 bash -c 'exec 3<>/dev/tcp/1.1.1.1/80') 2>/tmp/nerr; then echo "connect=connected"; else echo "connect=$(tr '\n' ' ' </tmp/nerr)"; fi
echo "docker_sock=$(ls -d /var/run/docker.sock /run/docker.sock 2>/dev/null | tr '\n' ' ')"
echo "leaked_env=$(env | grep -E '^(DOCKER_[A-Z_]*|SANDBOXER_[A-Z0-9_]*)=' | cut -d= -f1 | tr '\n' ' ')"
echo "probe_var=$PROBE_VAR"
`

// fCgroupProbe prints the memory, pids and CPU limits of the sandbox's own
// cgroup, for cgroup v1 and v2.
const fCgroupProbe = `
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  echo "cgroup=v2"
  echo "mem=$(cat /sys/fs/cgroup/memory.max)"
  echo "pids=$(cat /sys/fs/cgroup/pids.max)"
  echo "cpu=$(cat /sys/fs/cgroup/cpu.max)"
else
  echo "cgroup=v1"
  echo "mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"
  echo "pids=$(cat /sys/fs/cgroup/pids/pids.max)"
  echo "cpu=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
fi
`

// fCheckCgroup compares the probe's cgroup lines with the expected limits.
func fCheckCgroup(t *testing.T, what string, f map[string]string, memBytes, pids int64, cpus float64) {
	t.Helper()
	if f["mem"] != strconv.FormatInt(memBytes, 10) {
		t.Errorf("%s: %s memory limit in the sandbox is %q, want %d (%d MiB)", what, f["cgroup"], f["mem"], memBytes, memBytes>>20)
	}
	if f["pids"] != strconv.FormatInt(pids, 10) {
		t.Errorf("%s: %s pids limit in the sandbox is %q, want %d", what, f["cgroup"], f["pids"], pids)
	}
	quota, period, ok := strings.Cut(f["cpu"], " ")
	q, err1 := strconv.ParseFloat(quota, 64)
	p, err2 := strconv.ParseFloat(period, 64)
	if !ok || err1 != nil || err2 != nil || p <= 0 {
		t.Errorf("%s: %s CPU quota/period in the sandbox is %q, want a quota of %v CPUs (not unlimited)", what, f["cgroup"], f["cpu"], cpus)
		return
	}
	if got := q / p; math.Abs(got-cpus) > 0.001 {
		t.Errorf("%s: %s CPU quota/period in the sandbox is %q = %v CPUs, want %v", what, f["cgroup"], f["cpu"], got, cpus)
	}
}

func TestFoundationSandboxHardening(t *testing.T) {
	dockerHost := os.Getenv("DOCKER_HOST")
	if dockerHost == "" {
		dockerHost = "unix:///var/run/docker.sock"
	}
	// The server's own environment carries DOCKER_HOST and SANDBOXER_*
	// variables: none of them may reach a sandbox.
	s := startServer(t, "DOCKER_HOST="+dockerHost, "SANDBOXER_MAX_JOBS=4", "SANDBOXER_E2E_CANARY=leak")

	r := fRun(s, map[string]any{"command": fHardeningProbe + fCgroupProbe, "env": map[string]any{"PROBE_VAR": "agent-set"}})
	if str(r, "status") != "completed" {
		t.Fatalf("hardening probe did not complete: %v", r)
	}
	out := str(r, "stdout")
	f := fFields(out)
	t.Logf("probe output:\n%s\nstderr:\n%s", out, str(r, "stderr"))

	fCheckHardening(t, f)
	fCheckCgroup(t, "policy defaults", f, 512<<20, 256, 1)

	r = fRun(s, map[string]any{"command": fCgroupProbe, "memory_mb": 256, "cpus": 0.5, "pids": 64})
	if str(r, "status") != "completed" {
		t.Fatalf("cgroup probe with requested limits did not complete: %v", r)
	}
	fCheckCgroup(t, "memory_mb 256, cpus 0.5, pids 64", fFields(str(r, "stdout")), 256<<20, 64, 0.5)
	s.waitNoContainers(10 * time.Second)
}

func TestFoundationTimeoutRemovesContainer(t *testing.T) {
	s := startServer(t)
	start := time.Now()
	r := fRun(s, map[string]any{"command": "sleep 1000", "timeout_s": 2})
	took := time.Since(start)
	fNoContainers(t, s, "right after the timed-out call returned")
	if str(r, "status") != "timed_out" || str(r, "reason") != "timeout" {
		t.Errorf("sleep 1000 with timeout_s 2: want status timed_out reason timeout, got %v", r)
	}
	if took < 2*time.Second || took > 10*time.Second {
		t.Errorf("timeout_s 2 returned after %s, want between 2 s and 10 s", took)
	}
	g := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
	if str(g, "status") != "timed_out" {
		t.Errorf("get_job status %q, want timed_out: %v", str(g, "status"), g)
	}
}

func TestFoundationOOMKilled(t *testing.T) {
	s := startServer(t)
	// Each chunk is written (b'x'*n fills it), so the pages are really used.
	const hog = `python3 -c "a=[b'x'*(10<<20) for _ in range(1000)]"`

	r := fRun(s, map[string]any{"language": "python", "command": hog, "memory_mb": 64})
	if str(r, "status") != "failed" || str(r, "reason") != "oom_killed" {
		t.Errorf("python allocating 10 GB under memory_mb 64: want status failed reason oom_killed, got %v", r)
	}

	// The hog is a child of the shell, which survives it and exits 0: the
	// engine's OOM flag covers any OOM kill in the container.
	r = fRun(s, map[string]any{"language": "python", "command": hog + "; echo after", "memory_mb": 64})
	if !strings.Contains(str(r, "stdout"), "after") {
		t.Errorf("the shell should have outlived its OOM-killed child and printed 'after': %v", r)
	}
	if str(r, "status") != "failed" || str(r, "reason") != "oom_killed" {
		t.Errorf("shell whose child was OOM-killed: want status failed reason oom_killed, got status %q reason %q exit_code %v",
			str(r, "status"), str(r, "reason"), r["exit_code"])
	}
	s.waitNoContainers(10 * time.Second)
}

func TestFoundationForkBomb(t *testing.T) {
	s := startServer(t)
	start := time.Now()
	// The trailing sleep keeps the shell (the job's main process) alive so the
	// bomb runs against the pids limit until the timeout.
	r := fRun(s, map[string]any{"command": "bomb(){ bomb|bomb& }; bomb; sleep 60", "timeout_s": 5})
	took := time.Since(start)
	t.Logf("fork bomb: %s/%s in %s", str(r, "status"), str(r, "reason"), took.Round(100*time.Millisecond))
	if st := str(r, "status"); st != "timed_out" && st != "failed" {
		t.Errorf("fork bomb: want status timed_out or failed, got %v", r)
	}
	if took > 10*time.Second {
		t.Errorf("fork bomb with timeout_s 5 took %s to end, want <= 10 s", took)
	}
	s.waitNoContainers(10 * time.Second)

	r = fRun(s, map[string]any{"command": "echo ok"})
	if str(r, "status") != "completed" || str(r, "stdout") != "ok\n" {
		t.Errorf("echo ok after the fork bomb: want completed 'ok', got %v", r)
	}
	s.waitNoContainers(10 * time.Second)
}

// fCheckHardening checks what fHardeningProbe printed (PROBE_VAR=agent-set given).
func fCheckHardening(t *testing.T, f map[string]string) {
	t.Helper()
	if f["uid"] == "" || f["uid"] == "0" {
		t.Errorf("id -u in the sandbox is %q, want a non-root uid", f["uid"])
	}
	if f["CapEff"] != "0000000000000000" {
		t.Errorf("CapEff in the sandbox is %q, want 0000000000000000 (all capabilities dropped)", f["CapEff"])
	}
	if f["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs in the sandbox is %q, want 1", f["NoNewPrivs"])
	}
	if f["Seccomp"] != "2" {
		t.Errorf("Seccomp in the sandbox is %q, want 2 (filter mode)", f["Seccomp"])
	}

	if !strings.HasPrefix(f["rootfs_opts"], "ro") {
		t.Errorf("the root filesystem is mounted with %q, want read-only (ro)", f["rootfs_opts"])
	}
	for _, k := range []string{"write_root", "write_etc"} {
		if !strings.Contains(f[k], "Read-only file system") {
			t.Errorf("%s: writing there gave %q, want it refused with 'Read-only file system'", k, f[k])
		}
	}
	if f["write_tmp"] != "written" {
		t.Errorf("writing to /tmp (a tmpfs) gave %q, want it to work", f["write_tmp"])
	}

	if f["netifs"] != "lo" {
		t.Errorf("network interfaces in the sandbox: %q, want only lo (network none)", f["netifs"])
	}
	if f["routes"] != "0" {
		t.Errorf("the sandbox has %s route(s), want none (network none)", f["routes"])
	}
	// With network none there is no route at all, so the connect fails at
	// once with ENETUNREACH: not a DNS problem, not a firewall, not a timeout.
	if !strings.Contains(f["connect"], "Network is unreachable") {
		t.Errorf("connecting to 1.1.1.1:80 gave %q, want it to fail with 'Network is unreachable'", f["connect"])
	}

	if f["docker_sock"] != "" {
		t.Errorf("a Docker socket is visible in the sandbox: %q", f["docker_sock"])
	}
	if f["leaked_env"] != "" {
		t.Errorf("server environment leaked into the sandbox: %q", f["leaked_env"])
	}
	if f["probe_var"] != "agent-set" {
		t.Errorf("env given by the agent did not arrive: PROBE_VAR=%q, want agent-set", f["probe_var"])
	}
}

package e2e

import (
	"context"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
)

// warmIDs are the ids of this server's warm sandboxes (started, no job yet).
func (s *server) warmIDs() []string {
	var ids []string
	for _, c := range s.allContainers() {
		if c.Kind == sandbox.KindPool && c.JobID == "" && c.Running {
			ids = append(ids, c.ID)
		}
	}
	return ids
}

// waitWarm waits until at least n warm sandboxes wait for a job.
func (s *server) waitWarm(n int) []string {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ids := s.warmIDs()
		if len(ids) >= n {
			return ids
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("only %d warm sandboxes after 30 s, want %d\nstderr:\n%s", len(ids), n, tail(s.stderr.String(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// servedWarm says whether a job ran in a container that was waiting in the pool.
func servedWarm(warm []string, job map[string]any) bool {
	id, _ := job["container_id"].(string)
	for _, w := range warm {
		if id != "" && w == id {
			return true
		}
	}
	return false
}

// Each warm job gets a container no other job used: different hostnames and
// ids, and a file one job writes in /tmp is not there for the next.
func TestPoolJobsNeverShareASandbox(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	warm := s.waitWarm(2)
	run := func(cmd string) map[string]any {
		r := s.ok("run_command", map[string]any{"command": cmd})
		return s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
	}
	first := run("hostname; echo secret > /tmp/left-behind; ls /tmp")
	warm = append(warm, s.waitWarm(2)...)
	second := run("hostname; ls /tmp; cat /tmp/left-behind 2>&1 || true")
	if !servedWarm(warm, first) || !servedWarm(warm, second) {
		t.Fatalf("jobs were not served from the pool: %v / %v, warm %v", first["container_id"], second["container_id"], warm)
	}
	if first["container_id"] == second["container_id"] {
		t.Fatal("two jobs ran in the same container")
	}
	out1, _ := s.readAll(str(first, "job_id"))
	out2, _ := s.readAll(str(second, "job_id"))
	if lines(out1)[0] == lines(out2)[0] {
		t.Errorf("both jobs saw hostname %q", lines(out1)[0])
	}
	if strings.Contains(out2, "secret") {
		t.Errorf("the second job saw the first one's file:\n%s", out2)
	}
}

// A warm job has every hardening of a cold one, and the limits it asks for.
func TestPoolHardening(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	warm := s.waitWarm(2)
	r := fRun(s, map[string]any{"command": fHardeningProbe + fCgroupProbe, "env": map[string]any{"PROBE_VAR": "agent-set"}})
	rec := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
	if !servedWarm(warm, rec) {
		t.Fatalf("not served warm: %v", rec["container_id"])
	}
	f := fFields(str(r, "stdout"))
	fCheckHardening(t, f)
	fCheckCgroup(t, "warm, policy defaults", f, 512<<20, 256, 1)

	warm = s.waitWarm(2)
	r = fRun(s, map[string]any{"command": fCgroupProbe, "memory_mb": 256, "cpus": 0.5, "pids": 64})
	if rec := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")}); !servedWarm(warm, rec) {
		t.Fatalf("a job with its own limits was not served warm: %v", rec["container_id"])
	}
	fCheckCgroup(t, "warm, memory_mb 256, cpus 0.5, pids 64", fFields(str(r, "stdout")), 256<<20, 64, 0.5)
}

// A job asking for less memory than the pool's default is held to it, warm
// too: the limit is set on the container it takes.
func TestPoolMemoryLimitHolds(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	warm := s.waitWarm(3) // bash 2, python 1
	const hog = `python3 -c "a=[b'x'*(10<<20) for _ in range(1000)]"`
	r := s.ok("run_command", map[string]any{"command": hog, "language": "python", "memory_mb": 64})
	rec := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
	if !servedWarm(warm, rec) {
		t.Fatalf("not served warm: %v", rec["container_id"])
	}
	if str(r, "status") != "failed" || str(r, "reason") != "oom_killed" {
		t.Fatalf("python allocating 10 GB under memory_mb 64, warm: %v", r)
	}
	if peak := num(t, rec["usage"].(map[string]any), "peak_memory_bytes"); peak > 64<<20 {
		t.Errorf("peak memory %.0f over the 64 MiB limit", peak)
	}
}

// usage: CPU and peak memory of the whole tree, and wall time.
func TestUsageFigures(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	usage := func(r map[string]any) map[string]any {
		u, ok := r["usage"].(map[string]any)
		if !ok {
			t.Fatalf("no usage in %v", r)
		}
		return u
	}
	within := func(what string, got, want, tol float64) {
		if math.Abs(got-want) > tol*want {
			t.Errorf("%s = %.0f, want %.0f ±%.0f%%", what, got, want, tol*100)
		}
	}
	// 200 MiB allocated and touched: by the main process, then by a child.
	alloc := `python3 -c 'b = bytearray(200 << 20); b[::4096] = b"x" * len(b[::4096]); import time; time.sleep(0.2)'`
	for _, cmd := range []string{alloc, "bash -c \"" + strings.ReplaceAll(alloc, `"`, `\"`) + "\"; true"} {
		r := s.ok("run_command", map[string]any{"command": cmd, "language": "python"})
		if str(r, "status") != "completed" {
			t.Fatalf("%s: %v", cmd, r)
		}
		within("peak_memory_bytes of "+cmd, num(t, usage(r), "peak_memory_bytes"), 200<<20, 0.15)
	}
	// A loop that burns exactly one second of CPU (RLIMIT_CPU ends it), so
	// the figure does not depend on how busy the machine is.
	r := s.ok("run_command", map[string]any{"command": "bash -c 'ulimit -t 1; while :; do :; done'; true"})
	u := usage(r)
	within("cpu_ms of a 1 s busy loop", num(t, u, "cpu_ms"), 1000, 0.2)
	within("wall_ms against duration_ms", num(t, u, "wall_ms"), num(t, r, "duration_ms"), 0.25)
}

// A server killed with SIGKILL and never restarted: the job still stops at
// its timeout, inside its sandbox.
func TestDeadlineHoldsWithoutServer(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "sleep 600", "timeout_s": 5, "background": true})
	// "running" holds while the sandbox may still be starting: wait for its container.
	rec := s.waitJob(str(r, "job_id"), "running", 30*time.Second)
	for deadline := time.Now().Add(30 * time.Second); str(rec, "container_id") == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		rec = s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
	}
	cid := str(rec, "container_id")
	s.kill9()
	cli := engineClient(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cli.ContainerInspect(context.Background(), cid, client.ContainerInspectOptions{})
		if err != nil || info.Container.State == nil || !info.Container.State.Running {
			break // stopped (or gone): the job's process is gone
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's container still runs 10 s after its server died (timeout_s 5)")
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Leave nothing behind: a server on the same state directory sweeps it.
	again := startServerIn(t, s.stateDir)
	again.waitNoContainers(15 * time.Second)
}

// The pool refills after use; restarting and shutting down leave no warm
// sandbox behind; one removed from outside does not break the next job.
func TestPoolLifecycle(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	before := s.waitWarm(3) // bash 2, python 1
	r := s.ok("run_command", map[string]any{"command": "true"})
	taken := str(s.ok("get_job", map[string]any{"job_id": str(r, "job_id")}), "container_id")
	if !slices.Contains(before, taken) {
		t.Fatalf("the job was not served warm: %s not in %v", taken, before)
	}
	var after []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		after = s.warmIDs()
		if len(after) >= 3 && !slices.Contains(after, taken) {
			break // the taken one went, a new one waits in its place
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not replace the sandbox a job took: before %v, now %v", before, after)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cli := engineClient(t)
	for _, id := range after {
		if _, err := cli.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.ok("run_command", map[string]any{"command": "echo still fine"}); str(r, "stdout") != "still fine\n" {
		t.Fatalf("after the pool was removed from outside: %v", r)
	}
	s.waitWarm(2)

	// A crash leaves warm sandboxes; the next server removes them, not adopts them.
	dead := s.serverID()
	s.kill9()
	again := startServerIn(t, s.stateDir)
	deadline = time.Now().Add(15 * time.Second)
	for {
		left := 0
		for _, c := range again.allContainers() {
			if c.Server == dead {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d warm sandboxes of the crashed server left after 15 s", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	again.waitWarm(2)
	again.stop()
	if cs := again.allContainers(); len(cs) != 0 {
		t.Fatalf("%d sandboxes left after a graceful shutdown: %+v", len(cs), cs)
	}
}

func engineClient(t *testing.T) *client.Client {
	t.Helper()
	rt, err := docker.New((&config.Config{}).Instance())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt.Client()
}

var serverIDPattern = regexp.MustCompile(`"server":"([0-9a-f-]{36})"`)

// serverID is the server's identity, as it logged it at start.
func (s *server) serverID() string {
	s.t.Helper()
	m := serverIDPattern.FindStringSubmatch(s.stderr.String())
	if m == nil {
		s.t.Fatal("the server did not log its identity")
	}
	return m[1]
}

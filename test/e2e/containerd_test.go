package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/containerd"
)

// The server with `backend: containerd` on the containerd of
// scripts/containerd.sh: `make test-containerd` runs these with
// SANDBOXER_TEST_CONTAINERD=1.

// containerdPolicy is the policy of these tests: one warm bash sandbox.
const containerdPolicy = `backend: containerd
pool:
  size: {bash: 1, python: 0}
  max_total: 2
`

// containerdEnv skips outside make test-containerd, and otherwise returns
// the environment of a server on containerd (with more policy appended).
func containerdEnv(t *testing.T, extra string) []string {
	t.Helper()
	if os.Getenv("SANDBOXER_TEST_CONTAINERD") != "1" {
		t.Skip("skipping: containerd tests run under `make test-containerd` (SANDBOXER_TEST_CONTAINERD=1)")
	}
	return []string{policyEnv(t, containerdPolicy+extra)}
}

// sandboxes lists this server instance's containers on containerd; warm ones too when all.
func (s *server) sandboxes(all bool) []sandbox.Container {
	s.t.Helper()
	rt, err := containerd.New((&config.Config{StateDir: s.stateDir}).Instance(), containerd.Config{})
	if err != nil {
		s.t.Fatal(err)
	}
	defer rt.Close()
	return s.listOn(rt, all)
}

// waitNoSandboxes waits until the instance has no containers left (warm ones too when all).
func (s *server) waitNoSandboxes(all bool, within time.Duration) {
	s.waitNoneOn(s.sandboxes, all, within)
}

// listOn lists what rt (a runtime of this server's instance) holds: jobs'
// sandboxes, and warm ones too when all.
func (s *server) listOn(rt sandbox.Runtime, all bool) []sandbox.Container {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := rt.List(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	out := cs[:0]
	for _, c := range cs {
		if all || c.Kind != sandbox.KindPool || c.JobID != "" {
			out = append(out, c)
		}
	}
	return out
}

// waitNoneOn waits until list (all or jobs' only) is empty.
func (s *server) waitNoneOn(list func(all bool) []sandbox.Container, all bool, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		cs := list(all)
		if len(cs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d sandboxes still present after %s: %+v", len(cs), within, cs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestContainerdCore(t *testing.T) {
	s := startServer(t, containerdEnv(t, "")...)

	// A job's exit code, both streams and its stdin.
	r := s.ok("run_command", map[string]any{"command": "cat; echo to-stderr >&2; exit 3", "stdin": "from-stdin\n"})
	if str(r, "status") != "failed" || exitCode(t, r) != 3 || str(r, "stdout") != "from-stdin\n" || str(r, "stderr") != "to-stderr\n" {
		t.Fatalf("run_command with stdin: %v", r)
	}
	// A script in another language (a cold sandbox of its image).
	sc := s.ok("run_script", map[string]any{"language": "python", "code": "print(6*7)"})
	if str(sc, "status") != "completed" || str(sc, "stdout") != "42\n" {
		t.Fatalf("run_script python: %v", sc)
	}

	// Hardening, read from inside.
	f := hardeningFromInside(t, s)
	if f["connect"] == "connected" || f["connect"] == "" {
		t.Errorf("a connect to 1.1.1.1:80 from the sandbox: %q", f["connect"])
	}
	// Limits: memory (no swap), pids, open files, file size, no core dumps.
	lim := s.ok("run_command", map[string]any{"command": `ulimit -n; ulimit -f; ulimit -c; cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max`,
		"memory_mb": 256})
	if got := strings.Fields(str(lim, "stdout")); len(got) != 5 || got[2] != "0" || got[3] != "268435456" {
		t.Errorf("limits inside (nofile, fsize, core, memory, pids): %q", str(lim, "stdout"))
	}

	// A background job: output read while it runs, then killed.
	bg := s.ok("run_command", map[string]any{"command": "i=0; while :; do i=$((i+1)); echo tick$i; sleep 0.2; done", "background": true})
	id := str(bg, "job_id")
	rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "tick3", "wait_s": 20})
	if rd["matched"] != true {
		t.Fatalf("background output: %v", rd)
	}
	k := s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})
	if str(k, "status") != "killed" {
		t.Fatalf("kill_job: %v", k)
	}

	// The job's deadline.
	to := s.ok("run_command", map[string]any{"command": "sleep 1000", "timeout_s": 2})
	if str(to, "status") != "timed_out" {
		t.Fatalf("want timed_out, got %v", to)
	}

	// An interactive session with a terminal.
	sess := s.startSession(map[string]any{"command": "bash", "until": `\$ $`})
	sid := str(sess, "job_id")
	out, _ := s.typeLine(sid, "echo sum=$((6*7))", "until", `sum=42`)
	if !strings.Contains(out, "sum=42") {
		t.Fatalf("session answer: %q", out)
	}
	s.ok("kill_job", map[string]any{"job_id": sid, "signal": "KILL", "grace_s": 0})

	// What the backend lacks is refused as a sentence naming it.
	if txt := text(s.call("create_workspace", map[string]any{"name": "w"})); !strings.Contains(txt, "backend: containerd") {
		t.Errorf("create_workspace on containerd: %s", txt)
	}

	// The warm pool keeps a sandbox through the runtime's Warmer: a job runs in it.
	served := false
	for try := 0; try < 10 && !served; try++ {
		warm := s.waitWarmOn(s.sandboxes)
		r = s.ok("run_command", map[string]any{"command": "echo warm"})
		g := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
		served = str(g, "container_id") == warm
		if !served {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if !served {
		t.Errorf("no job ran in a warm sandbox in 10 tries\nstderr:\n%s", tail(s.stderr.String(), 3000))
	}

	s.waitNoSandboxes(false, 30*time.Second)
	s.stop()
	s.waitNoSandboxes(true, 30*time.Second)
}

// waitWarmOn waits for a warm sandbox among list's and returns its id.
func (s *server) waitWarmOn(list func(all bool) []sandbox.Container) string {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for _, c := range list(true) {
			if c.Kind == sandbox.KindPool && c.JobID == "" && c.Running {
				return c.ID
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no warm sandbox after 60 s\nstderr:\n%s", tail(s.stderr.String(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A job survives a SIGKILLed server: the next one adopts its container and
// reads what it printed meanwhile from its output file.
func TestContainerdRestartAdoption(t *testing.T) {
	env := containerdEnv(t, "")
	adoption(t, func(s *server) {
		s.waitNoSandboxes(false, 30*time.Second)
		s.stop()
		s.waitNoSandboxes(true, 30*time.Second)
	}, env...)
}

// doctor on backend containerd names the socket, finds the images and
// reads a sandbox's hardening from inside.
func TestContainerdDoctor(t *testing.T) {
	env := containerdEnv(t, "")
	out, err := runBin(t, env, "doctor", "--state-dir", t.TempDir())
	if err != nil || !strings.Contains(out, "all checks passed") || !strings.Contains(out, "namespace sandboxer") ||
		!strings.Contains(out, "interfaces=lo") || !strings.Contains(out, "default_route=0") {
		t.Fatalf("doctor on containerd: %v\n%s", err, out)
	}
}

// A granted host directory is mounted read-only: readable, not writable,
// and its links do not reach the host.
func TestContainerdMounts(t *testing.T) {
	src, _ := calcFixture(t)
	env := containerdEnv(t, "mounts:\n  - {name: calc, source: "+src+"}\n")
	s := startServer(t, env...)
	r := s.ok("run_command", map[string]any{"mounts": []any{"calc"}, "command": `cd /mnt/calc && head -1 calc.go
cat secret-link 2>&1 | grep -c HOST-SECRET; echo x > new 2>/dev/null && echo WROTE; echo x >> calc.go 2>/dev/null && echo APPENDED; true`})
	out := str(r, "stdout")
	if !strings.HasPrefix(out, "package calc\n") || strings.Contains(out, "WROTE") || strings.Contains(out, "APPENDED") || !strings.Contains(out, "\n0\n") {
		t.Fatalf("granted mount on containerd: %v", r)
	}
	s.waitNoSandboxes(false, 30*time.Second)
}

// network: egress on backend containerd: the sandboxes have loopback only,
// so a job's way out is the tunnel-only exec the server opens beside it
// (127.0.0.1:3128 inside), as on Kubernetes; the proxy, its allowlist and
// its audit are the same as on Docker.
func TestContainerdEgress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the mirror") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	s := startServer(t, containerdEnv(t, fmt.Sprintf(`network: egress
egress:
  allow: ["mirror.sbx.test:%[1]s"]
  hosts:
    mirror.sbx.test: 127.0.0.1
`, port))...)

	// A cold python job: the listed host, one off the list, CONNECT to both
	// and a raw address, and no direct route.
	r := s.ok("run_command", map[string]any{"command": k8sEgressCommand(port), "language": "python", "timeout_s": 120})
	if out := str(r, "stdout"); str(r, "status") != "completed" || out != k8sEgressWant(port) {
		t.Fatalf("egress probe on containerd: got\n%s\nwant\n%s\nrecord: %v\nstderr:\n%s", out, k8sEgressWant(port), r, tail(s.stderr.String(), 3000))
	}
	allowed, refused := 0, 0
	for _, e := range egressAudit(t, s) {
		if e["job_id"] == str(r, "job_id") {
			switch e["decision"] {
			case "allowed":
				allowed++
			case "refused":
				refused++
			}
		}
	}
	if allowed != 2 || refused != 2 {
		t.Errorf("audit: %d allowed, %d refused, want 2 and 2: %v", allowed, refused, egressAudit(t, s))
	}

	// egress: [] is no network at all: no proxy variable, no tunnel.
	r = s.ok("run_command", map[string]any{"language": "python", "egress": []any{}, "timeout_s": 60,
		"command": `echo "proxy=${HTTPS_PROXY:-}"; python3 -c "import socket; socket.create_connection(('127.0.0.1', 3128), timeout=5)" 2>/dev/null && echo tunnel || echo "no tunnel"`})
	if out := str(r, "stdout"); out != "proxy=\nno tunnel\n" {
		t.Errorf("a job with egress: []: %v", r)
	}

	// A job in a warm sandbox (bash): the tunnel and the grant are the job's.
	served := false
	for try := 0; try < 10 && !served; try++ {
		warm := s.waitWarmOn(s.sandboxes)
		r = s.ok("run_command", map[string]any{"command": k8sBashProbe + "get mirror.sbx.test:" + port + "; get other.sbx.test:" + port, "timeout_s": 60})
		if want := "mirror.sbx.test:" + port + " 200 hello from the mirror\nother.sbx.test:" + port + " 403\n"; str(r, "stdout") != want {
			t.Fatalf("an egress job in bash: %v, want %q\nstderr:\n%s", r, want, tail(s.stderr.String(), 3000))
		}
		served = str(s.ok("get_job", map[string]any{"job_id": str(r, "job_id")}), "container_id") == warm
	}
	if !served {
		t.Errorf("no egress job ran in a warm sandbox in 10 tries")
	}
	s.waitNoSandboxes(false, 30*time.Second)
}

// Secrets on backend containerd: the proxy behind the sandbox's tunnel
// swaps the placeholder for the value at the bound host only.
func TestContainerdSecrets(t *testing.T) {
	containerdEnv(t, "") // skips outside make test-containerd
	s := secretsThroughTunnel(t, containerdPolicy)
	s.waitNoSandboxes(false, 30*time.Second)
}

package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Workspaces end to end: named, persistent sandboxes, jobs inside them.

// wsRun runs a command in a workspace and returns its result.
func (s *server) wsRun(ws, command string, extra ...any) map[string]any {
	s.t.Helper()
	args := map[string]any{"command": command, "workspace": ws}
	for i := 0; i+1 < len(extra); i += 2 {
		args[extra[i].(string)] = extra[i+1]
	}
	return s.ok("run_command", args)
}

// wsOut runs a command in a workspace that must succeed and returns its stdout.
func (s *server) wsOut(ws, command string) string {
	s.t.Helper()
	r := s.wsRun(ws, command)
	if str(r, "status") != "completed" {
		s.t.Fatalf("%q in workspace %s: %v", command, ws, r)
	}
	return str(r, "stdout")
}

// wsEngineObjects counts the containers and volumes the engine holds for a workspace name.
func wsEngineObjects(t *testing.T, name string) (containers, volumes int) {
	t.Helper()
	count := func(args ...string) int {
		out, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %v: %v: %s", args, err, out)
		}
		return len(strings.Fields(string(out)))
	}
	f := "label=dev.sandboxer.workspace=" + name
	return count("ps", "-aq", "--filter", f), count("volume", "ls", "-q", "--filter", f)
}

// createWS creates a workspace that the test deletes at its end (if still there).
func (s *server) createWS(name string, args map[string]any) map[string]any {
	s.t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	args["name"] = name
	r := s.ok("create_workspace", args)
	cleanupWorkspace(s.t, name)
	return r
}

// cleanupWorkspace removes, at the test's end, what is left of a workspace
// through the engine, whatever server runs then.
func cleanupWorkspace(t *testing.T, name string) {
	t.Cleanup(func() {
		_ = exec.Command("sh", "-c", fmt.Sprintf(
			"docker rm -f $(docker ps -aq --filter label=dev.sandboxer.workspace=%[1]s) 2>/dev/null; docker volume rm $(docker volume ls -q --filter label=dev.sandboxer.workspace=%[1]s) 2>/dev/null", name)).Run()
	})
}

// countProcs counts the processes in a workspace whose command line contains pattern.
func (s *server) countProcs(ws, pattern string) int {
	s.t.Helper()
	// The pattern comes through the environment: not in this job's own command line.
	r := s.wsRun(ws, `n=0; for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); case "$c" in *"$PAT"*) n=$((n+1));; esac; done; echo $n`,
		"env", map[string]any{"PAT": pattern})
	out := str(r, "stdout")
	var n int
	fmt.Sscan(out, &n)
	return n
}

func TestWorkspaceFilesPersistAcrossJobsRestartsAndIdleStops(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	env := policyEnv(t, "workspaces:\n  idle_stop_s: 3\npool:\n  enabled: false\n")
	s := startServerIn(t, state, env)
	name := "e2e-persist"
	r := s.createWS(name, nil)
	ws := r["workspace"].(map[string]any)
	if str(ws, "state") != "running" || str(ws, "language") != "bash" {
		t.Fatalf("create_workspace: %v", r)
	}
	if msg := s.toolErr("create_workspace", map[string]any{"name": name}); !strings.Contains(msg, "already exists") {
		t.Fatalf("duplicate create: %s", msg)
	}
	for _, bad := range []string{"Bad", "../x", "-x", "a b", strings.Repeat("a", 64)} {
		if msg := s.toolErr("create_workspace", map[string]any{"name": bad}); !strings.Contains(msg, "not valid") {
			t.Fatalf("create_workspace %q: %s", bad, msg)
		}
	}
	if out := s.wsOut(name, "echo hello > note.txt; pwd; cat /workspace/note.txt"); out != "/workspace\nhello\n" {
		t.Fatalf("first job: %q", out)
	}
	// Jobs run as uid 1000 with no capabilities and no network.
	out := s.wsOut(name, "id -u; grep CapEff /proc/self/status; ls /sys/class/net")
	if out != "1000\nCapEff:\t0000000000000000\nlo\n" {
		t.Fatalf("identity, capabilities, network of a workspace job: %q", out)
	}
	// list_jobs filters by workspace.
	jobs := s.jobList(map[string]any{"workspace": name})
	if len(jobs) != 2 || str(jobs[0], "workspace") != name {
		t.Fatalf("list_jobs workspace=%s: %v", name, jobs)
	}
	if other := s.jobList(map[string]any{"workspace": "nope"}); len(other) != 0 {
		t.Fatalf("list_jobs of another workspace: %v", other)
	}

	// A server restart keeps the workspace, its files and its container.
	s.stop()
	s = startServerIn(t, state, env)
	if out := s.wsOut(name, "cat note.txt"); out != "hello\n" {
		t.Fatalf("after a restart: %q", out)
	}
	// Idle: stopped (not deleted) after idle_stop_s, started again by the next job.
	deadline := time.Now().Add(20 * time.Second)
	for {
		l := s.ok("list_workspaces", nil)
		w := l["workspaces"].([]any)[0].(map[string]any)
		if str(w, "state") == "stopped" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace not stopped after idling: %v", l)
		}
		time.Sleep(500 * time.Millisecond)
	}
	psOut, err := exec.Command("docker", "ps", "-q", "--filter", "label=dev.sandboxer.workspace="+name).CombinedOutput()
	if err != nil || strings.TrimSpace(string(psOut)) != "" {
		t.Fatalf("idle workspace's container still runs: %q %v", psOut, err)
	}
	if out := s.wsOut(name, "cat note.txt"); out != "hello\n" {
		t.Fatalf("after an idle stop: %q", out)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
	if c, v := wsEngineObjects(t, name); c != 0 || v != 0 {
		t.Fatalf("after delete_workspace: %d containers, %d volumes left", c, v)
	}
	if msg := s.toolErr("run_command", map[string]any{"command": "true", "workspace": name}); !strings.Contains(msg, "no such workspace") {
		t.Fatalf("run in a deleted workspace: %s", msg)
	}
	if l := s.ok("list_workspaces", nil); len(l["workspaces"].([]any)) != 0 {
		t.Fatalf("list after delete: %v", l)
	}
}

func TestWorkspaceTreeKillSparesOtherJobs(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "pool:\n  enabled: false\n"))
	name := "e2e-tree"
	s.createWS(name, nil)

	// A bystander job in the same workspace runs through both kills.
	var wg sync.WaitGroup
	var bystander map[string]any
	wg.Add(1)
	go func() {
		defer wg.Done()
		bystander = s.wsRun(name, "sleep 8; echo alive", "timeout_s", 30)
	}()
	time.Sleep(500 * time.Millisecond)

	// Timeout: the job and its setsid'd child go.
	r := s.wsRun(name, "setsid sleep 1000 & sleep 1000", "timeout_s", 2)
	if str(r, "status") != "timed_out" {
		t.Fatalf("timed-out job: %v", r)
	}
	if n := s.countProcs(name, "sleep 1000"); n != 0 {
		t.Fatalf("%d 'sleep 1000' processes left after the timeout", n)
	}
	// Kill: the same.
	bg := s.wsRun(name, "setsid sleep 1001 & sleep 1001", "background", true)
	id := str(bg, "job_id")
	deadline := time.Now().Add(10 * time.Second)
	for s.countProcs(name, "sleep 1001") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("background job's processes never appeared")
		}
		time.Sleep(200 * time.Millisecond)
	}
	k := s.ok("kill_job", map[string]any{"job_id": id})
	if str(k, "status") != "killed" {
		t.Fatalf("kill_job: %v", k)
	}
	if n := s.countProcs(name, "sleep 1001"); n != 0 {
		t.Fatalf("%d 'sleep 1001' processes left after kill_job", n)
	}
	wg.Wait()
	if str(bystander, "status") != "completed" || str(bystander, "stdout") != "alive\n" {
		t.Fatalf("bystander job: %v", bystander)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
}

func TestWorkspaceLocalhostSharedBetweenJobs(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "pool:\n  enabled: false\n"))
	name := "e2e-net"
	s.createWS(name, map[string]any{"language": "python"})
	srv := s.wsRun(name, "echo served > index.txt; exec python3 -m http.server 8000", "background", true, "timeout_s", 60)
	id := str(srv, "job_id")
	var got string
	for i := 0; i < 50; i++ {
		r := s.wsRun(name, `python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/index.txt').read().decode(),end='')"`)
		if got = str(r, "stdout"); got == "served\n" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got != "served\n" {
		t.Fatalf("another job of the workspace could not reach the server: %q", got)
	}
	s.ok("kill_job", map[string]any{"job_id": id})
	s.ok("delete_workspace", map[string]any{"name": name})
}

func TestWorkspaceDiskQuotaStopsTheJob(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "workspaces:\n  disk_mb: 20\npool:\n  enabled: false\n"))
	name := "e2e-quota"
	s.createWS(name, nil)
	other := "e2e-quota-other"
	s.createWS(other, nil)
	bystander := s.wsRun(other, "sleep 6; echo fine", "background", true, "timeout_s", 30)
	start := time.Now()
	r := s.wsRun(name, "dd if=/dev/zero of=big bs=1M count=40 2>/dev/null; sleep 60", "timeout_s", 90)
	if str(r, "status") != "killed" || str(r, "reason") != "disk_quota" || !strings.Contains(str(r, "error"), "disk quota of 20 MiB") {
		t.Fatalf("job past the quota: %v", r)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("quota enforced only after %v", d)
	}
	// The other workspace's job carries on.
	b := s.waitJob(str(bystander, "job_id"), "", 30*time.Second)
	if str(b, "status") != "completed" {
		t.Fatalf("job in another workspace: %v", b)
	}
	if out := s.wsOut(name, "rm big; echo ok"); out != "ok\n" {
		t.Fatalf("cleanup job: %q", out)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
	s.ok("delete_workspace", map[string]any{"name": other})
}

// A workspace job survives its server's crash as a fresh job does: the next
// server on the same state directory re-attaches it through the workspace's
// supervisor daemon and loses none of its output; a job re-attached that way
// can still be killed, tree and all, and the workspace takes new jobs.
func TestWorkspaceJobSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	name := "e2e-ws-restart"
	s.createWS(name, nil)
	r := s.wsRun(name, "for i in $(seq 1 8); do echo line$i; echo err$i >&2; sleep 1; done; exit 7", "background", true)
	id := str(r, "job_id")
	sleeper := str(s.wsRun(name, "setsid sleep 1002 & sleep 1002", "background", true), "job_id")
	rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "line2", "wait_s": 30})
	if rd["matched"] != true {
		t.Fatalf("line2 never came before the crash: %v", rd)
	}
	before := str(rd, "output")

	s.kill9()
	s2 := startServerIn(t, s.stateDir)

	g := s2.ok("get_job", map[string]any{"job_id": id, "wait_s": 50})
	if str(g, "status") != "failed" || str(g, "reason") != "exit_code" || exitCode(t, g) != 7 {
		t.Fatalf("after restart: want failed/exit_code/7, got %v", g)
	}
	out, _ := s2.readAll(id)
	var stdout, stderr []string
	for _, l := range lines(out) {
		if strings.HasPrefix(l, "err") {
			stderr = append(stderr, l)
		} else {
			stdout = append(stdout, l)
		}
	}
	var wantOut, wantErr []string
	for i := 1; i <= 8; i++ {
		wantOut, wantErr = append(wantOut, fmt.Sprintf("line%d", i)), append(wantErr, fmt.Sprintf("err%d", i))
	}
	if strings.Join(stdout, ",") != strings.Join(wantOut, ",") || strings.Join(stderr, ",") != strings.Join(wantErr, ",") {
		t.Fatalf("output after restart:\n got %q\nwant every line%%d and err%%d once, in order", out)
	}
	if !strings.HasPrefix(out, before) {
		t.Errorf("output read before the crash %q is not a prefix of the whole %q", before, out)
	}

	if st := str(s2.ok("get_job", map[string]any{"job_id": sleeper}), "status"); st != "running" {
		t.Fatalf("the other workspace job after restart: %s, want running", st)
	}
	if k := s2.ok("kill_job", map[string]any{"job_id": sleeper}); str(k, "status") != "killed" {
		t.Fatalf("kill_job of a re-attached workspace job: %v", k)
	}
	if n := s2.countProcs(name, "sleep 1002"); n != 0 {
		t.Fatalf("%d 'sleep 1002' processes left after kill_job of the re-attached job", n)
	}
	if got := s2.wsOut(name, "echo after"); got != "after\n" {
		t.Fatalf("a new job after the restart printed %q", got)
	}
	s2.ok("delete_workspace", map[string]any{"name": name})
}

// A job reaches only its own workspace's supervisor daemon: from workspace
// B, asking the daemon (its socket is abstract, so per container) for a job
// of workspace A gets "unknown job", and A's job runs on undisturbed; a job
// in A cannot kill the exec that carries A's stream.
func TestWorkspaceDaemonIsPerWorkspace(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a, b := "e2e-daemon-a", "e2e-daemon-b"
	s.createWS(a, nil)
	s.createWS(b, nil)
	id := str(s.wsRun(a, "sleep 3; echo done-a", "background", true), "job_id")
	// An Attach frame ('A', big-endian length, JSON) for A's job, sent by hand.
	probe := `p='{"key":"'$KEY'","stdout":0,"stderr":0}'
{ printf 'A\000\000\000'; printf "\\$(printf %03o ${#p})"; printf '%s' "$p"; sleep 1; } |
  sandboxer-supervisor connect | tr -c 'a-zA-Z0-9-' '.'`
	r := s.wsRun(b, probe, "env", map[string]any{"KEY": id})
	out := str(r, "stdout")
	if !strings.Contains(out, "u...."+id) || strings.Contains(out, "A...."+id) {
		t.Fatalf("workspace B's daemon asked for A's job %s answered %q (%v), want unknown", id, out, r)
	}
	// Nor can a job cut the server off its own workspace: the stream's exec
	// runs as root (no capability), out of reach of the jobs' signals.
	kill := s.wsRun(a, `for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in *"$PAT"*) kill -9 ${p#/proc/} && echo killed;; esac; done; true`,
		"env", map[string]any{"PAT": "sandboxer-supervisor connect"})
	if str(kill, "status") != "completed" || strings.Contains(str(kill, "stdout"), "killed") ||
		!strings.Contains(str(kill, "stderr"), "Operation not permitted") {
		t.Fatalf("a job killed the workspace stream's exec: %v", kill)
	}
	g := s.ok("get_job", map[string]any{"job_id": id, "wait_s": 30})
	if got, _ := s.readAll(id); str(g, "status") != "completed" || got != "done-a\n" {
		t.Fatalf("workspace A's job: %v, output %q", g, got)
	}
}

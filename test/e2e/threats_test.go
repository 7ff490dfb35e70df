package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

// rawServer talks JSON-RPC lines to the binary without an MCP client, for
// malformed and oversize input.
type rawServer struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     *os.File
	out    *bufio.Reader
	stderr *syncBuffer
}

func startRaw(t *testing.T) *rawServer {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "serve", "--state-dir", t.TempDir())
	cmd.Stdin = inR
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &rawServer{t: t, cmd: cmd, in: inW, out: bufio.NewReaderSize(stdout, 1<<20), stderr: &syncBuffer{}}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	t.Cleanup(func() {
		inW.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("raw server did not exit after stdin closed")
		}
	})
	return r
}

func (r *rawServer) send(line string) {
	r.t.Helper()
	if _, err := r.in.WriteString(line + "\n"); err != nil {
		r.t.Fatal(err)
	}
}

// recv reads one message line; every line must be JSON-RPC 2.0.
func (r *rawServer) recv() map[string]any {
	r.t.Helper()
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := r.out.ReadString('\n')
		ch <- result{line, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			r.t.Fatalf("read: %v\nstderr: %s", res.err, tail(r.stderr.String(), 2000))
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(res.line), &m); err != nil || m["jsonrpc"] != "2.0" {
			r.t.Fatalf("not a JSON-RPC message on stdout: %q", truncate([]byte(res.line), 200))
		}
		return m
	case <-time.After(30 * time.Second):
		r.t.Fatal("no answer within 30 s")
	}
	return nil
}

const initLine = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// THREATS 20 and 22: a malformed line and oversize messages get an error;
// the server carries on answering.
func TestThreatsMalformedAndOversizeMessages(t *testing.T) {
	t.Parallel()
	r := startRaw(t)
	r.send(initLine)
	if m := r.recv(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	r.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"` + "garbage")
	if m := r.recv(); m["error"] == nil {
		t.Fatalf("malformed line: want an error, got %v", m)
	}
	r.send(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`)
	if m := r.recv(); m["result"] == nil || fmt.Sprint(m["id"]) != "3" {
		t.Fatalf("after a malformed line: %v", m)
	}
	// 70 KiB is processed; 20 MiB is refused; the server carries on.
	big := strings.Repeat("x", 70<<10)
	r.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"list_jobs","arguments":{"kind":"` + big + `"}}}`)
	if m := r.recv(); fmt.Sprint(m["id"]) != "4" {
		t.Fatalf("70 KiB message: %v", m)
	}
	huge := strings.Repeat("y", 20<<20)
	r.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"list_jobs","arguments":{"kind":"` + huge + `"}}}`)
	if m := r.recv(); m["error"] == nil {
		t.Fatalf("20 MiB message: want an error, got id %v", m["id"])
	}
	r.send(`{"jsonrpc":"2.0","id":6,"method":"tools/list"}`)
	if m := r.recv(); m["result"] == nil || fmt.Sprint(m["id"]) != "6" {
		t.Fatalf("after an oversize message: %v", m)
	}
}

// THREATS 13: processes that dodge signals or leave the process group still
// end at the timeout, because the container goes.
func TestThreatsTimeoutReachesEveryProcess(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	start := time.Now()
	r := s.ok("run_command", map[string]any{
		"command":   `setsid sleep 1000 & nohup sleep 1000 >/dev/null 2>&1 & (sleep 1000 &) ; trap '' TERM INT; while :; do :; done`,
		"timeout_s": 2,
	})
	if str(r, "status") != "timed_out" {
		t.Fatalf("want timed_out, got %v", r)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("took %s for a 2 s timeout", took)
	}
	if cs := s.containers(); len(cs) != 0 {
		t.Errorf("containers left: %v", cs)
	}
}

// THREATS 18: past the concurrency limit and the queue, jobs are refused clearly.
func TestThreatsQueueCapRefuses(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "jobs:\n  max_concurrent: 1\n  max_queued: 2\n"))
	for i := 0; i < 3; i++ {
		s.ok("run_command", map[string]any{"command": "sleep 20", "background": true})
	}
	msg := s.toolErr("run_command", map[string]any{"command": "sleep 20", "background": true})
	if !strings.Contains(msg, "queue full") || !strings.Contains(msg, "jobs.max_queued") {
		t.Fatalf("refusal does not say why: %s", msg)
	}
}

// THREATS 17: the file size limit is reported as SIGXFSZ.
func TestThreatsFileSizeLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "limits:\n  file_size_mb: 1\n"))
	r := s.ok("run_command", map[string]any{"command": "ulimit -n; head -c 2000000 /dev/zero > /tmp/big"})
	if str(r, "stdout") != "1024\n" {
		t.Errorf("open files limit: %q", str(r, "stdout"))
	}
	rec := s.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
	if str(rec, "status") != "failed" || str(rec, "signal") != "SIGXFSZ" {
		t.Fatalf("want failed with SIGXFSZ, got %v", rec)
	}
}

// THREATS 38: a corrupted database is set aside; the server starts and says so.
func TestThreatsCorruptDatabase(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sandboxer.db"), []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServerIn(t, dir)
	r := s.ok("run_command", map[string]any{"command": "echo fine"})
	if str(r, "stdout") != "fine\n" {
		t.Fatalf("after a corrupt database: %v", r)
	}
	if !strings.Contains(s.stderr.String(), "set it aside") {
		t.Errorf("the log does not say the database was set aside:\n%s", tail(s.stderr.String(), 2000))
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "sandboxer.db.corrupt-*")); len(m) == 0 {
		t.Error("the corrupt database was not kept aside")
	}
}

// THREATS 39: a missing image gives a message naming the build command.
func TestThreatsImageMissing(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "languages:\n  python:\n    image: sandboxer/not-built:1\n"))
	for _, bg := range []bool{false, true} {
		msg := s.toolErr("run_command", map[string]any{"command": "true", "language": "python", "background": bg})
		if !strings.Contains(msg, "sandboxer/not-built:1") || !strings.Contains(msg, "make images") {
			t.Errorf("background=%v: message does not name the image and the fix: %s", bg, msg)
		}
	}
}

// THREATS 37: SIGTERM ends in-flight work, removes sandboxes and exits promptly.
func TestThreatsSigtermShutsDownCleanly(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "sleep 100", "background": true})
	s.ok("read_output", map[string]any{"job_id": str(r, "job_id"), "wait_s": 1})
	start := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("server did not exit within 15 s of SIGTERM")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("shutdown took %s", took)
	}
	s.waitNoContainers(5 * time.Second)
	// The record says what happened to the job.
	again := startServerIn(t, s.stateDir)
	rec := again.ok("get_job", map[string]any{"job_id": str(r, "job_id")})
	if str(rec, "status") != "killed" || str(rec, "reason") != "server_shutdown" {
		t.Fatalf("want killed/server_shutdown, got %v", rec)
	}
}

// THREATS 40: a job's container removed from outside ends the job as failed, saying so.
func TestThreatsContainerRemovedFromOutside(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "sleep 100", "background": true})
	id := str(r, "job_id")
	var cid string
	for deadline := time.Now().Add(10 * time.Second); cid == "" && time.Now().Before(deadline); {
		for _, c := range s.containers() {
			if c.JobID == id {
				cid = c.ID
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if cid == "" {
		t.Fatal("job's container not found")
	}
	outsider, err := docker.New("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	if err := outsider.Remove(context.Background(), cid); err != nil {
		t.Fatalf("remove from outside: %v", err)
	}
	rec := s.ok("get_job", map[string]any{"job_id": id, "wait_s": 10})
	if str(rec, "status") != "failed" || str(rec, "reason") != "lost" || !strings.Contains(str(rec, "error"), "removed from outside") {
		t.Fatalf("want failed/lost saying removed from outside, got %v", rec)
	}
}

// THREATS 8: two jobs without a workspace see nothing of each other: files,
// /dev/shm, processes.
func TestThreatsJobsAreIsolatedFromEachOther(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	first := s.ok("run_command", map[string]any{
		"command":    "echo secret > /tmp/secret; echo secret > /dev/shm/secret; echo secret > /workspace/secret; echo ready; exec sleep 60",
		"background": true,
	})
	s.ok("read_output", map[string]any{"job_id": str(first, "job_id"), "until": "ready", "wait_s": 20})
	r := s.ok("run_command", map[string]any{"command": "ls /tmp /dev/shm /workspace; ps -eo comm | grep -c sleep || true"})
	if strings.Contains(str(r, "stdout"), "secret") || !strings.HasSuffix(str(r, "stdout"), "0\n") {
		t.Fatalf("the second job sees the first one's files or processes:\n%s", str(r, "stdout"))
	}
	s.ok("kill_job", map[string]any{"job_id": str(first, "job_id"), "signal": "KILL"})
}

// THREATS 4: privileged operations are refused inside a sandbox.
func TestThreatsPrivilegedOperationsRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, cmd := range []string{
		"unshare --user --map-root-user true",
		"unshare -m true",
		"mount -t tmpfs none /mnt",
		"mknod /tmp/dev c 1 3",
		"echo 3 > /proc/sys/vm/drop_caches",
		"echo 1 > /sys/kernel/profiling",
		"chroot / true",
	} {
		r := s.ok("run_command", map[string]any{"command": cmd})
		if str(r, "status") == "completed" {
			t.Errorf("%q succeeded inside the sandbox: %v", cmd, r)
		}
		// Refused, not merely missing: the tool exists and the kernel said no.
		if e := str(r, "stderr"); strings.Contains(e, "not found") || !strings.Contains(strings.ToLower(e), "not permitted") && !strings.Contains(strings.ToLower(e), "permission denied") && !strings.Contains(strings.ToLower(e), "read-only") && !strings.Contains(e, "must be superuser") {
			t.Errorf("%q failed for another reason: %q", cmd, e)
		}
	}
}

// THREATS 12: filling /tmp, /dev/shm or the working directory stops at its
// cap; the next job starts normally.
func TestThreatsDiskFillStopsAtCap(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, dir := range []string{"/tmp", "/dev/shm", "/workspace"} {
		r := s.ok("run_command", map[string]any{"command": "head -c 600000000 /dev/zero > " + dir + "/fill; echo rc=$?; du -sm " + dir + "/fill", "timeout_s": 60})
		out := str(r, "stdout") + str(r, "stderr")
		if !strings.Contains(out, "No space left on device") && str(r, "reason") != "oom_killed" {
			t.Errorf("%s: filling it did not stop at a cap: %v", dir, r)
		}
	}
	if r := s.ok("run_command", map[string]any{"command": "echo still fine"}); str(r, "stdout") != "still fine\n" {
		t.Fatalf("next job: %v", r)
	}
}

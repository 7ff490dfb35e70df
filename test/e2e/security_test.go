package e2e

// The security suite, built from docs/threats.md. Cases already
// covered by other e2e tests are mapped here rather than repeated; this file
// holds the missing ones. THREATS number → test:
//
//	 1 every container hardened (inspect)   TestFoundationSandboxHardening, TestPoolHardening, internal/sandbox/docker contract tests
//	 2 CapEff 0, NoNewPrivs, Seccomp, cgroup TestFoundationSandboxHardening
//	 3 no socket, no DOCKER_HOST, no env    TestFoundationSandboxHardening (canary), TestSecurityServerEnvNotInSandbox
//	 4 unshare/mount/mknod/proc writes      TestThreatsPrivilegedOperationsRefused
//	 5 cwd tricks, NUL                      TestFoundationBadInputCreatesNothing, TestRunCommandCwdBelowWorkspace
//	 6 symlinks through read_file           (no workspaces/read_file yet)
//	 7 injected language / image names      TestFoundationBadInputCreatesNothing, TestSecurityImageNamesRefused
//	 8 jobs isolated from each other        TestThreatsJobsAreIsolatedFromEachOther, TestPoolJobsNeverShareASandbox
//	 9 network: only lo                     TestSecurityNetworkOnlyLoopback
//	10 fork bomb                            TestFoundationForkBomb
//	11 memory hog, main and child           TestFoundationOOMKilled, TestPoolMemoryLimitHolds
//	12 disk fill                            TestThreatsDiskFillStopsAtCap
//	13 timeouts reach every process         TestThreatsTimeoutReachesEveryProcess, TestFoundationTimeoutRemovesContainer
//	14 many jobs leave nothing              TestLoadManyShortJobsLeaveNothing
//	15 output floods                        TestFoundationOutputFloodBounded
//	16 one 50 MB line                       TestSecurityHugeLine
//	17 open files, file size                TestThreatsFileSizeLimit, TestSecurityOpenFilesLimit
//	18 past the concurrency limit           TestThreatsQueueCapRefuses, TestJobsQueueWhenSlotsTaken
//	19 install limits                       (no installs yet)
//	20 malformed JSON-RPC                   TestThreatsMalformedAndOversizeMessages
//	21 bad arguments                        TestFoundationBadInputCreatesNothing
//	22 oversize messages                    TestThreatsMalformedAndOversizeMessages
//	23 NUL bytes                            TestFoundationBadInputCreatesNothing, TestSecurityNULBytesRefused
//	24 binary output                        TestFoundationBinaryAndEscapes
//	25 escape sequences                     TestFoundationBinaryAndEscapes
//	26 env keys                             TestFoundationBadInputCreatesNothing, TestEnvNamesThatChangeTheShellAreRefused, TestSecurityEnvValueCapped
//	27 cancellation kills                   TestJobsCancelledCallKillsJob
//	28 HTTP mode                            (no HTTP transport yet)
//	29 nothing but MCP on stdout            every e2e test (stdoutValidator), TestProtocolRawWire
//	30 block list bypass forms              TestSecurityBlockListBypassForms (+ internal/blocklist unit table)
//	31 every entry point                    TestSecurityBlockListEveryEntryPoint
//	32 package names                        (no installs yet)
//	33 agent cannot unblock                 TestSecurityBlockEditsOff, TestSecurityBlockEditsOnPersist
//	34 engine unreachable                   TestFoundationEngineUnreachable
//	35 daemon restarted mid-job             test/faults TestDaemonRestartMidJob
//	36 server SIGKILLed                     TestJobsRecoverAfterCrash
//	37 stdin EOF / SIGTERM                  TestThreatsSigtermShutsDownCleanly
//	38 corrupted database                   TestThreatsCorruptDatabase
//	39 image missing                        TestThreatsImageMissing
//	40 container removed from outside       TestThreatsContainerRemovedFromOutside
//	41-43 load                              TestJobsConcurrentRunCommands, TestLoadManyShortJobsLeaveNothing
//	processes: host and foreign pids        TestSecurityProcesses
//	audit: every run, secrets redacted      TestSecurityAuditLog
//	strict policy                           TestSecurityStrictPolicy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

const blockPolicy = "block:\n  commands: [rm, curl]\n"

// THREATS 30: every syntactic form of the blocked command is refused through
// run_command with a tool error naming the rule; look-alikes run.
func TestSecurityBlockListBypassForms(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, blockPolicy))
	for _, tc := range []struct{ name, cmd string }{
		{"absolute path", "/usr/bin/rm -f /tmp/x"},
		{"dot slash", "cd /bin && ./rm -f /tmp/x"},
		{"quotes", "'r'm -f /tmp/x"},
		{"double quotes", `"rm" -f /tmp/x`},
		{"backslashes", `r\m -f /tmp/x`},
		{"command substitution", "echo $(rm -f /tmp/x)"},
		{"backticks", "echo `rm -f /tmp/x`"},
		{"eval", `eval "rm -f /tmp/x"`},
		{"sh -c", "sh -c 'rm -f /tmp/x'"},
		{"bash -c nested", `bash -c "sh -c 'rm -f /tmp/x'"`},
		{"env", "env FOO=1 rm -f /tmp/x"},
		{"nohup", "nohup rm -f /tmp/x"},
		{"timeout", "timeout 5 rm -f /tmp/x"},
		{"xargs", "echo /tmp/x | xargs rm -f"},
		{"find -exec", `find /tmp -name x -exec rm -f {} \;`},
		{"pipeline", "ls | rm -f /tmp/x"},
		{"newline", "echo hi\nrm -f /tmp/x"},
		{"semicolon", "echo hi; rm -f /tmp/x"},
		{"and list", "true && rm -f /tmp/x"},
		{"heredoc", "bash <<'EOF'\nrm -f /tmp/x\nEOF"},
		{"subshell", "(rm -f /tmp/x)"},
		{"function", "f() { rm -f /tmp/x; }; f"},
		{"glob", "/bin/r? -f /tmp/x"},
		{"ansi-c", `$'\x72m' -f /tmp/x`},
		{"IFS", "rm${IFS}-f${IFS}/tmp/x"},
		{"command", "command rm -f /tmp/x"},
		{"exec", "exec rm -f /tmp/x"},
		{"second rule", "curl http://127.0.0.1/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := s.toolErr("run_command", map[string]any{"command": tc.cmd})
			if !strings.Contains(msg, "block list") || !(strings.Contains(msg, `rule "rm"`) || strings.Contains(msg, `rule "curl"`)) {
				t.Fatalf("%q: error %q does not name the rule", tc.cmd, msg)
			}
		})
	}
	// A script that does not parse cannot be checked: refused.
	if msg := s.toolErr("run_command", map[string]any{"command": "echo 'unterminated"}); !strings.Contains(msg, "does not parse") {
		t.Errorf("unparseable script: %q", msg)
	}
	// Look-alikes run.
	for _, cmd := range []string{"echo rm", "grep rm /dev/null; true", "rmdir --help >/dev/null", "command -v rm", "echo 'rm -rf /' | cat"} {
		r := s.ok("run_command", map[string]any{"command": cmd})
		if str(r, "status") != "completed" {
			t.Errorf("look-alike %q: %v", cmd, r)
		}
	}
	if jobs := fJobs(t, s); len(jobs) != 5 {
		t.Errorf("%d jobs recorded; want only the 5 look-alikes (blocked calls create none)", len(jobs))
	}
}

// THREATS 31: the same decision through every entry point that exists:
// run_command's command, a shell reading run_command's stdin, and a line
// sent to a shell job with send_input.
func TestSecurityBlockListEveryEntryPoint(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, blockPolicy))
	msg := s.toolErr("run_command", map[string]any{"command": "bash", "stdin": "echo hi\n/bin/rm -f /tmp/x\n"})
	if !strings.Contains(msg, `rule "rm"`) {
		t.Errorf("shell fed stdin: %q", msg)
	}
	r := s.ok("run_command", map[string]any{"command": "cat", "stdin": "rm -f /tmp/x\n"})
	if str(r, "stdout") != "rm -f /tmp/x\n" {
		t.Errorf("stdin as data to cat: %v", r)
	}
	bg := s.ok("run_command", map[string]any{"command": "bash", "background": true, "keep_stdin_open": true, "timeout_s": 60})
	id := str(bg, "job_id")
	s.waitJob(id, "running", 20*time.Second)
	msg = s.toolErr("send_input", map[string]any{"job_id": id, "text": "sh -c 'rm -f /tmp/x'", "enter": true})
	if !strings.Contains(msg, `rule "rm"`) {
		t.Errorf("send_input: %q", msg)
	}
	out := s.ok("send_input", map[string]any{"job_id": id, "text": "echo rm ok", "enter": true, "until": "rm ok", "wait_s": 10})
	if !strings.Contains(str(out, "output"), "rm ok") {
		t.Errorf("a look-alike line: %v", out)
	}
	s.ok("kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})

	// A bash script, a session's program and each line typed into a shell
	// session, and a package install: the same decision everywhere.
	if msg := s.toolErr("run_script", map[string]any{"language": "bash", "code": "echo start\nfor f in /tmp/x; do /bin/rm -f \"$f\"; done\n"}); !strings.Contains(msg, `rule "rm"`) {
		t.Errorf("bash run_script: %q", msg)
	}
	if r := s.ok("run_script", map[string]any{"language": "bash", "code": "echo rm is fine as data"}); str(r, "stdout") != "rm is fine as data\n" {
		t.Errorf("a look-alike bash script: %v", r)
	}
	if r := s.ok("run_script", map[string]any{"language": "python", "code": "print('rm')"}); str(r, "stdout") != "rm\n" {
		t.Errorf("a python script is not shell: %v", r)
	}
	if msg := s.toolErr("start_session", map[string]any{"command": "rm -i /tmp/x"}); !strings.Contains(msg, `rule "rm"`) {
		t.Errorf("start_session of a blocked program: %q", msg)
	}
	sess := s.ok("start_session", map[string]any{"command": "bash", "wait_s": 5})
	sid := str(sess, "job_id")
	if msg := s.toolErr("send_input", map[string]any{"job_id": sid, "text": "nohup rm -rf /tmp/y", "enter": true}); !strings.Contains(msg, `rule "rm"`) {
		t.Errorf("a line typed into a shell session: %q", msg)
	}
	s.ok("kill_job", map[string]any{"job_id": sid, "signal": "KILL", "grace_s": 0})
	s.ok("create_workspace", map[string]any{"name": "blocked-installs", "language": "bash"})
	defer s.call("delete_workspace", map[string]any{"name": "blocked-installs"})
	if msg := s.toolErr("install_packages", map[string]any{"workspace": "blocked-installs", "manager": "apt", "packages": []string{"jq", "rm"}}); !strings.Contains(msg, `rule "rm"`) {
		t.Errorf("install_packages naming a blocked command: %q", msg)
	}
}

func blockEntry(list map[string]any, command string) map[string]any {
	cs, _ := list["commands"].([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["command"] == command {
			return m
		}
	}
	return nil
}

func toolNames(t *testing.T, s *server) map[string]bool {
	t.Helper()
	res, err := s.client.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range res.Tools {
		names[tool.Name] = true
	}
	return names
}

// THREATS 33: with edits off (the default) the agent cannot change the list:
// block_command and unblock_command do not exist, and the list stays.
func TestSecurityBlockEditsOff(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, blockPolicy))
	names := toolNames(t, s)
	if names["block_command"] || names["unblock_command"] || !names["list_blocked_commands"] {
		t.Fatalf("tools with edits off: %v", names)
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = "unblock_command"
	req.Params.Arguments = map[string]any{"command": "rm"}
	res, err := s.client.CallTool(context.Background(), req)
	if err == nil && !res.IsError {
		t.Fatalf("unblock_command with edits off succeeded: %s", text(res))
	}
	l := s.ok("list_blocked_commands", map[string]any{})
	if e := blockEntry(l, "curl"); e == nil || e["source"] != "policy" || blockEntry(l, "rm") == nil || l["agent_edits"] != false {
		t.Fatalf("list: %v", l)
	}
	if msg := s.toolErr("run_command", map[string]any{"command": "rm -f /tmp/x"}); !strings.Contains(msg, `rule "rm"`) {
		t.Fatalf("rm still blocked: %q", msg)
	}
}

// THREATS 33 with edits on: an agent's entry is enforced, survives a restart,
// and after unblock the command runs; the policy's entries cannot be removed.
func TestSecurityBlockEditsOnPersist(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := []string{policyEnv(t, blockPolicy), "SANDBOXER_ALLOW_BLOCK_EDITS=true"}
	s := startServerIn(t, dir, env...)
	names := toolNames(t, s)
	if !names["block_command"] || !names["unblock_command"] {
		t.Fatalf("tools with edits on: %v", names)
	}
	l := s.ok("block_command", map[string]any{"command": "touch", "reason": "no new files"})
	if l["changed"] != true {
		t.Fatalf("block_command: %v", l)
	}
	if msg := s.toolErr("run_command", map[string]any{"command": "/usr/bin/touch /tmp/x"}); !strings.Contains(msg, `rule "touch"`) || !strings.Contains(msg, "no new files") {
		t.Fatalf("agent entry not enforced: %q", msg)
	}
	if msg := s.toolErr("unblock_command", map[string]any{"command": "rm"}); !strings.Contains(msg, "operator's policy") {
		t.Fatalf("unblocking a policy entry: %q", msg)
	}
	if msg := s.toolErr("block_command", map[string]any{"command": "/bin/ls"}); !strings.Contains(msg, "command name") {
		t.Fatalf("blocking a path: %q", msg)
	}
	s.stop()

	s2 := startServerIn(t, dir, env...)
	l = s2.ok("list_blocked_commands", map[string]any{})
	if e := blockEntry(l, "touch"); e == nil || e["source"] != "agent" || e["reason"] != "no new files" || e["added_by"] != "sandboxer-e2e 1" || str(e, "added_at") == "" {
		t.Fatalf("after restart: %v", l)
	}
	if msg := s2.toolErr("run_command", map[string]any{"command": "touch /tmp/x"}); !strings.Contains(msg, `rule "touch"`) {
		t.Fatalf("after restart touch runs: %q", msg)
	}
	s2.ok("unblock_command", map[string]any{"command": "touch"})
	if r := s2.ok("run_command", map[string]any{"command": "touch /tmp/x && echo made"}); str(r, "stdout") != "made\n" {
		t.Fatalf("after unblock: %v", r)
	}
}

// Processes: a job's processes are listed with container pids; one is killed;
// init, the supervisor, a host pid and another job's pid are refused.
func TestSecurityProcesses(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := str(s.ok("run_command", map[string]any{"command": "sleep 301 & sleep 302 & wait", "background": true, "timeout_s": 60}), "job_id")
	// b burns through pids first so its sleep has a pid a does not have.
	b := str(s.ok("run_command", map[string]any{"command": "for i in $(seq 40); do /bin/true; done; sleep 303; true", "background": true, "timeout_s": 60}), "job_id")
	procs := func(id string) []map[string]any {
		t.Helper()
		var out []map[string]any
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			r := s.call("list_processes", map[string]any{"job_id": id})
			if !r.IsError {
				jobs := structured(t, r)["jobs"].([]any)
				out = nil
				for _, p := range jobs[0].(map[string]any)["processes"].([]any) {
					out = append(out, p.(map[string]any))
				}
				// A sleep process itself, not only the shell line naming it.
				if len(out) > 0 && strings.Contains(mustJSON(out), `"command":"sleep 30`) {
					return out
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("job %s: no sleep process listed: %v", id, out)
		return nil
	}
	pidOf := func(ps []map[string]any, cmd string) int {
		for _, p := range ps {
			if str(p, "command") == cmd {
				return int(p["pid"].(float64))
			}
		}
		t.Fatalf("no process %q in %v", cmd, ps)
		return 0
	}
	pa := procs(a)
	var initPID, supPID int
	for _, p := range pa {
		switch str(p, "role") {
		case "init":
			initPID = int(p["pid"].(float64))
		case "supervisor":
			supPID = int(p["pid"].(float64))
		}
		if p["user"] == "root" {
			t.Errorf("a process runs as root: %v", p)
		}
	}
	if initPID != 1 || supPID == 0 {
		t.Fatalf("roles: %v", pa)
	}
	pb := procs(b)
	foreign := pidOf(pb, "sleep 303")

	all := s.ok("list_processes", map[string]any{})
	if n := len(all["jobs"].([]any)); n != 2 {
		t.Errorf("list_processes without job_id shows %d jobs, want 2", n)
	}
	if msg := s.toolErr("kill_process", map[string]any{"job_id": a, "pid": 1}); !strings.Contains(msg, "init") {
		t.Errorf("pid 1: %q", msg)
	}
	if msg := s.toolErr("kill_process", map[string]any{"job_id": a, "pid": supPID}); !strings.Contains(msg, "supervisor") {
		t.Errorf("supervisor: %q", msg)
	}
	if msg := s.toolErr("kill_process", map[string]any{"job_id": a, "pid": os.Getpid()}); !strings.Contains(msg, "not a process in job") {
		t.Errorf("host pid: %q", msg)
	}
	for _, p := range pa {
		if int(p["pid"].(float64)) == foreign {
			t.Fatalf("test setup: pid %d exists in both jobs", foreign)
		}
	}
	if msg := s.toolErr("kill_process", map[string]any{"job_id": a, "pid": foreign}); !strings.Contains(msg, "not a process in job") {
		t.Errorf("another job's pid: %q", msg)
	}
	target := pidOf(pa, "sleep 301")
	s.ok("kill_process", map[string]any{"job_id": a, "pid": target, "signal": "KILL"})
	deadline := time.Now().Add(10 * time.Second)
	for {
		gone := true
		for _, p := range procs(a) {
			if int(p["pid"].(float64)) == target {
				gone = false
			}
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still listed after kill_process", target)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The other sleep and the other job are untouched.
	pidOf(procs(a), "sleep 302")
	pidOf(procs(b), "sleep 303")
	s.ok("kill_job", map[string]any{"job_id": a, "signal": "KILL", "grace_s": 0})
	s.ok("kill_job", map[string]any{"job_id": b, "signal": "KILL", "grace_s": 0})
	if msg := s.toolErr("list_processes", map[string]any{"job_id": a}); !strings.Contains(msg, "not running") {
		t.Errorf("finished job: %q", msg)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Audit: every run leaves a line (with client, job, command, decision,
// outcome); secrets passed in env or written in the command are in neither
// the audit log nor the server's own log.
func TestSecurityAuditLog(t *testing.T) {
	t.Parallel()
	const envSecret = "s3cr3t-env-value-4242"
	const cmdSecret = "hunter2-in-the-command"
	dir := t.TempDir()
	s := startServerIn(t, dir, policyEnv(t, blockPolicy))
	r := s.ok("run_command", map[string]any{"command": "echo ${#MY_TOKEN}; API_KEY=" + cmdSecret + " true", "env": map[string]any{"MY_TOKEN": envSecret}})
	id := str(r, "job_id")
	s.toolErr("run_command", map[string]any{"command": "rm -f /tmp/x"})
	s.toolErr("run_command", map[string]any{"command": "echo hi", "memory_mb": 99999999})
	bg := str(s.ok("run_command", map[string]any{"command": "sleep 30", "background": true}), "job_id")
	s.ok("kill_job", map[string]any{"job_id": bg, "grace_s": 0})
	s.ok("list_jobs", map[string]any{}) // read-only: not audited
	s.stop()

	data, err := os.ReadFile(filepath.Join(dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{envSecret, cmdSecret} {
		if strings.Contains(string(data), secret) {
			t.Errorf("audit log holds the secret %q:\n%s", secret, data)
		}
		if strings.Contains(s.stderr.String(), secret) {
			t.Errorf("server log holds the secret %q", secret)
		}
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q", l)
		}
		lines = append(lines, m)
	}
	if len(lines) != 5 {
		t.Fatalf("%d audit lines, want 5 (3 runs, 1 background run, 1 kill):\n%s", len(lines), data)
	}
	first := lines[0]
	if first["tool"] != "run_command" || first["job_id"] != id || first["decision"] != "allowed" || first["outcome"] != "completed" ||
		first["client"] != "sandboxer-e2e 1" || !strings.Contains(str(first, "command"), "API_KEY=[REDACTED]") || mustJSON(first["env_keys"]) != `["MY_TOKEN"]` {
		t.Errorf("first line: %v", first)
	}
	if l := lines[1]; l["decision"] != "blocked" || !strings.Contains(str(l, "rule"), "rm") || l["outcome"] != "error" {
		t.Errorf("blocked line: %v", l)
	}
	if l := lines[2]; l["decision"] != "refused" || !strings.Contains(str(l, "error"), "ceiling") {
		t.Errorf("refused line: %v", l)
	}
	if l := lines[4]; l["tool"] != "kill_job" || l["job_id"] != bg {
		t.Errorf("kill line: %v", l)
	}
	out, err := exec.Command(binPath, "audit", "--state-dir", dir, "--job", id, "--since", "1h").CombinedOutput()
	if err != nil || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), id) {
		t.Errorf("sandboxer audit --job: %v\n%s", err, out)
	}
}

// Under strict.yaml limits are smaller and the strict block list holds.
func TestSecurityStrictPolicy(t *testing.T) {
	t.Parallel()
	strict, err := filepath.Abs("../../policies/strict.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, "SANDBOXER_POLICY="+strict)
	if msg := s.toolErr("run_command", map[string]any{"command": "echo hi", "memory_mb": 2048}); !strings.Contains(msg, "1024") {
		t.Errorf("memory ceiling: %q", msg)
	}
	if msg := s.toolErr("run_command", map[string]any{"command": "echo hi", "timeout_s": 600}); !strings.Contains(msg, "300") {
		t.Errorf("timeout ceiling: %q", msg)
	}
	r := s.ok("run_command", map[string]any{"command": fCgroupProbe})
	fCheckCgroup(t, "strict defaults", fFields(str(r, "stdout")), 256<<20, 128, 0.5)
	if msg := s.toolErr("run_command", map[string]any{"command": "wget http://example.com"}); !strings.Contains(msg, `rule "wget"`) {
		t.Errorf("strict block list: %q", msg)
	}
	// No installs: workspaces never get a network.
	s.ok("create_workspace", map[string]any{"name": "strict-ws"})
	defer s.call("delete_workspace", map[string]any{"name": "strict-ws"})
	if msg := s.toolErr("install_packages", map[string]any{"workspace": "strict-ws", "manager": "apt", "packages": []string{"jq"}}); !strings.Contains(msg, "install_network") {
		t.Errorf("an install under strict.yaml: %q", msg)
	}
}

// THREATS 3: the server's environment never reaches a sandbox.
func TestSecurityServerEnvNotInSandbox(t *testing.T) {
	t.Parallel()
	s := startServer(t, "SANDBOXER_E2E_SECRET=do-not-leak", "AWS_SECRET_ACCESS_KEY=nope")
	r := s.ok("run_command", map[string]any{"command": "env; ls -la /var/run/docker.sock 2>&1; echo done"})
	out := str(r, "stdout")
	for _, bad := range []string{"do-not-leak", "AWS_SECRET", "DOCKER_HOST", "SANDBOXER_"} {
		if strings.Contains(out, bad) {
			t.Errorf("sandbox sees %q:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "No such file") {
		t.Errorf("docker socket present? %s", out)
	}
}

// THREATS 7: image-like and injected language names are refused; nothing runs.
func TestSecurityImageNamesRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, l := range []string{"evil/img:latest", "debian:bookworm-slim", "python;id", "../python", "PYTHON"} {
		if msg := s.toolErr("run_command", map[string]any{"command": "id", "language": l}); !strings.Contains(msg, "language") {
			t.Errorf("language %q: %q", l, msg)
		}
	}
	fNoContainers(t, s, "after refused languages")
}

// THREATS 9: the default network is only lo; connecting out fails.
func TestSecurityNetworkOnlyLoopback(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "ls /sys/class/net; (echo > /dev/tcp/1.1.1.1/53) 2>/dev/null && echo CONNECTED || echo refused; getent hosts example.com || echo nodns"})
	out := str(r, "stdout")
	if strings.TrimSpace(strings.Split(out, "\n")[0]) != "lo" || !strings.Contains(out, "refused") || strings.Contains(out, "CONNECTED") || !strings.Contains(out, "nodns") {
		t.Fatalf("network: %q", out)
	}
}

// THREATS 16: one 50 MB line without a newline breaks no reader: the job
// completes, the inline output is capped, the server carries on.
func TestSecurityHugeLine(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "output:\n  engine_log: none\n"))
	r := s.ok("run_command", map[string]any{"command": "head -c 50000000 /dev/zero | tr '\\0' a", "timeout_s": 120, "wait_s": 50})
	id := str(r, "job_id")
	if str(r, "status") != "completed" {
		r = s.waitJob(id, "completed", 90*time.Second)
	}
	if len(str(r, "stdout")) > 64<<10 {
		t.Errorf("inline stdout is %d bytes", len(str(r, "stdout")))
	}
	if r := s.ok("run_command", map[string]any{"command": "echo fine"}); str(r, "stdout") != "fine\n" {
		t.Errorf("after the huge line: %v", r)
	}
}

// THREATS 17: opening more files than limits.open_files fails with EMFILE.
func TestSecurityOpenFilesLimit(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "limits:\n  open_files: 64\n"))
	r := s.ok("run_command", map[string]any{"command": "ulimit -n; for i in $(seq 3 80); do eval \"exec $i</dev/null\" || { echo failed at $i; break; }; done 2>&1"})
	out := str(r, "stdout")
	if !strings.HasPrefix(out, "64\n") || !strings.Contains(out, "failed at 64") {
		t.Fatalf("open files: %q", out)
	}
}

// THREATS 23: NUL bytes anywhere an agent can put text are refused.
func TestSecurityNULBytesRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for name, args := range map[string]map[string]any{
		"env value": {"command": "true", "env": map[string]any{"A": "x\u0000y"}},
		"cwd":       {"command": "true", "cwd": "/workspace/a\u0000b"},
	} {
		if msg := s.toolErr("run_command", args); !strings.Contains(msg, "NUL") {
			t.Errorf("%s: %q", name, msg)
		}
	}
	fNoContainers(t, s, "after NUL bytes")
}

// THREATS 26: a 1 MiB env value is refused (the cap is 32 KiB).
func TestSecurityEnvValueCapped(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	msg := s.toolErr("run_command", map[string]any{"command": "true", "env": map[string]any{"BIG": strings.Repeat("x", 1<<20)}})
	if !strings.Contains(msg, "BIG") || !strings.Contains(msg, strconv.Itoa(32<<10)) && !strings.Contains(msg, "32 KiB") {
		t.Errorf("big env value: %q", msg)
	}
}

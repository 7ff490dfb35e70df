package e2e

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// startSession starts a session that must succeed and returns its result.
func (s *server) startSession(args map[string]any) map[string]any {
	s.t.Helper()
	r := s.ok("start_session", args)
	if str(r, "status") != "running" {
		s.t.Fatalf("session not running: %v", r)
	}
	return r
}

// typeLine sends a line to a session and returns the answer's text.
func (s *server) typeLine(id, line string, extra ...any) (string, map[string]any) {
	s.t.Helper()
	args := map[string]any{"job_id": id, "text": line, "enter": true}
	for i := 0; i+1 < len(extra); i += 2 {
		args[extra[i].(string)] = extra[i+1]
	}
	r := s.ok("send_input", args)
	return str(r, "output"), r
}

func TestSessionPythonREPL(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.startSession(map[string]any{"language": "python", "command": "python3", "until": ">>> $"})
	id := str(r, "job_id")
	if !strings.Contains(str(r, "output"), ">>>") {
		t.Fatalf("initial output has no prompt: %q", str(r, "output"))
	}
	out, _ := s.typeLine(id, "1+1", "until", `(?m)^2\r?\n>>> $`)
	if !regexp.MustCompile(`(?m)^2\r?$`).MatchString(out) || !strings.HasSuffix(out, ">>> ") {
		t.Fatalf("1+1 answered %q", out)
	}
	// Without until: the answer settles (quiet for settle_ms) and comes back whole.
	out, _ = s.typeLine(id, "6*7")
	if !strings.Contains(out, "42") || !strings.HasSuffix(out, ">>> ") {
		t.Fatalf("6*7 answered %q (settled read)", out)
	}
	// A multi-line definition, then a call.
	s.typeLine(id, "def sq(x):")
	s.typeLine(id, "    return x * x")
	out, _ = s.typeLine(id, "", "until", ">>> $")
	if !strings.HasSuffix(out, ">>> ") {
		t.Fatalf("end of def answered %q", out)
	}
	out, _ = s.typeLine(id, "sq(12)", "until", `144\s*\n>>> $`)
	if !strings.Contains(out, "144") {
		t.Fatalf("sq(12) answered %q", out)
	}
	rec := s.ok("get_job", map[string]any{"job_id": id})
	sess, _ := rec["session"].(map[string]any)
	if str(rec, "kind") != "session" || sess == nil || str(sess, "mode") != "pty" || num(t, sess, "rows") != 24 || num(t, sess, "cols") != 80 {
		t.Fatalf("record: %v", rec)
	}
	if dl, err := time.Parse(time.RFC3339Nano, str(sess, "idle_deadline")); err != nil || time.Until(dl) < 500*time.Second {
		t.Errorf("idle_deadline %q (default idle 600 s): %v", str(sess, "idle_deadline"), err)
	}
	// kill_job: TERM through the supervisor's Signal frame, then removal.
	start := time.Now()
	k := s.ok("kill_job", map[string]any{"job_id": id, "grace_s": 20})
	if str(k, "status") != "killed" || str(k, "reason") != "requested" {
		t.Fatalf("kill: %v", k)
	}
	// python3 dies of SIGTERM at once: ending well within the grace period
	// shows the signal reached it (rather than the removal after grace_s).
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("kill took %s: TERM did not reach the REPL", took)
	}
	s.waitNoContainers(15 * time.Second)
	// Input to a finished session is refused.
	msg := s.toolErr("send_input", map[string]any{"job_id": id, "text": "1", "enter": true})
	if !strings.Contains(msg, "finished") {
		t.Errorf("input to a finished session: %q", msg)
	}
}

func TestSessionBashStateResizeCtrlCAndHiddenInput(t *testing.T) {
	s := startServer(t)
	r := s.startSession(map[string]any{"command": "bash", "name": "shell", "until": `\$ $`})
	id := str(r, "job_id")
	prompt := `\$ $`
	s.typeLine(id, "cd /tmp", "until", prompt)
	out, _ := s.typeLine(id, "pwd", "until", `/tmp\r?\n.*\$ $`)
	if !strings.Contains(out, "/tmp") {
		t.Fatalf("pwd after cd: %q", out)
	}
	s.typeLine(id, "GREETING=hello-state", "until", prompt)
	out, _ = s.typeLine(id, "echo value:$GREETING", "until", `value:hello-state`)
	if !strings.Contains(out, "value:hello-state") {
		t.Fatalf("variable lost: %q", out)
	}

	rz := s.ok("resize_terminal", map[string]any{"job_id": id, "rows": 40, "cols": 120})
	if num(t, rz, "rows") != 40 || num(t, rz, "cols") != 120 {
		t.Fatalf("resize: %v", rz)
	}
	out, _ = s.typeLine(id, "stty size", "until", `\d+ \d+\r?\n`)
	if !strings.Contains(out, "40 120") {
		t.Fatalf("stty size after resize: %q", out)
	}
	rec := s.ok("get_job", map[string]any{"job_id": id})
	if sess, _ := rec["session"].(map[string]any); sess == nil || num(t, sess, "rows") != 40 || num(t, sess, "cols") != 120 || str(sess, "name") != "shell" {
		t.Fatalf("record after resize: %v", rec["session"])
	}

	// Ctrl-C interrupts the foreground program; the prompt is back within 1 s.
	s.ok("send_input", map[string]any{"job_id": id, "text": "sleep 100", "enter": true, "wait_s": 0.3})
	start := time.Now()
	ck := s.ok("send_input", map[string]any{"job_id": id, "keys": []any{"ctrl_c"}, "until": `\$ $`, "wait_s": 5})
	if took := time.Since(start); !ck["matched"].(bool) || took > 4*time.Second {
		t.Fatalf("prompt after ctrl_c: matched=%v in %s: %q", ck["matched"], took, str(ck, "output"))
	}
	out, _ = s.typeLine(id, "echo alive", "until", `alive\r?\n`)
	if !strings.Contains(out, "alive") {
		t.Fatalf("shell after ctrl_c: %q", out)
	}

	// Hidden input: the prompt shows, the secret is not echoed.
	out, _ = s.typeLine(id, "read -s -p 'Password: ' p; echo got:${#p}", "until", "Password: $")
	if !strings.HasSuffix(out, "Password: ") {
		t.Fatalf("password prompt: %q", out)
	}
	out, _ = s.typeLine(id, "s3cr3t", "until", `got:\d+`)
	if !strings.Contains(out, "got:6") || strings.Contains(out, "s3cr3t") {
		t.Fatalf("after the secret: %q", out)
	}
	all, _ := s.readAll(id)
	if strings.Contains(all, "s3cr3t") {
		t.Fatalf("the secret was echoed: %q", all)
	}

	// list_jobs kind: session shows the session with its details.
	jobs := s.jobList(map[string]any{"kind": "session"})
	j := findJob(jobs, id)
	if j == nil {
		t.Fatalf("session not listed: %v", jobs)
	}
	if sess, _ := j["session"].(map[string]any); sess == nil || str(sess, "mode") != "pty" || str(sess, "idle_deadline") == "" {
		t.Fatalf("list entry: %v", j)
	}
	for _, other := range s.jobList(map[string]any{"kind": "command"}) {
		if str(other, "job_id") == id {
			t.Fatal("session listed as a command")
		}
	}
}

func TestSessionNodeREPL(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.startSession(map[string]any{"language": "javascript", "command": "node", "until": "> $", "wait_s": 20})
	id := str(r, "job_id")
	out, _ := s.typeLine(id, "[1,2,3].map(x => x * 7).join('-')", "until", `'7-14-21'`, "wait_s", 10)
	if !strings.Contains(out, "'7-14-21'") {
		t.Fatalf("node answered %q", out)
	}
}

func TestSessionTopScreen(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.startSession(map[string]any{"command": "top", "args": []any{"-d", "1"}, "until": "top -", "wait_s": 10})
	id := str(r, "job_id")
	if !strings.Contains(str(r, "output"), "top -") || strings.Contains(str(r, "output"), "\x1b") {
		t.Fatalf("stripped initial output: %q", str(r, "output"))
	}
	raw := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "strip_ansi": false})
	if !strings.Contains(str(raw, "output"), "\x1b[") {
		t.Fatalf("raw output has no escape sequences: %q", str(raw, "output"))
	}
	scr := s.ok("read_output", map[string]any{"job_id": id, "screen": true})
	grid, _ := scr["screen"].(map[string]any)
	if grid == nil {
		t.Fatalf("no screen: %v", scr)
	}
	lines, _ := grid["lines"].([]any)
	if num(t, grid, "rows") != 24 || num(t, grid, "cols") != 80 || len(lines) != 24 {
		t.Fatalf("screen size: %v", grid)
	}
	if first, _ := lines[0].(string); !strings.HasPrefix(first, "top -") {
		t.Fatalf("first row %q", first)
	}
	// The screen follows a resize.
	s.ok("resize_terminal", map[string]any{"job_id": id, "rows": 10, "cols": 100})
	scr = s.ok("read_output", map[string]any{"job_id": id, "screen": true, "wait_s": 3, "until": "top -"})
	grid = scr["screen"].(map[string]any)
	lines = grid["lines"].([]any)
	if num(t, grid, "rows") != 10 || num(t, grid, "cols") != 100 || len(lines) != 10 || !strings.HasPrefix(lines[0].(string), "top -") {
		t.Fatalf("screen after resize: %v", grid)
	}
	s.ok("send_input", map[string]any{"job_id": id, "text": "q", "read": false})
	end := s.waitJob(id, "", 10*time.Second)
	if str(end, "status") != "completed" {
		t.Fatalf("top after q: %v", end)
	}
	// An ended session's last screen is replayed from its output.
	scr = s.ok("read_output", map[string]any{"job_id": id, "screen": true})
	if scr["screen"] == nil {
		t.Fatalf("no screen after the end: %v", scr)
	}
}

func TestSessionPipeMode(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.startSession(map[string]any{"command": "cat", "mode": "pipe", "wait_s": 0})
	id := str(r, "job_id")
	out, _ := s.typeLine(id, "first line", "until", "first line\n")
	if out != "first line\n" {
		t.Fatalf("cat echoed %q", out)
	}
	out, _ = s.typeLine(id, "second")
	if out != "second\n" {
		t.Fatalf("cat echoed %q", out)
	}
	msg := s.toolErr("resize_terminal", map[string]any{"job_id": id, "rows": 30, "cols": 100})
	if !strings.Contains(msg, "pipe") {
		t.Errorf("resize of a pipe session: %q", msg)
	}
	msg = s.toolErr("read_output", map[string]any{"job_id": id, "screen": true})
	if !strings.Contains(msg, "no terminal") {
		t.Errorf("screen of a pipe session: %q", msg)
	}
	rec := s.ok("get_job", map[string]any{"job_id": id})
	if sess, _ := rec["session"].(map[string]any); sess == nil || str(sess, "mode") != "pipe" || sess["rows"] != nil {
		t.Fatalf("pipe record: %v", rec["session"])
	}
	end := s.ok("send_input", map[string]any{"job_id": id, "eof": true, "wait_s": 5, "until": "never"})
	if str(end, "status") != "completed" {
		end = s.waitJob(id, "", 10*time.Second)
		if str(end, "status") != "completed" {
			t.Fatalf("cat after eof: %v", end)
		}
	}
	// resize_terminal on a command job is a tool error too.
	cmd := s.ok("run_command", map[string]any{"command": "true"})
	msg = s.toolErr("resize_terminal", map[string]any{"job_id": str(cmd, "job_id"), "rows": 30, "cols": 100})
	if !strings.Contains(msg, "not a session") {
		t.Errorf("resize of a command: %q", msg)
	}
}

func TestSessionsIndependent(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ids := make([]string, 3)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res := s.call("start_session", map[string]any{"command": "bash", "until": `\$ $`, "wait_s": 20})
			mu.Lock()
			defer mu.Unlock()
			if res.IsError {
				errs = append(errs, text(res))
				return
			}
			ids[i] = str(structured(t, res), "job_id")
		}(i)
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("start: %v", errs)
	}
	for i, id := range ids {
		s.typeLine(id, fmt.Sprintf("MINE=session-%d; cd /tmp && mkdir -p dir-of-%d && cd dir-of-%d", i, i, i), "until", `\$ $`)
	}
	for i, id := range ids {
		want := fmt.Sprintf("session-%d /tmp/dir-of-%d", i, i)
		out, _ := s.typeLine(id, "echo $MINE $PWD; ls /tmp", "until", `\$ $`)
		if !strings.Contains(out, want) {
			t.Fatalf("session %d: %q, want %q", i, out, want)
		}
		// Each session has its own sandbox: only its own directory in /tmp.
		for j := range ids {
			if j != i && strings.Contains(out, fmt.Sprintf("dir-of-%d", j)) {
				t.Fatalf("session %d sees session %d's directory: %q", i, j, out)
			}
		}
	}
	cs := s.containers()
	var seen []string
	for _, c := range cs {
		seen = append(seen, c.JobID)
	}
	sort.Strings(seen)
	if len(cs) < 3 {
		t.Fatalf("containers: %v", seen)
	}
}

func TestSessionIdleTimeout(t *testing.T) {
	s := startServer(t)
	r := s.startSession(map[string]any{"command": "bash", "idle_timeout_s": 2, "until": `\$ $`})
	id := str(r, "job_id")
	if sess, _ := r["session"].(map[string]any); sess == nil || num(t, sess, "idle_timeout_s") != 2 {
		t.Fatalf("session: %v", r["session"])
	}
	// Input keeps it alive past its idle timeout.
	for i := 0; i < 3; i++ {
		time.Sleep(time.Second)
		s.typeLine(id, "true", "wait_s", 0)
	}
	if rec := s.ok("get_job", map[string]any{"job_id": id}); str(rec, "status") != "running" {
		t.Fatalf("ended despite input: %v", rec)
	}
	start := time.Now()
	end := s.ok("get_job", map[string]any{"job_id": id, "wait_s": 10})
	took := time.Since(start)
	if str(end, "status") != "killed" || str(end, "reason") != "idle" {
		t.Fatalf("after silence: %v", end)
	}
	if took < time.Second || took > 10*time.Second {
		t.Errorf("ended %s after the last input, want about 2 s", took)
	}
	s.waitNoContainers(10 * time.Second)
}

func TestSessionRefusals(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"command": "bash", "rows": 0}, "rows 0 is out of range"},
		{map[string]any{"command": "bash", "cols": 100000}, "cols 100000 is out of range"},
		{map[string]any{"command": "bash", "mode": "tty"}, `mode "tty" is not one of`},
		{map[string]any{"command": "bash", "idle_timeout_s": 999999}, "sessions.idle_timeout_s.max"},
		{map[string]any{"command": "bash", "language": "cobol"}, `unknown language "cobol"`},
		{map[string]any{"args": []any{"-i"}}, "args given without command"},
		{map[string]any{"command": "ba\x00sh"}, "NUL"},
		{map[string]any{"command": "cat", "mode": "pipe", "rows": 10}, "rows and cols are for mode pty"},
	} {
		msg := s.toolErr("start_session", c.args)
		if !strings.Contains(msg, c.want) {
			t.Errorf("start_session(%v): %q, want %q", c.args, msg, c.want)
		}
	}
	if len(s.containers()) != 0 {
		t.Fatal("a refused session made a container")
	}
	r := s.startSession(map[string]any{"command": "bash", "wait_s": 0})
	id := str(r, "job_id")
	msg := s.toolErr("send_input", map[string]any{"job_id": id, "keys": []any{"up", "ctrl_q"}})
	if !strings.Contains(msg, `key "ctrl_q" is not known`) {
		t.Errorf("unknown key: %q", msg)
	}
	msg = s.toolErr("send_input", map[string]any{"job_id": id, "text": strings.Repeat("x", 1<<20+1)})
	if !strings.Contains(msg, "limit is 1048576") {
		t.Errorf("text over the limit: %q", msg)
	}
	msg = s.toolErr("send_input", map[string]any{"job_id": id, "text": "x", "settle_ms": -1})
	if !strings.Contains(msg, "settle_ms") {
		t.Errorf("settle_ms -1: %q", msg)
	}
	msg = s.toolErr("resize_terminal", map[string]any{"job_id": id, "rows": 0, "cols": 80})
	if !strings.Contains(msg, "rows 0 is out of range") {
		t.Errorf("resize rows 0: %q", msg)
	}
	msg = s.toolErr("read_output", map[string]any{"job_id": id, "screen": true, "tail_lines": 5})
	if !strings.Contains(msg, "do not apply") {
		t.Errorf("screen with tail_lines: %q", msg)
	}
	// exit ends the session; input after that is refused.
	s.typeLine(id, "exit", "wait_s", 0)
	s.waitJob(id, "completed", 10*time.Second)
	msg = s.toolErr("send_input", map[string]any{"job_id": id, "keys": []any{"enter"}})
	if !strings.Contains(msg, "finished") {
		t.Errorf("input to a finished session: %q", msg)
	}
}

// TestSessionPythonRoundTrip measures send_input of 1+1 to its answer in a
// Python REPL (the bench figure); it logs p50 and p95 and fails only when the
// round trip is absurdly slow.
func TestSessionPythonRoundTrip(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	id := str(s.startSession(map[string]any{"language": "python", "command": "python3", "until": ">>> $"}), "job_id")
	measure := func(extra ...any) (p50, p95 time.Duration) {
		var ds []time.Duration
		for i := 0; i < 40; i++ {
			start := time.Now()
			out, _ := s.typeLine(id, "1+1", extra...)
			ds = append(ds, time.Since(start))
			if !strings.Contains(out, "2") {
				t.Fatalf("1+1 answered %q", out)
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2], ds[len(ds)*95/100]
	}
	p50, p95 := measure("until", `2\r?\n>>> $`)
	t.Logf("python 1+1 round trip with until: p50 %s, p95 %s", p50, p95)
	sp50, sp95 := measure()
	t.Logf("python 1+1 round trip with the default settle (150 ms): p50 %s, p95 %s", sp50, sp95)
	if p50 > 8*time.Second { // a hang check; speed is the bench's
		t.Fatalf("round trip p50 %s", p50)
	}
}

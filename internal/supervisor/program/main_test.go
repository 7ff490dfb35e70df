package program

// These tests build the supervisor and drive it over pipes exactly as the
// server does, on the host, always in "tree" kill mode (kill(-1) would hit
// the test's own processes; "container" mode must be refused here).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

var (
	raceEnabled bool
	supBin      string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxer-supervisor-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	supBin = filepath.Join(dir, "sandboxer-supervisor")
	args := []string{"build", "-o", supBin}
	if raceEnabled {
		args = append(args, "-race") // the supervisor's own goroutines are checked too
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, "../../../cmd/sandboxer-supervisor")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the supervisor:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type rawFrame struct {
	typ byte
	p   []byte
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// client plays the server.
type client struct {
	t        *testing.T
	cmd      *exec.Cmd
	inMu     sync.Mutex
	in       io.WriteCloser
	frames   chan rawFrame
	readErr  error
	diag     *lockedBuffer
	procDone chan error
	acked    uint64 // the last Ack: bytes the job's stdin took

	hello   *proto.Hello
	started *proto.Started
	stdout  bytes.Buffer
	stderr  bytes.Buffer
	exit    *proto.Exit
	types   []byte
	closed  bool // stdout ended
}

func startSupervisor(t *testing.T) *client {
	t.Helper()
	return startSupervisorArgs(t)
}

func startSupervisorArgs(t *testing.T, args ...string) *client {
	t.Helper()
	c := &client{t: t, frames: make(chan rawFrame, 1<<16), diag: &lockedBuffer{}, procDone: make(chan error, 1)}
	c.cmd = exec.Command(supBin, args...)
	c.cmd.Stderr = c.diag
	// Race-built supervisor: no 1 s pause at exit, and a race fails the run (exit 66).
	c.cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	var err error
	if c.in, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r := proto.NewReader(out)
		for {
			typ, p, err := r.Next()
			if err != nil {
				if err != io.EOF {
					c.readErr = err
				}
				close(c.frames)
				c.procDone <- c.cmd.Wait()
				return
			}
			c.frames <- rawFrame{typ, p}
		}
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("supervisor stderr:\n%s", c.diag.String())
		}
	})
	return c
}

func (c *client) send(typ byte, p []byte) {
	c.t.Helper()
	c.inMu.Lock()
	defer c.inMu.Unlock()
	if err := proto.WriteFrame(c.in, typ, p); err != nil {
		c.t.Fatalf("sending %s: %v", proto.TypeName(typ), err)
	}
}

func (c *client) sendJSON(typ byte, v any) {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.send(typ, b)
}

func (c *client) closeInput() {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	c.in.Close()
}

// pump handles frames until cond holds; false on timeout or end of stream.
func (c *client) pump(cond func() bool, timeout time.Duration) bool {
	c.t.Helper()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	for !cond() {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.closed = true
				return cond()
			}
			c.handle(f)
		case <-tm.C:
			return false
		}
	}
	return true
}

func (c *client) handle(f rawFrame) {
	c.t.Helper()
	c.types = append(c.types, f.typ)
	if c.exit != nil {
		c.t.Errorf("%s frame after Exit", proto.TypeName(f.typ))
	}
	unmarshal := func(v any) {
		if err := json.Unmarshal(f.p, v); err != nil {
			c.t.Errorf("%s payload %q: %v", proto.TypeName(f.typ), f.p, err)
		}
	}
	switch f.typ {
	case proto.TypeHello:
		c.hello = &proto.Hello{}
		unmarshal(c.hello)
	case proto.TypeStarted:
		c.started = &proto.Started{}
		unmarshal(c.started)
	case proto.TypeStdout:
		c.stdout.Write(f.p)
	case proto.TypeStderr:
		c.stderr.Write(f.p)
	case proto.TypeExit:
		c.exit = &proto.Exit{}
		unmarshal(c.exit)
	case proto.TypeAck:
		n, err := proto.DecodeAck(f.p)
		if err != nil || n < c.acked {
			c.t.Errorf("ack %d (err %v) after %d: acks must grow", n, err, c.acked)
		}
		c.acked = n
	default:
		c.t.Errorf("unknown frame type %q", f.typ)
	}
	if len(c.types) == 1 && f.typ != proto.TypeHello {
		c.t.Errorf("first frame is %s, want Hello", proto.TypeName(f.typ))
	}
	if (f.typ == proto.TypeStdout || f.typ == proto.TypeStderr) && c.started == nil {
		c.t.Errorf("output before Started")
	}
}

// wait returns the Exit report once the supervisor has exited with the job's code.
// hangSlack widens a test's bound on a job's end: the bound tells a hung
// supervisor from a slow one on a busy machine (a race build, load 12 on two
// cores), not how fast it is.
const hangSlack = 4

func (c *client) wait(timeout time.Duration) *proto.Exit {
	c.t.Helper()
	timeout *= hangSlack
	if !c.pump(func() bool { return c.closed }, timeout) {
		c.t.Fatalf("no end of stream within %v; stdout %q stderr %q", timeout, c.stdout.String(), c.stderr.String())
	}
	if c.readErr != nil {
		c.t.Fatalf("reading frames: %v", c.readErr)
	}
	if c.exit == nil {
		c.t.Fatalf("stream ended without Exit; stdout %q", c.stdout.String())
	}
	select {
	case err := <-c.procDone:
		// The supervisor exits with the job's code, so the engine agrees.
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			c.t.Fatalf("supervisor: %v", err)
		}
		if code != c.exit.ExitCode&0xff {
			c.t.Fatalf("supervisor exited with %d, want the job's %d", code, c.exit.ExitCode&0xff)
		}
	case <-time.After(hangSlack * 5 * time.Second):
		c.t.Fatal("supervisor did not exit after Exit")
	}
	return c.exit
}

func hostEnv() []string { return []string{"PATH=" + os.Getenv("PATH"), "HOME=/tmp", "LC_ALL=C"} }

func spec(argv ...string) proto.Spec {
	return proto.Spec{Argv: argv, Env: hostEnv(), KillMode: proto.KillTree, Stdin: proto.StdinClosed}
}

// runJob sends spec and waits for the Exit report.
func runJob(t *testing.T, s proto.Spec, timeout time.Duration) (*client, *proto.Exit) {
	t.Helper()
	c := startSupervisor(t)
	c.sendJSON(proto.TypeSpec, s)
	return c, c.wait(timeout)
}

// marker returns a unique sleep duration such as "1000.482913" to find a
// job's processes in /proc.
func marker(base int) string { return fmt.Sprintf("%d.%06d", base, rand.IntN(1000000)) }

// alive returns the pids whose command line contains s.
func alive(s string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' || e.Name() == fmt.Sprint(os.Getpid()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func assertGone(t *testing.T, markers ...string) {
	t.Helper()
	for _, m := range markers {
		if p := alive(m); len(p) > 0 {
			t.Errorf("process(es) %v with %s still alive", p, m)
		}
	}
}

func TestHelloFirst(t *testing.T) {
	c := startSupervisor(t)
	if !c.pump(func() bool { return c.hello != nil }, hangSlack*5*time.Second) {
		t.Fatal("no Hello")
	}
	if c.hello.Protocol != proto.Version || c.hello.Supervisor == "" || c.hello.PID != c.cmd.Process.Pid || c.hello.PID == 1 {
		t.Fatalf("hello %+v", c.hello)
	}
	// Waiting in the pool runs nothing; end of input then ends the supervisor.
	c.closeInput()
	e := c.wait(5 * time.Second)
	if e.Error == "" || e.ExitCode != codeBadSpec || c.started != nil {
		t.Fatalf("exit %+v", e)
	}
}

func TestEchoStdoutStderr(t *testing.T) {
	c, e := runJob(t, spec("sh", "-c", "echo out1; echo err1 >&2; echo out2; echo err2 >&2; head -c 3000000 /dev/zero"), 10*time.Second)
	if e.ExitCode != 0 || e.Error != "" || e.Signal != "" || e.TimedOut || e.Killed {
		t.Fatalf("exit %+v", e)
	}
	want := "out1\nout2\n" + strings.Repeat("\x00", 3000000)
	if c.stdout.String() != want {
		t.Errorf("stdout: %d bytes, prefix %q", c.stdout.Len(), c.stdout.String()[:min(20, c.stdout.Len())])
	}
	if c.stderr.String() != "err1\nerr2\n" {
		t.Errorf("stderr %q", c.stderr.String())
	}
	if c.started == nil || c.started.PID <= 0 || time.Since(c.started.StartedAt) > time.Minute {
		t.Errorf("started %+v", c.started)
	}
	if c.types[len(c.types)-1] != proto.TypeExit {
		t.Errorf("last frame %q", c.types[len(c.types)-1])
	}
	if e.Usage.Source != "rusage" || e.Usage.WallMS < 0 {
		t.Errorf("usage %+v", e.Usage)
	}
}

func TestExitCodes(t *testing.T) {
	if _, e := runJob(t, spec("sh", "-c", "exit 3"), 5*time.Second); e.ExitCode != 3 || e.Signal != "" {
		t.Errorf("exit 3: %+v", e)
	}
	if _, e := runJob(t, spec("sh", "-c", "kill -KILL $$"), 5*time.Second); e.ExitCode != 137 || e.Signal != "SIGKILL" {
		t.Errorf("killed: %+v", e)
	}
}

func TestNotFound(t *testing.T) {
	c, e := runJob(t, spec("no-such-command-sbx"), 5*time.Second)
	if e.ExitCode != 127 || !strings.Contains(e.Error, "not found") || c.started != nil {
		t.Fatalf("exit %+v started %v", e, c.started)
	}
	huge := strings.Repeat("x", proto.MaxPayload-8192)
	if _, e = runJob(t, spec(huge), 5*time.Second); e.ExitCode != 127 || len(e.Error) > 1000 {
		t.Fatalf("huge argv[0]: code %d, error of %d bytes", e.ExitCode, len(e.Error))
	}
	_, e = runJob(t, spec("/nonexistent/bin/x"), 5*time.Second)
	if e.ExitCode != 127 || e.Error == "" {
		t.Fatalf("absolute: %+v", e)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "notexec"), []byte("#!/bin/sh\n"), 0o644)
	s := spec("./notexec")
	s.Cwd = dir
	if _, e = runJob(t, s, 5*time.Second); e.ExitCode != 126 || e.Error == "" {
		t.Fatalf("not executable: %+v", e)
	}
	s = spec("true")
	s.Cwd = filepath.Join(dir, "missing")
	if _, e = runJob(t, s, 5*time.Second); e.ExitCode != 126 || !strings.Contains(e.Error, "working directory") {
		t.Fatalf("missing cwd: %+v", e)
	}
	// The job's PATH is used, not the supervisor's.
	os.WriteFile(filepath.Join(dir, "mytool"), []byte("#!/bin/sh\necho mytool ran in $PWD\n"), 0o755)
	s = spec("mytool")
	s.Env = []string{"PATH=/nonexistent:" + dir}
	s.Argv = []string{"mytool"}
	if c, e := runJob(t, s, 5*time.Second); e.ExitCode != 0 || !strings.Contains(c.stdout.String(), "mytool ran") {
		t.Fatalf("PATH lookup: %+v %q", e, c.stdout.String())
	}
}

func TestCwdAndEnv(t *testing.T) {
	dir := t.TempDir()
	s := spec("sh", "-c", `pwd; echo "$FOO"; env | wc -l`)
	s.Cwd, s.Env = dir, []string{"PATH=/usr/bin:/bin", "FOO=bar baz"}
	c, e := runJob(t, s, 5*time.Second)
	lines := strings.Fields(c.stdout.String())
	if e.ExitCode != 0 || len(lines) != 4 || lines[0] != dir || lines[1] != "bar" {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	// sh adds PWD (and maybe SHLVL, _): no variable of the supervisor leaks.
	if strings.Contains(c.stdout.String(), "HOME") {
		t.Errorf("environment leaked: %q", c.stdout.String())
	}
}

func TestStdinPipe(t *testing.T) {
	c := startSupervisor(t)
	s := spec("sh", "-c", "cat; echo end")
	s.Stdin = proto.StdinPipe
	c.sendJSON(proto.TypeSpec, s)
	c.send(proto.TypeData, []byte("hello "))
	c.send(proto.TypeData, []byte("world\n"))
	if !c.pump(func() bool { return strings.Contains(c.stdout.String(), "world") }, 5*time.Second) {
		t.Fatalf("stdin not relayed: %q", c.stdout.String())
	}
	c.send(proto.TypeEOF, nil)
	e := c.wait(5 * time.Second)
	if e.ExitCode != 0 || c.stdout.String() != "hello world\nend\n" {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	// Flow control: every byte the job took was acknowledged.
	if c.acked != uint64(len("hello world\n")) {
		t.Fatalf("acked %d bytes, want %d", c.acked, len("hello world\n"))
	}
}

func TestStdinClosed(t *testing.T) {
	c := startSupervisor(t)
	c.sendJSON(proto.TypeSpec, spec("sh", "-c", "if read x; then echo got $x; else echo eof; fi"))
	c.send(proto.TypeData, []byte("ignored\n"))
	e := c.wait(5 * time.Second)
	if e.ExitCode != 0 || c.stdout.String() != "eof\n" {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
}

func TestDeadline(t *testing.T) {
	m := marker(100)
	s := spec("sleep", m)
	s.TimeoutMS, s.GraceMS = 300, 500
	t0 := time.Now()
	_, e := runJob(t, s, 10*time.Second)
	took := time.Since(t0)
	if !e.TimedOut || e.ExitCode != 143 || e.Signal != "SIGTERM" {
		t.Fatalf("exit %+v", e)
	}
	if took > 4*(300*time.Millisecond+500*time.Millisecond)+time.Second || e.Usage.WallMS < 250 { // bounded, not hung
		t.Errorf("took %v, wall %d ms", took, e.Usage.WallMS)
	}
	assertGone(t, m)
}

// escapeJob leaves processes that escape a process group or session, one
// of which ignores SIGTERM.
func escapeJob() (script string, markers []string) {
	m1, m2, m3, m4 := marker(1000), marker(1001), marker(1002), marker(1003)
	script = fmt.Sprintf(`setsid sleep %s &
(sleep %s &) 
setsid sh -c 'trap "" TERM; exec sleep %s' &
nohup sleep %s >/dev/null 2>&1 &
sleep 0.2; echo ready; wait`, m1, m2, m3, m4)
	return script, []string{m1, m2, m3, m4}
}

func TestDeadlineKillsEscapedProcesses(t *testing.T) {
	script, markers := escapeJob()
	s := spec("sh", "-c", script)
	s.TimeoutMS, s.GraceMS = 600, 400
	t0 := time.Now()
	c, e := runJob(t, s, 10*time.Second)
	if !e.TimedOut || !strings.Contains(c.stdout.String(), "ready") {
		t.Fatalf("exit %+v stdout %q", e, c.stdout.String())
	}
	if took := time.Since(t0); took > 4*(600*time.Millisecond+400*time.Millisecond)+time.Second { // bounded, not hung
		t.Errorf("took %v", took)
	}
	assertGone(t, markers...)
}

func TestKillFrame(t *testing.T) {
	script, markers := escapeJob()
	c := startSupervisor(t)
	c.sendJSON(proto.TypeSpec, spec("sh", "-c", script))
	if !c.pump(func() bool { return strings.Contains(c.stdout.String(), "ready") }, 5*time.Second) {
		t.Fatal("job not ready")
	}
	if len(alive(markers[0])) == 0 || len(alive(markers[2])) == 0 {
		t.Fatal("the escaped processes were not running")
	}
	t0 := time.Now()
	c.send(proto.TypeKill, nil)
	e := c.wait(5 * time.Second)
	if !e.Killed || e.TimedOut || e.ExitCode != 137 || e.Signal != "SIGKILL" || time.Since(t0) > 5*time.Second {
		t.Fatalf("exit %+v after %v", e, time.Since(t0))
	}
	assertGone(t, markers...)
}

func TestLeftoversKilledWhenMainEnds(t *testing.T) {
	m := marker(1004)
	c, e := runJob(t, spec("sh", "-c", "sleep "+m+" & echo hi"), 10*time.Second)
	if e.ExitCode != 0 || c.stdout.String() != "hi\n" || e.Usage.WallMS > 1000 {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	if !strings.Contains(strings.Join(e.Events, "\n"), "leftover") {
		t.Errorf("events %q", e.Events)
	}
	assertGone(t, m)
}

func TestSignalINT(t *testing.T) {
	c := startSupervisor(t)
	c.sendJSON(proto.TypeSpec, spec("sh", "-c", `trap 'echo got INT; exit 7' INT; echo ready; while :; do sleep 0.05; done`))
	if !c.pump(func() bool { return strings.Contains(c.stdout.String(), "ready") }, 5*time.Second) {
		t.Fatal("job not ready")
	}
	c.send(proto.TypeSignal, []byte("INT"))
	e := c.wait(5 * time.Second)
	if e.ExitCode != 7 || !strings.Contains(c.stdout.String(), "got INT") {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	c = startSupervisor(t)
	c.sendJSON(proto.TypeSpec, spec("sleep", "100"))
	c.send(proto.TypeSignal, []byte("bogus"))
	c.send(proto.TypeSignal, []byte("SIGTERM"))
	if e := c.wait(5 * time.Second); e.ExitCode != 143 || e.Signal != "SIGTERM" || e.Killed {
		t.Fatalf("%+v", e)
	}
}

func TestUnreadStdinDoesNotBlockKill(t *testing.T) {
	c := startSupervisor(t)
	s := spec("sleep", "100")
	s.Stdin = proto.StdinPipe
	c.sendJSON(proto.TypeSpec, s)
	// 10 MiB: past the pipe buffer and past the supervisor's queue.
	chunk := bytes.Repeat([]byte("x"), proto.MaxPayload)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := 0; i < 10; i++ {
			c.send(proto.TypeData, chunk)
		}
		c.send(proto.TypeKill, nil)
	}()
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("the supervisor stopped reading its input")
	}
	e := c.wait(5 * time.Second)
	if !e.Killed || e.Signal != "SIGKILL" {
		t.Fatalf("%+v", e)
	}
	if !strings.Contains(strings.Join(e.Events, "\n"), "dropped") {
		t.Errorf("no event about dropped input: %q", e.Events)
	}
}

func TestServerDetach(t *testing.T) {
	// End of the supervisor's input neither kills the job nor closes its stdin.
	c := startSupervisor(t)
	s := spec("sh", "-c", "sleep 0.3; echo done")
	s.Stdin = proto.StdinPipe
	c.sendJSON(proto.TypeSpec, s)
	c.closeInput()
	e := c.wait(5 * time.Second)
	if e.ExitCode != 0 || c.stdout.String() != "done\n" {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	// ... and the deadline still holds.
	c = startSupervisor(t)
	s = spec("sh", "-c", "read x; echo read $x")
	s.Stdin, s.TimeoutMS, s.GraceMS = proto.StdinPipe, 400, 200
	c.sendJSON(proto.TypeSpec, s)
	c.closeInput()
	if e := c.wait(5 * time.Second); !e.TimedOut || c.stdout.Len() != 0 {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
}

func TestBadInput(t *testing.T) {
	for name, send := range map[string]func(c *client){
		"malformed spec":    func(c *client) { c.send(proto.TypeSpec, []byte(`{"argv":`)) },
		"invalid spec":      func(c *client) { c.send(proto.TypeSpec, []byte(`{"argv":["true"],"kill_mode":"host"}`)) },
		"data before spec":  func(c *client) { c.send(proto.TypeData, []byte("x")) },
		"garbage":           func(c *client) { c.inMu.Lock(); c.in.Write([]byte("\xff\xff\xff\xff\xff\xff")); c.inMu.Unlock() },
		"truncated":         func(c *client) { c.inMu.Lock(); c.in.Write([]byte{'S', 0, 0, 1}); c.inMu.Unlock(); c.closeInput() },
		"container refused": func(c *client) { s := spec("true"); s.KillMode = proto.KillContainer; c.sendJSON(proto.TypeSpec, s) },
	} {
		t.Run(name, func(t *testing.T) {
			c := startSupervisor(t)
			send(c)
			e := c.wait(5 * time.Second)
			if e.ExitCode != codeBadSpec || e.Error == "" || c.started != nil {
				t.Fatalf("%+v", e)
			}
			if name == "container refused" && !strings.Contains(e.Error, "refused") {
				t.Fatalf("%+v", e)
			}
		})
	}
}

func TestTTY(t *testing.T) {
	c := startSupervisor(t)
	s := spec("sh", "-c", `tty; stty size; [ -t 0 ] && echo stdin-is-tty; echo ready; read x; echo "got $x"; stty size`)
	s.TTY = &proto.TTYSpec{Rows: 24, Cols: 80}
	s.Stdin = proto.StdinPipe
	c.sendJSON(proto.TypeSpec, s)
	if !c.pump(func() bool { return strings.Contains(c.stdout.String(), "ready") }, 5*time.Second) {
		t.Fatalf("job not ready: %q", c.stdout.String())
	}
	out := c.stdout.String()
	if !strings.Contains(out, "/dev/pts/") || !strings.Contains(out, "24 80\r\n") || !strings.Contains(out, "stdin-is-tty") {
		t.Fatalf("tty output %q", out)
	}
	c.sendJSON(proto.TypeResize, proto.TTYSpec{Rows: 50, Cols: 132})
	c.send(proto.TypeData, []byte("go\n"))
	e := c.wait(5 * time.Second)
	if e.ExitCode != 0 || !strings.Contains(c.stdout.String(), "got go") || !strings.Contains(c.stdout.String(), "50 132") {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	if c.stderr.Len() != 0 {
		t.Errorf("stderr frames with a TTY: %q", c.stderr.String())
	}
}

func TestTTYSignalAndEOF(t *testing.T) {
	// Ctrl-C semantics: INT goes to the pty's foreground process group.
	c := startSupervisor(t)
	s := spec("sh", "-c", `trap 'echo got-int; exit 9' INT; echo ready; while :; do sleep 0.05; done`)
	s.TTY, s.Stdin = &proto.TTYSpec{Rows: 24, Cols: 80}, proto.StdinPipe
	c.sendJSON(proto.TypeSpec, s)
	if !c.pump(func() bool { return strings.Contains(c.stdout.String(), "ready") }, 5*time.Second) {
		t.Fatal("job not ready")
	}
	c.send(proto.TypeSignal, []byte("INT"))
	if e := c.wait(5 * time.Second); e.ExitCode != 9 || !strings.Contains(c.stdout.String(), "got-int") {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	// EOF on a TTY is ^D: cat ends.
	c = startSupervisor(t)
	s = spec("cat")
	s.TTY, s.Stdin = &proto.TTYSpec{Rows: 24, Cols: 80}, proto.StdinPipe
	c.sendJSON(proto.TypeSpec, s)
	c.send(proto.TypeData, []byte("abc\n"))
	c.send(proto.TypeEOF, nil)
	if e := c.wait(5 * time.Second); e.ExitCode != 0 {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
}

func TestRlimits(t *testing.T) {
	s := spec("sh", "-c", "ulimit -n; ulimit -Hn; ulimit -c; cat /proc/self/limits")
	s.Rlimits = map[string]uint64{"nofile": 64, "core": 0, "nproc": 1 << 40}
	c, e := runJob(t, s, 5*time.Second)
	f := strings.Fields(c.stdout.String())
	if e.ExitCode != 0 || len(f) < 3 || f[0] != "64" || f[1] != "64" || f[2] != "0" {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	// Limits the supervisor can carry itself (see ownLimitsSuffice) reach
	// the job through fork, soft and hard, with no shim.
	s = spec("sh", "-c", "ulimit -n; ulimit -Hn; grep 'Max file size' /proc/self/limits")
	s.Rlimits = map[string]uint64{"nofile": 100, "fsize": 1 << 20}
	c, e = runJob(t, s, 5*time.Second)
	if f := strings.Fields(c.stdout.String()); e.ExitCode != 0 || len(f) < 7 || f[0] != "100" || f[1] != "100" || f[5] != "1048576" || f[6] != "1048576" {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	// argv[0] is the job's, not the shim's.
	s = spec("sh", "-c", `echo "$0"`)
	s.Rlimits = map[string]uint64{"fsize": 1 << 20}
	if c, e := runJob(t, s, 5*time.Second); e.ExitCode != 0 || c.stdout.String() != "sh\n" {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	// fsize: writing past it is stopped by SIGXFSZ.
	s = spec("sh", "-c", "head -c 100000 /dev/zero > "+filepath.Join(t.TempDir(), "f"))
	s.Rlimits = map[string]uint64{"fsize": 4096}
	if _, e := runJob(t, s, 5*time.Second); e.ExitCode == 0 {
		t.Fatalf("fsize not enforced: %+v", e)
	}
}

func TestUsageCPU(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not available")
	}
	_, e := runJob(t, spec("python3", "-c", "import time\nwhile time.process_time() < 1.0: pass"), 20*time.Second)
	if e.ExitCode != 0 || e.Usage.Source != "rusage" {
		t.Fatalf("%+v", e)
	}
	// 1 s of the loop's own CPU, plus the interpreter's start (more on a busy host).
	if e.Usage.CPUMS < 800 || e.Usage.CPUMS > 2500 {
		t.Fatalf("cpu %d ms, want the loop's 1000 ms plus the interpreter's start (800–2500)", e.Usage.CPUMS)
	}
	if e.Usage.WallMS < 900 {
		t.Errorf("wall %d ms", e.Usage.WallMS)
	}
}

func TestUsagePeakMemory(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not available")
	}
	const size = 200 << 20
	// Touched pages in a child of a shell: the whole tree counts.
	_, e := runJob(t, spec("sh", "-c", fmt.Sprintf(`python3 -c "b = b'\x01' * %d"; true`, size)), 20*time.Second)
	if e.ExitCode != 0 {
		t.Fatalf("%+v", e)
	}
	if p := e.Usage.PeakMemoryBytes; p < size*85/100 || p > size*115/100 {
		t.Fatalf("peak %d bytes (%d MiB), want %d MiB ± 15%%", p, p>>20, size>>20)
	}
}

func TestDeadlineGraceThenKill(t *testing.T) {
	m := marker(1005)
	s := spec("sh", "-c", "trap '' TERM; sleep "+m+"; echo survived")
	s.TimeoutMS, s.GraceMS = 300, 400
	t0 := time.Now()
	c, e := runJob(t, s, 10*time.Second)
	took := time.Since(t0)
	if !e.TimedOut || e.ExitCode != 137 || e.Signal != "SIGKILL" || strings.Contains(c.stdout.String(), "survived") {
		t.Fatalf("%+v %q", e, c.stdout.String())
	}
	if took < 700*time.Millisecond || took > 4*700*time.Millisecond+time.Second {
		t.Errorf("took %v, want timeout + grace", took)
	}
	assertGone(t, m)
}

func TestSupervisorSIGTERM(t *testing.T) {
	// docker stop: tini forwards SIGTERM to the supervisor, which ends the job.
	m := marker(1006)
	c := startSupervisor(t)
	c.sendJSON(proto.TypeSpec, spec("sh", "-c", "echo ready; sleep "+m))
	if !c.pump(func() bool { return strings.Contains(c.stdout.String(), "ready") }, 5*time.Second) {
		t.Fatal("job not ready")
	}
	c.cmd.Process.Signal(os.Signal(syscallSIGTERM))
	e := c.wait(5 * time.Second)
	if !e.Killed || e.ExitCode != 143 {
		t.Fatalf("%+v", e)
	}
	assertGone(t, m)
}

// startInPidNamespace runs the supervisor in a new pid namespace (as
// "container" mode needs), either as its pid 1 or under a pid-1 shell that
// was started to run it, as docker-init does. kill(-1) there cannot reach
// anything outside the namespace.
func startInPidNamespace(t *testing.T, underInit bool) *client {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for unshare")
	}
	if err := exec.Command("unshare", "-pf", "--mount-proc", "true").Run(); err != nil {
		t.Skipf("unshare unavailable: %v", err)
	}
	old := supBin
	defer func() { supBin = old }()
	supBin = "unshare"
	if underInit {
		return startSupervisorArgs(t, "-pf", "--mount-proc", "sh", "-c", `"$0"; exit $?`, old)
	}
	return startSupervisorArgs(t, "-pf", "--mount-proc", old)
}

func TestContainerModeInPidNamespace(t *testing.T) {
	for _, underInit := range []bool{false, true} {
		t.Run(fmt.Sprintf("underInit=%v", underInit), func(t *testing.T) {
			script, markers := escapeJob()
			c := startInPidNamespace(t, underInit)
			s := spec("sh", "-c", script)
			s.KillMode = proto.KillContainer
			c.sendJSON(proto.TypeSpec, s)
			if !c.pump(func() bool { return strings.Contains(c.stdout.String(), "ready") || c.exit != nil }, 5*time.Second) {
				t.Fatal("job not ready")
			}
			if c.exit != nil {
				t.Fatalf("refused: %+v", c.exit)
			}
			if len(alive(markers[0])) == 0 || len(alive(markers[2])) == 0 {
				t.Fatal("the escaped processes were not running")
			}
			c.send(proto.TypeKill, nil)
			e := c.wait(5 * time.Second)
			if !e.Killed || e.ExitCode != 137 {
				t.Fatalf("%+v", e)
			}
			assertGone(t, markers...)

			// Leftovers of a job that ended are killed too.
			m := marker(1007)
			c = startInPidNamespace(t, underInit)
			s = spec("sh", "-c", "setsid sleep "+m+" & echo hi")
			s.KillMode = proto.KillContainer
			c.sendJSON(proto.TypeSpec, s)
			if e := c.wait(5 * time.Second); e.ExitCode != 0 || e.Error != "" {
				t.Fatalf("%+v", e)
			}
			assertGone(t, m)
		})
	}
}

// A workspace job (an exec nobody can re-join) is killed, its whole tree,
// when the server's input ends.
func TestKillOnDetach(t *testing.T) {
	script, markers := escapeJob()
	c := startSupervisor(t)
	s := spec("sh", "-c", script)
	s.KillOnDetach = true
	c.sendJSON(proto.TypeSpec, s)
	if !c.pump(func() bool { return strings.Contains(c.stdout.String(), "ready") }, 5*time.Second) {
		t.Fatal("job not ready")
	}
	if len(alive(markers[0])) == 0 {
		t.Fatal("the escaped processes were not running")
	}
	c.closeInput()
	e := c.wait(5 * time.Second)
	if !e.Killed || e.ExitCode != 137 {
		t.Fatalf("exit %+v", e)
	}
	assertGone(t, markers...)
}

// TestAwaitExitAck: with Spec.AwaitExitAck the supervisor outlives its
// Exit frame until the server acknowledges it (an engine's attach may drop
// what a container wrote last as it ends); without the ack it ends when its
// input does.
func TestAwaitExitAck(t *testing.T) {
	s := spec("sh", "-c", "echo last")
	s.AwaitExitAck = true
	c := startSupervisor(t)
	c.sendJSON(proto.TypeSpec, s)
	if !c.pump(func() bool { return c.exit != nil }, hangSlack*5*time.Second) {
		t.Fatal("no Exit frame")
	}
	select {
	case err := <-c.procDone:
		t.Fatalf("the supervisor ended before the ack: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	c.send(proto.TypeExitAck, nil)
	select {
	case <-c.procDone:
	case <-time.After(hangSlack * 2 * time.Second):
		t.Fatal("the supervisor did not end after the ack")
	}
	if c.stdout.String() != "last\n" {
		t.Fatalf("stdout %q", c.stdout.String())
	}

	c = startSupervisor(t)
	c.sendJSON(proto.TypeSpec, s)
	if !c.pump(func() bool { return c.exit != nil }, hangSlack*5*time.Second) {
		t.Fatal("no Exit frame")
	}
	c.closeInput()
	select {
	case <-c.procDone:
	case <-time.After(hangSlack * 2 * time.Second):
		t.Fatal("the supervisor did not end when its input did")
	}
}

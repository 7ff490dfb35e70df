package fake_test

import (
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
)

func spec(cmd string) sandbox.Spec { return sandboxtest.Spec("fake/base", cmd) }

func run(t *testing.T, rt *fake.Runtime, s sandbox.Spec) (sandbox.ExitStatus, *sandbox.Buffer) {
	t.Helper()
	out := &sandbox.Buffer{Max: 1 << 20}
	h, err := rt.Start(context.Background(), s, out)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not done")
	}
	return h.Status(), out
}

func TestGrammar(t *testing.T) {
	t.Parallel()
	cases := []struct {
		script, stdout, stderr string
		exit                   int
		oom                    bool
	}{
		{script: "echo a b  'c  d'; echo -n x; printf 'y\\n'", stdout: "a b c  d\nxy\n"},
		{script: "echo e >&2; false", stderr: "e\n", exit: 1},
		{script: "false; true", exit: 0},
		{script: "nosuch; echo after", stdout: "after\n", stderr: "bash: nosuch: command not found\n"},
		{script: "nosuch", stderr: "bash: nosuch: command not found\n", exit: 127},
		{script: "echo a # comment; exit 9\nexit 4", stdout: "a\n", exit: 4},
		{script: "sleep 0.01; sleep 10ms; exit 300", exit: 44},
		{script: "echo before; oom; echo never", stdout: "before\n", exit: 137, oom: true},
		{script: "echo 'unterminated", stderr: "bash: -c: unexpected EOF while looking for matching `''\n", exit: 2},
	}
	rt := fake.New("grammar")
	for _, tc := range cases {
		st, out := run(t, rt, spec(tc.script))
		if st.ExitCode != tc.exit || st.OOMKilled != tc.oom || out.Stdout() != tc.stdout || out.Stderr() != tc.stderr {
			t.Errorf("%q: exit %d oom %v stdout %q stderr %q; want %d %v %q %q",
				tc.script, st.ExitCode, st.OOMKilled, out.Stdout(), out.Stderr(), tc.exit, tc.oom, tc.stdout, tc.stderr)
		}
	}
}

// TestIgnoreTerm: a script that ignores TERM goes on; KILL still ends it.
func TestIgnoreTerm(t *testing.T) {
	t.Parallel()
	for _, script := range []string{"trap '' TERM; echo ready; sleep 60", "ignore-term; echo ready; sleep 60"} {
		rt := fake.New("term")
		out := &sandbox.Buffer{Max: 1 << 10}
		h, err := rt.Start(context.Background(), spec(script), out)
		if err != nil {
			t.Fatal(err)
		}
		for out.Stdout() != "ready\n" {
			time.Sleep(time.Millisecond)
		}
		if err := h.Signal(context.Background(), "SIGTERM"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.Done():
			t.Fatalf("%q: TERM ended it", script)
		case <-time.After(50 * time.Millisecond):
		}
		if err := h.Signal(context.Background(), "KILL"); err != nil {
			t.Fatal(err)
		}
		<-h.Done()
		if st := h.Status(); st.ExitCode != 137 || st.Gone || st.Err != nil {
			t.Fatalf("%q after KILL: %+v", script, st)
		}
	}
}

// TestHangStart: Start blocks at the job's gate until released, or fails
// (removing the container) when its ctx ends.
func TestHangStart(t *testing.T) {
	t.Parallel()
	rt := fake.New("gate")
	s := spec("hang-start; echo hi")
	type res struct {
		h   sandbox.Handle
		err error
	}
	rc := make(chan res, 1)
	go func() {
		h, err := rt.Start(context.Background(), s, &sandbox.Buffer{Max: 100})
		rc <- res{h, err}
	}()
	<-rt.Gate(s.JobID).Entered()
	if cs, _ := rt.List(context.Background()); len(cs) != 1 || cs[0].Running {
		t.Fatalf("while starting, want one created container, got %+v", cs)
	}
	rt.Gate(s.JobID).Release()
	r := <-rc
	if r.err != nil {
		t.Fatal(r.err)
	}
	<-r.h.Done()

	s2 := spec("hang-start")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-rt.Gate(s2.JobID).Entered(); cancel() }()
	if _, err := rt.Start(ctx, s2, &sandbox.Buffer{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with ctx ended at the gate: %v", err)
	}
	if rt.Count() != 0 {
		t.Fatal("container left after a failed start")
	}
}

// TestEngineDown: calls fail with an EngineError; a waiting handle ends with
// Err while its container goes on, and can be adopted once the engine is back.
func TestEngineDown(t *testing.T) {
	t.Parallel()
	rt := fake.New("down")
	ctx := context.Background()
	h, err := rt.Start(ctx, spec("echo one; sleep 0.2; echo two; exit 5"), &sandbox.Buffer{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	rt.SetDown(true)
	var ee *sandbox.EngineError
	if err := rt.Ping(ctx); !errors.As(err, &ee) {
		t.Fatalf("Ping while down: %v", err)
	}
	if _, err := rt.Start(ctx, spec("exit 0"), &sandbox.Buffer{}); !errors.Is(err, sandbox.ErrEngineUnreachable) {
		t.Fatalf("Start while down: %v", err)
	}
	<-h.Done()
	if st := h.Status(); st.Err == nil || !errors.Is(st.Err, sandbox.ErrEngineUnreachable) {
		t.Fatalf("handle status while down: %+v", st)
	}
	rt.SetDown(false)
	out := &sandbox.Buffer{Max: 100}
	h2, err := rt.Adopt(ctx, h.ContainerID(), int64(len("one\n")), 0, out)
	if err != nil {
		t.Fatal(err)
	}
	<-h2.Done()
	if st := h2.Status(); st.ExitCode != 5 || out.Stdout() != "two\n" {
		t.Fatalf("adopted: %+v stdout %q", st, out.Stdout())
	}
}

// TestRemoveErrorKeepsExit: a cleanup failure after a known end is reported
// beside it, never instead of it.
func TestRemoveErrorKeepsExit(t *testing.T) {
	t.Parallel()
	rt := fake.New("rmerr")
	rt.SetRemoveError(func(sandbox.Container) error { return errors.New("device busy") })
	st, _ := run(t, rt, spec("exit 0"))
	if st.ExitCode != 0 || st.Err != nil || st.Gone || st.CleanupErr == nil {
		t.Fatalf("status %+v, want exit 0 with CleanupErr", st)
	}
	if rt.Count() != 1 {
		t.Fatal("the container should be left for a later sweep")
	}
	rt.SetRemoveError(nil)
	cs, _ := rt.List(context.Background())
	if len(cs) != 1 || cs[0].Running {
		t.Fatalf("left container: %+v", cs)
	}
	if err := rt.Remove(context.Background(), cs[0].ID); err != nil || rt.Count() != 0 {
		t.Fatalf("Remove: %v", err)
	}
}

// TestStartDetachedAndLogs: a container nobody watches keeps its log for
// Adopt; with EngineLog "none" only what comes after the adoption is seen.
func TestStartDetachedAndLogs(t *testing.T) {
	t.Parallel()
	eng := fake.NewEngine()
	crashed := eng.Runtime("inst", "server-1")
	for _, mode := range []string{"local", "none"} {
		s := spec("echo early; sleep 0.3; echo late; exit 2")
		s.EngineLog = mode
		id, err := crashed.StartDetached(s)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		restarted := eng.Runtime("inst", "server-2")
		if _, err := eng.Runtime("other", "").Adopt(context.Background(), id, 0, 0, &sandbox.Buffer{}); err == nil {
			t.Fatal("another instance adopted the container")
		}
		cs, _ := restarted.List(context.Background())
		if len(cs) != 1 || cs[0].Server != "server-1" || !cs[0].Running {
			t.Fatalf("listed %+v", cs)
		}
		out := &sandbox.Buffer{Max: 100}
		h, err := restarted.Adopt(context.Background(), id, 0, 0, out)
		if err != nil {
			t.Fatal(err)
		}
		<-h.Done()
		want := "early\nlate\n"
		if mode == "none" {
			want = "late\n"
		}
		if st := h.Status(); st.ExitCode != 2 || out.Stdout() != want {
			t.Fatalf("%s: %+v stdout %q, want %q", mode, st, out.Stdout(), want)
		}
	}
}

// TestStdinBlocksUntilRead: writes past the buffer block until ctx ends and
// report how much went in.
func TestStdinBlocksUntilRead(t *testing.T) {
	t.Parallel()
	rt := fake.New("stdin")
	s := spec("sleep 60")
	s.OpenStdin = true
	h, err := rt.Start(context.Background(), s, &sandbox.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy(context.Background())
	// Long enough that a busy machine still writes before the deadline (a
	// deadline already past may win the writer's turn: nothing written).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := h.WriteStdin(ctx, make([]byte, 1<<20))
	if !errors.Is(err, context.DeadlineExceeded) || n <= 0 || n >= 1<<20 {
		t.Fatalf("WriteStdin to a process that does not read: %d, %v", n, err)
	}
}

// TestListsAsBash: "&&" and "||" lists end with the status and output bash
// gives them (checked against the host's bash).
func TestListsAsBash(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this host to compare with")
	}
	rt := fake.New("lists")
	for _, script := range []string{
		"false || echo a",
		"true && echo b",
		"false && echo c; echo d",
		"false && echo x || echo y",
		"true || echo no; exit 3",
		"echo a && false && echo b || echo c",
		"echo a || echo b && echo c",
		"false || false",
		"&& echo x",
		"echo x || || echo y",
	} {
		st, out := run(t, rt, spec(script))
		want, err := exec.Command(bash, "-c", script).Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if st.ExitCode != code || out.Stdout() != string(want) {
			t.Errorf("%q: exit %d, stdout %q; bash: %d, %q", script, st.ExitCode, out.Stdout(), code, want)
		}
	}
}

// TestCurlWithNoNetwork: a sandbox with no network reaches nothing, and
// curl says so as it does in one (names do not resolve, addresses refuse
// or are unreachable); the process's user is 1000.
func TestCurlWithNoNetwork(t *testing.T) {
	t.Parallel()
	rt := fake.New("curl")
	cases := []struct {
		script, stdout, stderr string
		exit                   int
	}{
		{script: "curl -sS http://example.test/x", stderr: "curl: (6) Could not resolve host: example.test\n", exit: 6},
		{script: "curl -s http://10.1.2.3/ || echo down", stdout: "down\n"},
		{script: "curl -sS -x http://127.0.0.1:3128 http://example.test/x",
			stderr: "curl: (7) Failed to connect to 127.0.0.1 port 3128 after 0 ms: Couldn't connect to server\n", exit: 7},
		{script: "curl --bogus http://example.test/", stderr: "curl: option --bogus: is unknown\n", exit: 2},
		{script: "curl", stderr: "curl: no URL specified\n", exit: 2},
		{script: "id -u", stdout: "1000\n"},
	}
	for _, tc := range cases {
		st, out := run(t, rt, spec(tc.script))
		if st.ExitCode != tc.exit || out.Stdout() != tc.stdout || out.Stderr() != tc.stderr {
			t.Errorf("%q: exit %d stdout %q stderr %q; want %d %q %q", tc.script, st.ExitCode, out.Stdout(), out.Stderr(), tc.exit, tc.stdout, tc.stderr)
		}
	}
}

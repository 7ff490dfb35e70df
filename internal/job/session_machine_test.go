package job

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Session behaviour on the fake runtime: settled reads, the idle timeout,
// terminal refusals.

func session(idle time.Duration) func(*Request) {
	return func(r *Request) {
		r.Kind = KindSession
		r.KeepStdinOpen = true
		r.Details = record.Details{Session: &record.SessionDetails{Mode: ModePipe, IdleTimeoutMS: idle.Milliseconds()}}
	}
}

func (e *fakeEnv) read(id string, rr ReadRequest) (string, time.Duration) {
	e.t.Helper()
	if rr.MaxBytes == 0 {
		rr.MaxBytes = 1 << 16
	}
	start := time.Now()
	r, err := e.m.Read(context.Background(), id, rr)
	if err != nil {
		e.t.Fatalf("Read: %v", err)
	}
	took := time.Since(start)
	// Free the slot for the next case.
	if _, err := e.m.Kill(context.Background(), id, "KILL", 0, record.ReasonRequested); err != nil {
		e.t.Fatal(err)
	}
	return string(r.Data), took
}

// TestMachineSettle: without Settle a read returns with the first output (as
// for every non-session job); with it, once output has been quiet that long —
// so an answer printed in bursts comes back whole — and never after Wait.
func TestMachineSettle(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	const bursts = "echo a; sleep 0.1; echo b; sleep 0.1; echo c; sleep 30"

	j := e.submit(bursts)
	got, _ := e.read(j.ID, ReadRequest{Stream: output.Both, Wait: 5 * time.Second})
	if got != "a\n" {
		t.Errorf("no settle: %q, want the first output alone", got)
	}

	j = e.submit(bursts)
	got, took := e.read(j.ID, ReadRequest{Stream: output.Both, Wait: 5 * time.Second, Settle: 400 * time.Millisecond})
	if got != "a\nb\nc\n" {
		t.Errorf("settle 400ms: %q, want all three bursts", got)
	}
	if took < 550*time.Millisecond || took > 5*time.Second {
		t.Errorf("settle 400ms returned after %s, want about 0.2 s of bursts + 0.4 s of quiet", took)
	}

	j = e.submit(bursts)
	got, _ = e.read(j.ID, ReadRequest{Stream: output.Both, Wait: 5 * time.Second, Settle: 30 * time.Millisecond})
	if got != "a\n" {
		t.Errorf("settle 30ms with 100ms gaps: %q, want the first burst", got)
	}

	// Output that never goes quiet: the read ends at Wait, not later.
	j = e.submit("echo x; sleep 0.05; echo x; sleep 0.05; echo x; sleep 0.05; echo x; sleep 0.05; echo x; sleep 0.05; echo x; sleep 0.05; echo x; sleep 0.05; echo x; sleep 0.05; echo x; sleep 30")
	got, took = e.read(j.ID, ReadRequest{Stream: output.Both, Wait: 250 * time.Millisecond, Settle: time.Second})
	if took < 200*time.Millisecond || took > 3*time.Second || !strings.HasPrefix(got, "x\nx\n") {
		t.Errorf("busy output: %q after %s, want a few lines at wait (250ms)", got, took)
	}

	// Nothing at all: the read waits for Wait (quiet only counts after output).
	j = e.submit("sleep 30")
	got, took = e.read(j.ID, ReadRequest{Stream: output.Both, Wait: 300 * time.Millisecond, Settle: 50 * time.Millisecond})
	if got != "" || took < 250*time.Millisecond {
		t.Errorf("no output: %q after %s", got, took)
	}

	// Until wins over settle: quiet gaps do not end the read before the match.
	j = e.submit(bursts)
	r, err := e.m.Read(context.Background(), j.ID, ReadRequest{Stream: output.Both, MaxBytes: 1 << 16, Wait: 5 * time.Second, Settle: 30 * time.Millisecond, Until: regexp.MustCompile("c\n")})
	if err != nil || string(r.Data) != "a\nb\nc\n" || !r.Matched {
		t.Errorf("until with settle: %q matched=%v err=%v", r.Data, r != nil && r.Matched, err)
	}

	// A job that ends returns at once, settle or not.
	j = e.submit("echo done")
	got, took = e.read(j.ID, ReadRequest{Stream: output.Both, Wait: 5 * time.Second, Settle: 3 * time.Second})
	if got != "done\n" || took > 2500*time.Millisecond { // below the 3 s settle it would otherwise wait
		t.Errorf("ended job: %q after %s", got, took)
	}
}

// TestMachineSessionIdle: input keeps a session alive; silence for its idle
// timeout ends it killed/idle and its sandbox goes.
func TestMachineSessionIdle(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	// The idle timeout is far above the gaps between inputs, so a busy
	// machine cannot stretch a gap past it.
	j := e.submit("cat", session(2*time.Second))
	rec, _ := e.m.Get(context.Background(), j.ID)
	first := rec.Details.Session.IdleDeadline
	if first.IsZero() || time.Until(first) > 2*time.Second {
		t.Fatalf("idle deadline %v", first)
	}
	for i := 0; i < 5; i++ {
		time.Sleep(300 * time.Millisecond)
		if _, err := e.m.SendInput(context.Background(), j.ID, []byte("hi\n"), false); err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
	}
	rec, _ = e.m.Get(context.Background(), j.ID)
	if rec.Status != record.StatusRunning || !rec.Details.Session.IdleDeadline.After(first) {
		t.Fatalf("after input: %s, deadline %v (first %v)", rec.Status, rec.Details.Session.IdleDeadline, first)
	}
	start := time.Now()
	end := e.wait(j.ID)
	if end.Status != record.StatusKilled || end.Reason != record.ReasonIdle {
		t.Fatalf("after silence: %s/%s", end.Status, end.Reason)
	}
	if took := time.Since(start); took < 500*time.Millisecond || took > 10*time.Second {
		t.Errorf("ended %s after the last input, want about 2 s", took)
	}
	if cs, _ := e.rt.List(context.Background()); len(cs) != 0 {
		t.Errorf("containers left: %+v", cs)
	}
	if _, err := e.m.SendInput(context.Background(), j.ID, []byte("x"), false); !errors.Is(err, ErrNoStdin) {
		t.Errorf("input to an idle-killed session: %v", err)
	}
	// A command job has no idle timeout.
	c := e.submit("sleep 0.5")
	if got := e.wait(c.ID); got.Status != record.StatusCompleted {
		t.Errorf("command: %s/%s", got.Status, got.Reason)
	}
}

// TestMachineTerminalRefusals: resize and screen need a PTY session.
func TestMachineTerminalRefusals(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	c := e.submit("cat", func(r *Request) { r.KeepStdinOpen = true })
	if _, err := e.m.Resize(context.Background(), c.ID, 30, 100); !errors.Is(err, ErrNoTerminal) || !strings.Contains(err.Error(), "not a session") {
		t.Errorf("resize of a command: %v", err)
	}
	p := e.submit("cat", session(time.Minute))
	if _, err := e.m.Resize(context.Background(), p.ID, 30, 100); !errors.Is(err, ErrNoTerminal) || !strings.Contains(err.Error(), "pipe") {
		t.Errorf("resize of a pipe session: %v", err)
	}
	if _, _, err := e.m.Screen(context.Background(), p.ID); !errors.Is(err, ErrNoTerminal) {
		t.Errorf("screen of a pipe session: %v", err)
	}
	// A pty session on a runtime without terminals: the runtime's ErrNoTTY is reported.
	pty := e.submit("cat", session(time.Minute), func(r *Request) {
		r.Details.Session.Mode, r.Details.Session.Rows, r.Details.Session.Cols = ModePTY, 24, 80
		r.TTY = &sandbox.TTY{Rows: 24, Cols: 80}
	})
	if _, err := e.m.Resize(context.Background(), pty.ID, 30, 100); !errors.Is(err, ErrNoTerminal) {
		t.Errorf("resize without a runtime terminal: %v", err)
	}
	// The screen is fed with the session's output as it arrives.
	if _, err := e.m.SendInput(context.Background(), pty.ID, []byte("hello screen\n"), false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "screen shows the echo", func() bool {
		scr, _, err := e.m.Screen(context.Background(), pty.ID)
		return err == nil && scr.Rows == 24 && scr.Cols == 80 && scr.Lines[0] == "hello screen"
	})
	if _, err := e.m.Kill(context.Background(), pty.ID, "KILL", 0, record.ReasonRequested); err != nil {
		t.Fatal(err)
	}
	// After the end, the screen is replayed from the stored output.
	scr, rec, err := e.m.Screen(context.Background(), pty.ID)
	if err != nil || rec.Status != record.StatusKilled || scr.Lines[0] != "hello screen" {
		t.Errorf("screen after the end: %q %v", scr.Lines, err)
	}
}

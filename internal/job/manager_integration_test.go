package job

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// TestStatusMapping: how a process ends becomes status, reason, exit code and signal.
func TestStatusMapping(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	cases := []struct {
		name, cmd      string
		timeout        time.Duration // 0: policy default
		status, reason string
		exit           *int // checked when non-nil
		signal         string
		within         time.Duration // Wait must return this soon after Submit was called (0: not checked)
	}{
		{name: "exit0", cmd: "echo ok; exit 0", status: record.StatusCompleted, exit: ptr(0)},
		{name: "exit3", cmd: "exit 3", status: record.StatusFailed, reason: record.ReasonExitCode, exit: ptr(3)},
		{name: "sigsegv", cmd: "kill -SEGV $$", status: record.StatusFailed, reason: record.ReasonExitCode, exit: ptr(139), signal: "SIGSEGV"},
		{name: "timeout", cmd: "sleep 30", timeout: time.Second, status: record.StatusTimedOut, reason: record.ReasonTimeout, within: 8 * time.Second}, // bounded, not hung: 4× timeout + grace
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			begin := time.Now()
			j, err := e.m.Submit(context.Background(), e.req(tc.cmd, func(r *Request) {
				if tc.timeout > 0 {
					r.Limits.Timeout = tc.timeout
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			// Submit returns a started job; a fast one (a warm sandbox) may
			// already have ended by then, so "running" is not promised.
			if j.Status == record.StatusQueued || j.ContainerID == "" {
				t.Fatalf("after Submit: %s, want started, with a container", describe(j))
			}
			got, err := e.m.Wait(context.Background(), j.ID, waitLong)
			took := time.Since(begin)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s after %s", tc.name, describe(got), took.Round(time.Millisecond))
			if got.Status != tc.status || got.Reason != tc.reason {
				t.Errorf("got %s, want %s/%s", describe(got), tc.status, tc.reason)
			}
			if tc.exit != nil && (got.ExitCode == nil || *got.ExitCode != *tc.exit) {
				t.Errorf("exit code: got %s, want %d", describe(got), *tc.exit)
			}
			if tc.exit != nil && got.Signal != tc.signal {
				t.Errorf("signal: got %q, want %q", got.Signal, tc.signal)
			}
			if tc.within > 0 && took > tc.within {
				t.Errorf("Wait returned %s after Submit, want within %s", took.Round(time.Millisecond), tc.within)
			}
			if got.StartedAt.IsZero() || got.EndedAt.IsZero() || got.EndedAt.Before(got.StartedAt) {
				t.Errorf("times: started %v ended %v", got.StartedAt, got.EndedAt)
			}
			// The stored record says the same as Wait.
			if stored := e.get(j.ID); stored.Status != got.Status || stored.Reason != got.Reason || stored.Signal != got.Signal {
				t.Errorf("Get: %s, Wait: %s", describe(stored), describe(got))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestQueue: past max_concurrent jobs queue; past max_queued they are refused.
func TestQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(p *policy.Policy) { p.Jobs.MaxConcurrent, p.Jobs.MaxQueued = 1, 1 })
	ctx := context.Background()

	first := e.submit("sleep 2")
	if first.Status != record.StatusRunning {
		t.Fatalf("first: %s, want running", describe(first))
	}
	second := e.submit("echo second")
	if second.Status != record.StatusQueued || second.ContainerID != "" {
		t.Fatalf("second: %s, want queued without a container", describe(second))
	}
	_, err := e.m.Submit(ctx, e.req("echo third"))
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third: err %v, want ErrQueueFull", err)
	}
	for _, want := range []string{"jobs.max_concurrent=1", "jobs.max_queued=1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %s", err, want)
		}
	}
	// The refused job left no record and no output directory.
	jobs, _, err := e.m.List(ctx, record.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Errorf("List: %d jobs, want 2", len(jobs))
	}
	if entries, _ := os.ReadDir(filepath.Join(e.dir, "jobs")); len(entries) != 2 {
		t.Errorf("%d output directories, want 2", len(entries))
	}

	// Still queued while the first runs.
	if j, _ := e.m.Wait(ctx, second.ID, 500*time.Millisecond); j.Status != record.StatusQueued {
		t.Errorf("second after 0.5 s: %s, want still queued", describe(j))
	}
	got := e.wait(second.ID)
	if got.Status != record.StatusCompleted {
		t.Errorf("second: %s, want completed", describe(got))
	}
	f := e.get(first.ID)
	if f.Status != record.StatusCompleted {
		t.Errorf("first: %s, want completed", describe(f))
	}
	if got.StartedAt.Before(f.EndedAt.Add(-time.Second)) {
		t.Errorf("second started %v, before the first ended %v", got.StartedAt, f.EndedAt)
	}
	if out := e.readAll(second.ID, output.Both); out != "second\n" {
		t.Errorf("second output %q", out)
	}
	// The slot is free again.
	// (started, not queued: "true" may already have ended when Submit returns)
	if j := e.submit("true"); j.Status == record.StatusQueued {
		t.Errorf("after the queue drained: %s, want started", describe(j))
	}
}

// TestKill: queued, running (signal honoured or ignored), finished and unknown jobs.
func TestKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(p *policy.Policy) { p.Jobs.MaxConcurrent, p.Jobs.MaxQueued = 2, 1 })
	ctx := context.Background()

	honours := e.submit("sleep 100")
	ignores := e.submit("trap '' TERM; echo ready; sleep 100")
	queued := e.submit("echo never")
	if queued.Status != record.StatusQueued {
		t.Fatalf("third job: %s, want queued", describe(queued))
	}
	// The TERM must come after the trap is set, however late the shell runs.
	if r, err := e.m.Read(ctx, ignores.ID, ReadRequest{Stream: output.Both, MaxBytes: 1 << 10, Wait: 30 * time.Second, Until: regexp.MustCompile("ready")}); err != nil || !r.Matched {
		t.Fatalf("the TERM-ignoring job never said ready: %v %v", r, err)
	}

	t.Run("queued", func(t *testing.T) {
		k, err := e.m.Kill(ctx, queued.ID, "TERM", time.Second, record.ReasonRequested)
		if err != nil {
			t.Fatal(err)
		}
		if k.Status != record.StatusKilled || k.Reason != record.ReasonRequested || k.ContainerID != "" || k.ExitCode != nil {
			t.Errorf("killed queued job: %s, want killed/requested, no container, no exit code", describe(k))
		}
	})

	for _, tc := range []struct {
		name     string
		id       string
		min, max time.Duration
	}{
		{"running, TERM honoured", honours.ID, 0, 5 * time.Second},
		{"running, TERM ignored: removed after grace", ignores.ID, time.Second, 6 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			begin := time.Now()
			k, err := e.m.Kill(ctx, tc.id, "TERM", time.Second, record.ReasonRequested)
			took := time.Since(begin)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s after %s", describe(k), took.Round(time.Millisecond))
			if k.Status != record.StatusKilled || k.Reason != record.ReasonRequested {
				t.Errorf("got %s, want killed/requested", describe(k))
			}
			if took < tc.min || took > tc.max {
				t.Errorf("Kill took %s, want between %s and %s", took.Round(time.Millisecond), tc.min, tc.max)
			}
			if k.EndedAt.IsZero() {
				t.Error("no EndedAt")
			}
		})
	}

	t.Run("queued job never started", func(t *testing.T) {
		// Both slots are free now: the killed queued job must not have taken one.
		time.Sleep(300 * time.Millisecond)
		if j := e.get(queued.ID); j.Status != record.StatusKilled || j.ContainerID != "" {
			t.Errorf("killed queued job later: %s", describe(j))
		}
		if out := e.readAll(queued.ID, output.Both); out != "" {
			t.Errorf("killed queued job printed %q", out)
		}
	})

	t.Run("finished", func(t *testing.T) {
		before := e.get(honours.ID)
		k, err := e.m.Kill(ctx, honours.ID, "KILL", 0, record.ReasonCancelled)
		if err != nil {
			t.Fatalf("Kill of a finished job: %v", err)
		}
		if k.Status != before.Status || k.Reason != before.Reason || !k.EndedAt.Equal(before.EndedAt) {
			t.Errorf("Kill changed a finished job: %s → %s", describe(before), describe(k))
		}
	})

	t.Run("unknown", func(t *testing.T) {
		_, err := e.m.Kill(ctx, uuid.NewString(), "TERM", time.Second, record.ReasonRequested)
		if !errors.Is(err, record.ErrJobNotFound) {
			t.Errorf("err %v, want record.ErrJobNotFound", err)
		}
	})
}

// TestRead: cursors, streams, tail, until and inline head/tail.
func TestRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()
	const maxBytes = 1 << 20

	t.Run("new since last read", func(t *testing.T) {
		t.Parallel()
		for _, live := range []bool{false, true} {
			name := "finished"
			cmd := `printf 'a\nb\nc\n'`
			if live {
				name, cmd = "live", `printf 'a\nb\nc\n'; sleep 1`
			}
			t.Run(name, func(t *testing.T) {
				j := e.submit(cmd)
				read := func(cursor *int64, wait time.Duration) string {
					t.Helper()
					r, err := e.m.Read(ctx, j.ID, ReadRequest{Cursor: cursor, MaxBytes: maxBytes, Wait: wait})
					if err != nil {
						t.Fatal(err)
					}
					return string(r.Data)
				}
				if live {
					// Reads with no cursor together see everything exactly once.
					var got string
					deadline := time.Now().Add(10 * time.Second)
					for len(got) < 6 && time.Now().Before(deadline) {
						got += read(nil, 5*time.Second)
					}
					if got != "a\nb\nc\n" {
						t.Fatalf("live reads: %q", got)
					}
					if j := e.get(j.ID); j.Status != record.StatusRunning {
						t.Fatalf("job %s, want still running", describe(j))
					}
					if got := read(nil, 0); got != "" {
						t.Errorf("second live read %q, want nothing new", got)
					}
					e.wait(j.ID)
					// The cursor survives the job's end.
					if got := read(nil, 0); got != "" {
						t.Errorf("read after the end %q, want nothing new", got)
					}
				} else {
					e.wait(j.ID)
					if got := read(nil, 0); got != "a\nb\nc\n" {
						t.Errorf("first read %q", got)
					}
					if got := read(nil, 0); got != "" {
						t.Errorf("second read %q, want nothing new", got)
					}
				}
				if got := read(ptr(int64(0)), 0); got != "a\nb\nc\n" {
					t.Errorf("read from 0: %q", got)
				}
				if got := read(ptr(int64(2)), 0); got != "b\nc\n" {
					t.Errorf("read from 2: %q", got)
				}
				if got := read(nil, 0); got != "" {
					t.Errorf("read after reading from a cursor: %q, want nothing new", got)
				}

				r, err := e.m.Read(ctx, j.ID, ReadRequest{TailLines: 1, MaxBytes: maxBytes})
				if err != nil {
					t.Fatal(err)
				}
				if string(r.Data) != "c\n" || r.Start != 4 || r.NextCursor != 6 {
					t.Errorf("tail 1: %q start %d next %d, want \"c\\n\" 4 6", r.Data, r.Start, r.NextCursor)
				}
				if tail, err := e.m.Tail(ctx, j.ID, 2, maxBytes); err != nil || string(tail) != "b\nc\n" {
					t.Errorf("Tail 2: %q %v", tail, err)
				}
			})
		}
	})

	t.Run("streams", func(t *testing.T) {
		t.Parallel()
		j := e.submit("echo out1; echo err1 >&2; echo out2; echo err2 >&2")
		got := e.wait(j.ID)
		if got.Status != record.StatusCompleted || got.StdoutBytes != 10 || got.StderrBytes != 10 {
			t.Errorf("record: %s stdout %d stderr %d bytes, want completed 10 10", describe(got), got.StdoutBytes, got.StderrBytes)
		}
		if out := e.readAll(j.ID, output.StdoutOnly); out != "out1\nout2\n" {
			t.Errorf("stdout %q", out)
		}
		if out := e.readAll(j.ID, output.StderrOnly); out != "err1\nerr2\n" {
			t.Errorf("stderr %q", out)
		}
		// Combined: both streams; the order across streams is the engine's.
		both := strings.Split(strings.TrimSuffix(e.readAll(j.ID, output.Both), "\n"), "\n")
		slices.Sort(both)
		if !slices.Equal(both, []string{"err1", "err2", "out1", "out2"}) {
			t.Errorf("combined lines %q", both)
		}
		for sel, want := range map[output.Selector]int64{output.StdoutOnly: 10, output.StderrOnly: 10, output.Both: 20} {
			if n, err := e.m.Size(ctx, j.ID, sel); err != nil || n != want {
				t.Errorf("Size(%v) = %d, %v; want %d", sel, n, err, want)
			}
		}
		r, err := e.m.Read(ctx, j.ID, ReadRequest{Stream: output.StderrOnly, TailLines: 1, MaxBytes: maxBytes})
		if err != nil || string(r.Data) != "err2\n" {
			t.Errorf("stderr tail 1: %q %v", r.Data, err)
		}
		// Small output is inlined whole.
		data, omitted, err := e.inlineStdout(j.ID, 1000)
		if err != nil || string(data) != "out1\nout2\n" || omitted != 0 {
			t.Errorf("Inline small: %q omitted %d err %v", data, omitted, err)
		}
	})

	t.Run("until", func(t *testing.T) {
		t.Parallel()
		j := e.submit("echo starting; sleep 1; echo READY; sleep 100")
		submitted := time.Now()
		until := regexp.MustCompile(`READY`)
		zero := int64(0)
		// Output that does not match does not end the wait.
		r, err := e.m.Read(ctx, j.ID, ReadRequest{Cursor: &zero, Until: until, Wait: 200 * time.Millisecond, MaxBytes: maxBytes, Peek: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Matched {
			t.Errorf("matched before READY was printed: %q", r.Data)
		}
		r, err = e.m.Read(ctx, j.ID, ReadRequest{Cursor: &zero, Until: until, Wait: 10 * time.Second, MaxBytes: maxBytes})
		took := time.Since(submitted)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("matched %v after %s: %q", r.Matched, took.Round(time.Millisecond), r.Data)
		if !r.Matched || string(r.Data) != "starting\nREADY\n" {
			t.Errorf("Read until READY: matched %v data %q", r.Matched, r.Data)
		}
		if took < 700*time.Millisecond || took > 10*time.Second {
			t.Errorf("Read until READY returned %s after Submit, want about 1 s", took.Round(time.Millisecond))
		}
		if r.Job.Status != record.StatusRunning || r.NextCursor != int64(len(r.Data)) {
			t.Errorf("job %s next cursor %d", describe(r.Job), r.NextCursor)
		}
		if _, err := e.m.Kill(ctx, j.ID, "KILL", 0, record.ReasonRequested); err != nil {
			t.Error(err)
		}
	})

	t.Run("inline", func(t *testing.T) {
		t.Parallel()
		j := e.submit("seq 1 20000")
		e.wait(j.ID)
		all := e.readAll(j.ID, output.StdoutOnly)
		const size = 108894 // bytes of `seq 1 20000`
		if len(all) != size || !strings.HasPrefix(all, "1\n2\n3\n") || !strings.HasSuffix(all, "\n19999\n20000\n") {
			t.Fatalf("output: %d bytes, want %d", len(all), size)
		}
		const limit = 1000
		in, err := e.m.InlineOutput(context.Background(), j.ID, limit)
		if err != nil {
			t.Fatal(err)
		}
		r := in.StdoutOmitted
		head, tail := all[:r.Start], all[r.End:]
		// Head and tail break at lines, near the halves of the limit.
		if !strings.HasSuffix(head, "\n") || !strings.HasSuffix(all[:r.End], "\n") || len(head) > limit/2 || len(head) < limit/2-limit/16 || len(tail) > limit/2 {
			t.Errorf("omitted range %+v does not break at lines near the halves", r)
		}
		if want := head + output.OmittedMarker(r.Len()) + tail; string(in.Stdout) != want {
			t.Errorf("Inline:\n%q\nwant\n%q", in.Stdout, want)
		}
		// The range read by cursor is exactly the missing middle.
		cur := r.Start
		got, err := e.m.Read(context.Background(), j.ID, ReadRequest{Stream: output.StdoutOnly, Cursor: &cur, MaxBytes: int(r.Len()), Peek: true})
		if err != nil || string(got.Data) != all[r.Start:r.End] || got.NextCursor != r.End {
			t.Errorf("reading the omitted range: err %v, next %d, equal %v", err, got.NextCursor, string(got.Data) == all[r.Start:r.End])
		}
	})

	t.Run("unknown", func(t *testing.T) {
		t.Parallel()
		if _, err := e.m.Read(ctx, uuid.NewString(), ReadRequest{MaxBytes: 10}); !errors.Is(err, record.ErrJobNotFound) {
			t.Errorf("Read unknown: %v, want record.ErrJobNotFound", err)
		}
	})
}

// TestSendInput: stdin kept open, stdin given up front, and jobs without stdin.
func TestSendInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()

	t.Run("keep open", func(t *testing.T) {
		t.Parallel()
		j := e.submit("cat", func(r *Request) { r.KeepStdinOpen = true })
		if !j.StdinOpen {
			t.Errorf("record: StdinOpen false")
		}
		if _, err := e.m.SendInput(ctx, j.ID, []byte("hi\n"), false); err != nil {
			t.Fatal(err)
		}
		zero := int64(0)
		r, err := e.m.Read(ctx, j.ID, ReadRequest{Cursor: &zero, Until: regexp.MustCompile(`hi\n`), Wait: 10 * time.Second, MaxBytes: 1 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if !r.Matched || string(r.Data) != "hi\n" {
			t.Fatalf("echoed %q (matched %v), want \"hi\\n\"", r.Data, r.Matched)
		}
		if j := e.get(j.ID); j.Status != record.StatusRunning {
			t.Fatalf("cat: %s before eof, want running", describe(j))
		}
		if _, err := e.m.SendInput(ctx, j.ID, []byte("bye\n"), true); err != nil {
			t.Fatal(err)
		}
		got := e.wait(j.ID)
		if got.Status != record.StatusCompleted {
			t.Errorf("after eof: %s, want completed", describe(got))
		}
		if out := e.readAll(j.ID, output.Both); out != "hi\nbye\n" {
			t.Errorf("output %q", out)
		}
		if _, err := e.m.SendInput(ctx, j.ID, []byte("late"), false); !errors.Is(err, ErrNoStdin) {
			t.Errorf("SendInput after the end: %v, want ErrNoStdin", err)
		}
	})

	t.Run("stdin given", func(t *testing.T) {
		t.Parallel()
		j := e.submit("tr a-z A-Z", func(r *Request) { r.Stdin = []byte("abc\n") })
		if got := e.wait(j.ID); got.Status != record.StatusCompleted {
			t.Errorf("%s, want completed", describe(got))
		}
		if out := e.readAll(j.ID, output.Both); out != "ABC\n" {
			t.Errorf("output %q", out)
		}
	})

	t.Run("stalled", func(t *testing.T) {
		t.Parallel()
		// A job that never reads: 1 MiB does not fit the pipes, so the write
		// gives up when its context ends, saying how much went in, and
		// another write (serialized behind it) still works afterwards.
		j := e.submit("sleep 60", func(r *Request) { r.KeepStdinOpen = true })
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		start := time.Now()
		n, err := e.m.SendInput(wctx, j.ID, bytes.Repeat([]byte("x"), 1<<20), false)
		cancel()
		if !errors.Is(err, ErrInputStalled) || n >= 1<<20 || time.Since(start) > 10*time.Second {
			t.Errorf("stalled write: n=%d err=%v after %s", n, err, time.Since(start))
		}
		if _, err := e.m.Kill(ctx, j.ID, "KILL", 0, record.ReasonRequested); err != nil {
			t.Error(err)
		}
	})

	t.Run("no stdin", func(t *testing.T) {
		t.Parallel()
		j := e.submit("sleep 100")
		_, err := e.m.SendInput(ctx, j.ID, []byte("x\n"), false)
		if !errors.Is(err, ErrNoStdin) {
			t.Errorf("SendInput without keep_stdin_open: %v, want ErrNoStdin", err)
		}
		if _, err := e.m.Kill(ctx, j.ID, "KILL", 0, record.ReasonRequested); err != nil {
			t.Error(err)
		}
		if _, err := e.m.SendInput(ctx, uuid.NewString(), []byte("x"), false); !errors.Is(err, record.ErrJobNotFound) {
			t.Errorf("SendInput to an unknown job: %v, want record.ErrJobNotFound", err)
		}
	})
}

// TestPrune: finished jobs past the age go with their output; running ones stay.
func TestPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := context.Background()

	running := e.submit("sleep 100")
	old := e.wait(e.submit("echo old").ID)
	time.Sleep(1200 * time.Millisecond)
	recent := e.wait(e.submit("echo recent").ID)
	for _, id := range []string{old.ID, recent.ID, running.ID} {
		if !exists(e.jobDir(id)) {
			t.Fatalf("no output directory for %s", id)
		}
	}

	// An age between the two finished jobs' (>= 1.2 s apart), whatever the load.
	now := time.Now()
	olderThan := (now.Sub(old.EndedAt) + now.Sub(recent.EndedAt)) / 2
	removed, remaining, err := e.m.Prune(ctx, olderThan, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{old.ID}) || remaining != 2 {
		t.Errorf("Prune(%s): removed %v remaining %d, want [%s] 2", olderThan, removed, remaining, old.ID)
	}
	if exists(e.jobDir(old.ID)) {
		t.Errorf("output directory of the pruned job is still there")
	}
	if _, err := e.m.Get(ctx, old.ID); !errors.Is(err, record.ErrJobNotFound) {
		t.Errorf("Get pruned job: %v, want record.ErrJobNotFound", err)
	}
	if _, err := e.m.Read(ctx, old.ID, ReadRequest{MaxBytes: 10}); !errors.Is(err, record.ErrJobNotFound) {
		t.Errorf("Read pruned job: %v, want record.ErrJobNotFound", err)
	}
	if exists(e.jobDir(old.ID)) {
		t.Errorf("Read recreated the pruned job's output directory")
	}
	if out := e.readAll(recent.ID, output.Both); out != "recent\n" {
		t.Errorf("recent job's output %q", out)
	}

	// Running jobs are never pruned, whatever the age or status asked for.
	for _, statuses := range [][]string{{record.StatusRunning}, nil} {
		removed, _, err := e.m.Prune(ctx, 0, statuses)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(removed, running.ID) {
			t.Errorf("Prune(0, %v) removed the running job", statuses)
		}
	}
	if exists(e.jobDir(recent.ID)) {
		t.Errorf("Prune(0) kept the finished job's output directory")
	}
	if !exists(e.jobDir(running.ID)) {
		t.Errorf("Prune removed the running job's output directory")
	}
	if j := e.get(running.ID); j.Status != record.StatusRunning {
		t.Errorf("running job after Prune: %s", describe(j))
	}
}

// TestRecover: after a restart, lost jobs are marked, orphans removed and
// surviving containers adopted.
func TestRecover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("lost", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, nil)
		now := time.Now()
		running := &record.Job{ID: uuid.NewString(), Kind: KindCommand, Status: record.StatusRunning, Command: "sleep 100",
			Image: e.image, Cwd: "/workspace", ContainerID: strings.Repeat("ab", 32),
			CreatedAt: now.Add(-6 * time.Second), StartedAt: now.Add(-5 * time.Second), Limits: record.Limits{TimeoutMS: 30000}}
		queued := &record.Job{ID: uuid.NewString(), Kind: KindCommand, Status: record.StatusQueued, Command: "true",
			Image: e.image, Cwd: "/workspace", CreatedAt: now.Add(-time.Second)}
		for _, rec := range []*record.Job{running, queued} {
			if err := e.st.CreateJob(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.m.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{running.ID, queued.ID} {
			j := e.get(id)
			if j.Status != record.StatusFailed || j.Reason != record.ReasonLost || j.Error == "" || j.EndedAt.IsZero() {
				t.Errorf("after Recover: %s ended %v, want failed/lost with an error and an end", describe(j), j.EndedAt)
			}
		}
	})

	t.Run("orphan", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, nil)
		mine := e.bareContainer("orphan-"+uuid.NewString(), e.instance, "sleep 100")
		otherInstance := e.instance + "-other"
		theirs := e.bareContainer("theirs-"+uuid.NewString(), otherInstance, "sleep 100")
		if err := e.m.Recover(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := e.containerState(mine); ok {
			t.Errorf("orphaned container of this instance still exists")
		}
		if st, ok := e.containerState(theirs); !ok || !st.Running {
			t.Errorf("Recover touched another instance's container (exists %v)", ok)
		}
		if jobs, _, _ := e.m.List(ctx, record.ListFilter{}); len(jobs) != 0 {
			t.Errorf("Recover made %d job records from orphans", len(jobs))
		}
	})

	for _, tc := range []struct {
		name string
		cmd  string
		// prefill is what the crashed server had captured already (stdout).
		prefill string
		// exited: the container ended while no server ran.
		exited   bool
		exit     int
		wantOut  string
		wantStat string
	}{
		{name: "adopt running", cmd: "for i in 1 2 3 4 5; do echo $i; sleep 0.5; done; exit 5",
			exit: 5, wantOut: "1\n2\n3\n4\n5\n", wantStat: record.StatusFailed},
		{name: "adopt running with partial capture", cmd: "for i in 1 2 3 4 5; do echo $i; sleep 0.5; done; exit 5",
			prefill: "1\n", exit: 5, wantOut: "1\n2\n3\n4\n5\n", wantStat: record.StatusFailed},
		{name: "adopt exited while down", cmd: "echo bye; echo oops >&2; exit 0", exited: true,
			exit: 0, wantOut: "bye\noops\n", wantStat: record.StatusCompleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil)
			id := uuid.NewString()
			cid := e.bareContainer(id, e.instance, tc.cmd)
			started := time.Now()
			rec := &record.Job{ID: id, Kind: KindCommand, Status: record.StatusRunning, Command: tc.cmd,
				Image: e.image, Cwd: "/workspace", ContainerID: cid, StdinOpen: true,
				CreatedAt: started, StartedAt: started, Limits: record.Limits{TimeoutMS: 30000}}
			if err := e.st.CreateJob(ctx, rec); err != nil {
				t.Fatal(err)
			}
			if tc.prefill != "" {
				c, err := output.Open(e.jobDir(id), e.pol.Output.MaxBytesPerJob, 0)
				if err != nil {
					t.Fatal(err)
				}
				c.Write(sandbox.Stdout, []byte(tc.prefill))
				c.Close()
			}
			if tc.exited {
				deadline := time.Now().Add(waitLong)
				for st, ok := e.containerState(cid); ok && st.Running; st, ok = e.containerState(cid) {
					if time.Now().After(deadline) {
						t.Fatal("container did not exit")
					}
					time.Sleep(100 * time.Millisecond)
				}
			} else {
				time.Sleep(800 * time.Millisecond) // it prints while no server watches
			}

			if err := e.m.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			if j := e.get(id); !tc.exited && (j.Status != record.StatusRunning || j.StdinOpen) {
				t.Errorf("adopted job: %s stdin open %v, want running without stdin", describe(j), j.StdinOpen)
			}
			got := e.wait(id)
			t.Logf("%s after %s", describe(got), time.Since(started).Round(time.Millisecond))
			if got.Status != tc.wantStat || got.ExitCode == nil || *got.ExitCode != tc.exit {
				t.Errorf("adopted job ended %s, want %s exit %d", describe(got), tc.wantStat, tc.exit)
			}
			out := e.readAll(id, output.Both)
			if tc.exited { // the order across streams is the engine's
				lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
				slices.Sort(lines)
				out = strings.Join(lines, "\n") + "\n"
			}
			if out != tc.wantOut {
				t.Errorf("output %q, want %q", out, tc.wantOut)
			}
			if _, ok := e.containerState(cid); ok {
				t.Errorf("container of the adopted job still exists after its end")
			}
		})
	}
}

// TestShutdown: running and queued jobs end as server_shutdown; no new jobs.
func TestShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(p *policy.Policy) { p.Jobs.MaxConcurrent, p.Jobs.MaxQueued = 1, 1 })
	ctx := context.Background()
	running := e.submit("sleep 100")
	queued := e.submit("echo never")
	if queued.Status != record.StatusQueued {
		t.Fatalf("second job: %s, want queued", describe(queued))
	}

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	begin := time.Now()
	e.m.Shutdown(sctx)
	took := time.Since(begin)
	t.Logf("Shutdown took %s", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("Shutdown took %s, want under 10 s", took)
	}
	for _, id := range []string{running.ID, queued.ID} {
		j := e.get(id)
		if j.Status != record.StatusKilled || j.Reason != record.ReasonShutdown {
			t.Errorf("after Shutdown: %s, want killed/server_shutdown", describe(j))
		}
	}
	if j := e.get(queued.ID); j.ContainerID != "" {
		t.Errorf("queued job got a container: %s", describe(j))
	}
	if left, err := e.rt.List(ctx); err != nil || len(left) != 0 {
		t.Errorf("after Shutdown: %d containers left (%v)", len(left), err)
	}
	if _, err := e.m.Submit(ctx, e.req("true")); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("Submit after Shutdown: %v, want ErrShuttingDown", err)
	}
	if _, err := e.m.Submit(ctx, e.req("true", func(r *Request) { r.Detach = true })); !errors.Is(err, ErrShuttingDown) {
		t.Errorf("detached Submit after Shutdown: %v, want ErrShuttingDown", err)
	}
}

package job

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
	"github.com/sandboxer/sandboxer/internal/store"
)

// State-machine tests on the fake runtime (internal/sandbox/fake): no Docker,
// deterministic timing through the fake's hooks. Their names start with
// TestMachine so `make test-unit` can run them alone (the package's other
// tests need an engine).

const fakeImage = "fake/base:latest"

// fakeEnv is one manager on a fake engine, with its own state directory.
type fakeEnv struct {
	t   *testing.T
	dir string
	eng *fake.Engine
	rt  *fake.Runtime
	st  *store.Store
	pol *policy.Policy
	m   *Manager
}

func newFakeEnv(t *testing.T, tune func(*policy.Policy)) *fakeEnv {
	t.Helper()
	dir := t.TempDir()
	eng := fake.NewEngine()
	rt := eng.Runtime("machine", "")
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	pol := policy.Default()
	if tune != nil {
		tune(pol)
	}
	m, err := New(rt, st, pol, dir, zerolog.Nop())
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	e := &fakeEnv{t: t, dir: dir, eng: eng, rt: rt, st: st, pol: pol, m: m}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		if cs, _ := rt.List(ctx); len(cs) != 0 {
			t.Errorf("%d containers left after Shutdown: %+v", len(cs), cs)
		}
		st.Close()
	})
	return e
}

func (e *fakeEnv) req(cmd string, opts ...func(*Request)) Request {
	e.t.Helper()
	lim, err := e.pol.Resolve(policy.Request{})
	if err != nil {
		e.t.Fatal(err)
	}
	r := Request{Kind: KindCommand, Command: cmd, Cmd: []string{"bash", "-c", cmd},
		Image: fakeImage, Cwd: "/workspace", Limits: lim, Network: policy.NetworkNone}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func detach(r *Request) { r.Detach = true }

func timeout(d time.Duration) func(*Request) { return func(r *Request) { r.Limits.Timeout = d } }

func (e *fakeEnv) submit(cmd string, opts ...func(*Request)) *record.Job {
	e.t.Helper()
	j, err := e.m.Submit(context.Background(), e.req(cmd, opts...))
	if err != nil {
		e.t.Fatalf("Submit(%q): %v", cmd, err)
	}
	return j
}

func (e *fakeEnv) wait(id string) *record.Job {
	e.t.Helper()
	j, err := e.m.Wait(context.Background(), id, 10*time.Second)
	if err != nil {
		e.t.Fatalf("Wait(%s): %v", id, err)
	}
	if !record.Finished(j.Status) {
		e.t.Fatalf("job %s still %s", id, j.Status)
	}
	return j
}

// running is the number of slots taken.
func (e *fakeEnv) running() (running, queued int) {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	return e.m.slots.running, len(e.m.queue)
}

// endDecided says whether the live job's end has been decided (kill, timeout, shutdown).
func (e *fakeEnv) endDecided(id string) bool {
	j := e.m.liveJob(id)
	if j == nil {
		return true
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.endStatus != ""
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestMachineKillDuringStart: a kill while the sandbox is starting ends the
// job killed/requested once the start returns — never timed_out, though its
// timeout is shorter than the start — the container is destroyed and the
// slot released.
func TestMachineKillDuringStart(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, func(p *policy.Policy) { p.Jobs.MaxConcurrent = 1 })
	j := e.submit("hang-start; sleep 60", detach, timeout(20*time.Millisecond))
	gate := e.eng.Gate(j.ID)
	<-gate.Entered()
	type res struct {
		j   *record.Job
		err error
	}
	killed := make(chan res, 1)
	go func() {
		k, err := e.m.Kill(context.Background(), j.ID, "TERM", time.Second, record.ReasonRequested)
		killed <- res{k, err}
	}()
	eventually(t, "kill decided", func() bool { return e.endDecided(j.ID) })
	time.Sleep(50 * time.Millisecond) // past the job's timeout, were it counting
	select {
	case r := <-killed:
		t.Fatalf("Kill returned before the start did: %+v %v", r.j, r.err)
	default:
	}
	gate.Release()
	r := <-killed
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.j.Status != record.StatusKilled || r.j.Reason != record.ReasonRequested {
		t.Fatalf("after kill during start: %s/%s, want killed/requested", r.j.Status, r.j.Reason)
	}
	if r.j.ContainerID == "" || e.eng.Exists(r.j.ContainerID) {
		t.Fatalf("container %q: want started, then destroyed", r.j.ContainerID)
	}
	if n, q := e.running(); n != 0 || q != 0 {
		t.Fatalf("slots after the kill: running %d queued %d", n, q)
	}
	// The slot is free: the next job starts at once.
	if next := e.wait(e.submit("echo next").ID); next.Status != record.StatusCompleted {
		t.Fatalf("next job: %s", next.Status)
	}
}

// TestMachineShutdownDuringStart: Shutdown while a sandbox starts waits for
// the start, then ends the job killed/server_shutdown with its container gone.
func TestMachineShutdownDuringStart(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	j := e.submit("hang-start; sleep 60", detach)
	gate := e.eng.Gate(j.ID)
	<-gate.Entered()
	stopped := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.m.Shutdown(ctx)
		close(stopped)
	}()
	eventually(t, "shutdown decided", func() bool { return e.endDecided(j.ID) })
	select {
	case <-stopped:
		t.Fatal("Shutdown returned while a sandbox was starting")
	case <-time.After(20 * time.Millisecond):
	}
	gate.Release()
	<-stopped
	got, err := e.m.Get(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != record.StatusKilled || got.Reason != record.ReasonShutdown {
		t.Fatalf("after shutdown during start: %s/%s", got.Status, got.Reason)
	}
	if e.eng.Count() != 0 {
		t.Fatal("container left after Shutdown")
	}
	if _, err := e.m.Submit(context.Background(), e.req("exit 0")); !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("Submit after Shutdown: %v", err)
	}
}

// TestMachineQueue: with one slot a second job queues, a third is refused;
// killing a queued job takes it out of the queue without a container; a
// queued job is promoted when the running one ends.
func TestMachineQueue(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, func(p *policy.Policy) { p.Jobs.MaxConcurrent, p.Jobs.MaxQueued = 1, 1 })
	a := e.submit("sleep 60", detach)
	b := e.submit("echo b")
	if b.Status != record.StatusQueued {
		t.Fatalf("second job: %s, want queued", b.Status)
	}
	if _, err := e.m.Submit(context.Background(), e.req("echo c")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third job: %v, want ErrQueueFull", err)
	}
	kb, err := e.m.Kill(context.Background(), b.ID, "TERM", time.Second, record.ReasonRequested)
	if err != nil {
		t.Fatal(err)
	}
	if kb.Status != record.StatusKilled || kb.Reason != record.ReasonRequested || kb.ContainerID != "" || kb.ExitCode != nil {
		t.Fatalf("killed queued job: %s/%s container %q", kb.Status, kb.Reason, kb.ContainerID)
	}
	if n, q := e.running(); n != 1 || q != 0 {
		t.Fatalf("after killing the queued job: running %d queued %d", n, q)
	}
	d := e.submit("echo d")
	if d.Status != record.StatusQueued {
		t.Fatalf("job d: %s, want queued", d.Status)
	}
	if _, err := e.m.Kill(context.Background(), a.ID, "KILL", 0, record.ReasonRequested); err != nil {
		t.Fatal(err)
	}
	got := e.wait(d.ID)
	if got.Status != record.StatusCompleted || got.ExitCode == nil || *got.ExitCode != 0 {
		t.Fatalf("promoted job: %s/%s", got.Status, got.Reason)
	}
	var out strings.Builder
	zero := int64(0)
	r, err := e.m.Read(context.Background(), d.ID, ReadRequest{Stream: output.Both, Cursor: &zero, MaxBytes: 100, Peek: true})
	if err != nil {
		t.Fatal(err)
	}
	out.Write(r.Data)
	if out.String() != "d\n" {
		t.Fatalf("promoted job's output %q", out.String())
	}
	if n, q := e.running(); n != 0 || q != 0 {
		t.Fatalf("at the end: running %d queued %d", n, q)
	}
}

// TestMachineTimeout: a job past its timeout ends timed_out, its container destroyed.
func TestMachineTimeout(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	j := e.submit("echo started; sleep 60", timeout(50*time.Millisecond))
	got := e.wait(j.ID)
	if got.Status != record.StatusTimedOut || got.Reason != record.ReasonTimeout || got.ExitCode != nil {
		t.Fatalf("%s/%s exit %v, want timed_out/timeout without an exit code", got.Status, got.Reason, got.ExitCode)
	}
	if e.eng.Exists(got.ContainerID) {
		t.Fatal("container of a timed-out job left")
	}
}

// TestMachineTimeoutRacesExit: jobs whose exit races their timeout each end
// with one final status that agrees with itself and stays put.
func TestMachineTimeoutRacesExit(t *testing.T) {
	t.Parallel()
	const n = 40
	e := newFakeEnv(t, func(p *policy.Policy) { p.Jobs.MaxConcurrent = n })
	var wg sync.WaitGroup
	ids := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, err := e.m.Submit(context.Background(), e.req("sleep 0.03; exit 0", detach, timeout(30*time.Millisecond)))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = j.ID
		}()
	}
	wg.Wait()
	counts := map[string]int{}
	for _, id := range ids {
		if id == "" {
			continue
		}
		got := e.wait(id)
		key := got.Status
		if got.ExitCode != nil {
			key += fmt.Sprintf("/exit=%d", *got.ExitCode)
		}
		counts[key]++
		switch got.Status {
		case record.StatusCompleted:
			if got.Reason != "" || got.ExitCode == nil || *got.ExitCode != 0 {
				t.Errorf("completed with reason %q exit %v", got.Reason, got.ExitCode)
			}
		case record.StatusTimedOut:
			// Its own exit code would mean it ended before the timeout's kill did.
			if got.Reason != record.ReasonTimeout || (got.ExitCode != nil && *got.ExitCode != 137) {
				t.Errorf("timed_out with reason %q exit %v", got.Reason, got.ExitCode)
			}
		default:
			t.Errorf("status %s/%s (%s)", got.Status, got.Reason, got.Error)
		}
		if e.eng.Exists(got.ContainerID) {
			t.Errorf("container of job %s left", id)
		}
	}
	time.Sleep(50 * time.Millisecond) // a second finish would show now
	for _, id := range ids {
		if id == "" {
			continue
		}
		again, err := e.st.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !record.Finished(again.Status) {
			t.Errorf("job %s stored as %s after its end", id, again.Status)
		}
	}
	t.Logf("outcomes: %v", counts)
}

// TestMachineCleanupErrorKeepsCompleted: a job that exited 0 stays completed
// with exit code 0 when removing its container fails afterwards; the
// container is swept by the next recovery pass.
func TestMachineCleanupErrorKeepsCompleted(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	e.eng.SetRemoveError(func(sandbox.Container) error {
		return errors.New("removal of container failed: device or resource busy")
	})
	got := e.wait(e.submit("echo ok; exit 0").ID)
	if got.Status != record.StatusCompleted || got.Reason != "" || got.ExitCode == nil || *got.ExitCode != 0 || got.Error != "" {
		t.Fatalf("%s/%s exit %v error %q, want completed with exit 0", got.Status, got.Reason, got.ExitCode, got.Error)
	}
	if !e.eng.Exists(got.ContainerID) {
		t.Fatal("the container should still be there (its removal failed)")
	}
	e.eng.SetRemoveError(nil)
	if err := e.m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.eng.Exists(got.ContainerID) {
		t.Fatal("the recovery pass did not sweep the leftover container")
	}
}

// TestMachineNonZeroAndOOM: how the sandbox ended maps to status and reason.
func TestMachineNonZeroAndOOM(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	for _, tc := range []struct{ cmd, status, reason string }{
		{"exit 3", record.StatusFailed, record.ReasonExitCode},
		{"oom", record.StatusFailed, record.ReasonOOMKilled},
		{"echo hi", record.StatusCompleted, ""},
	} {
		got := e.wait(e.submit(tc.cmd).ID)
		if got.Status != tc.status || got.Reason != tc.reason {
			t.Errorf("%q: %s/%s, want %s/%s", tc.cmd, got.Status, got.Reason, tc.status, tc.reason)
		}
	}
}

// TestMachineStartError: a failed start is failed/start_error with its slot back.
func TestMachineStartError(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, func(p *policy.Policy) { p.Jobs.MaxConcurrent = 1 })
	e.eng.SetDown(true)
	j, err := e.m.Submit(context.Background(), e.req("exit 0"))
	if !errors.Is(err, sandbox.ErrEngineUnreachable) {
		t.Fatalf("Submit with the engine down: %v", err)
	}
	if j.Status != record.StatusFailed || j.Reason != record.ReasonStartError {
		t.Fatalf("%s/%s, want failed/start_error", j.Status, j.Reason)
	}
	e.eng.SetDown(false)
	if got := e.wait(e.submit("exit 0").ID); got.Status != record.StatusCompleted {
		t.Fatalf("after the engine is back: %s", got.Status)
	}
}

// TestMachineEngineLostWhileRunning: a job whose engine connection breaks is failed/lost.
func TestMachineEngineLostWhileRunning(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	j := e.submit("sleep 60")
	e.eng.SetDown(true)
	got := e.wait(j.ID)
	if got.Status != record.StatusFailed || got.Reason != record.ReasonLost || got.ExitCode != nil {
		t.Fatalf("%s/%s exit %v", got.Status, got.Reason, got.ExitCode)
	}
	e.eng.SetDown(false)
	if err := e.rt.Remove(context.Background(), got.ContainerID); err != nil {
		t.Fatal(err)
	}
}

// TestMachineCancelDuringPrune: a cancelled call's kill racing a prune of the
// same job never crashes and never returns a nil record without an error.
func TestMachineCancelDuringPrune(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	for range 30 {
		j := e.submit("sleep 60", detach)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := e.m.Prune(context.Background(), 0, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		rec, err := e.m.Kill(context.Background(), j.ID, "KILL", 0, record.ReasonCancelled)
		close(stop)
		wg.Wait()
		if rec == nil && err == nil {
			t.Fatal("Kill returned neither a record nor an error")
		}
		if err == nil && (rec.Status != record.StatusKilled || rec.Reason != record.ReasonCancelled) {
			t.Fatalf("cancelled job: %s/%s", rec.Status, rec.Reason)
		}
		if err != nil && !errors.Is(err, record.ErrJobNotFound) {
			t.Fatalf("Kill during prune: %v", err)
		}
		// Reading a pruned job is an error, not a crash.
		if _, err := e.m.Read(context.Background(), j.ID, ReadRequest{Stream: output.Both, MaxBytes: 10}); err != nil && !errors.Is(err, record.ErrJobNotFound) {
			t.Fatalf("Read during prune: %v", err)
		}
	}
}

// TestMachineRecover: after a crash, a running job whose container still runs
// is adopted (output resumes, it ends with its own exit); one whose container
// is gone and a queued one are failed/lost; an orphan of this instance is
// removed and another instance's container left alone.
func TestMachineRecover(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	ctx := context.Background()
	crashed := e.eng.Runtime("machine", "crashed-server")
	other := e.eng.Runtime("another-instance", "x")
	now := time.Now()

	adoptID := uuid.NewString()
	spec := sandbox.Spec{JobID: adoptID, Kind: KindCommand, Image: fakeImage,
		Cmd: []string{"bash", "-c", "echo one; echo err >&2; sleep 0.2; echo two; exit 5"}}
	cid, err := crashed.StartDetached(spec)
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := crashed.StartDetached(sandbox.Spec{JobID: uuid.NewString(), Kind: KindCommand, Cmd: []string{"bash", "-c", "sleep 60"}})
	theirs, _ := other.StartDetached(sandbox.Spec{JobID: uuid.NewString(), Kind: KindCommand, Cmd: []string{"bash", "-c", "sleep 60"}})
	t.Cleanup(func() { _ = other.Remove(ctx, theirs) })

	recs := map[string]*record.Job{
		"adopt": {ID: adoptID, ServerID: "crashed-server", Kind: KindCommand, Status: record.StatusRunning, Command: "x",
			Image: fakeImage, ContainerID: cid, CreatedAt: now, StartedAt: now, Limits: record.Limits{TimeoutMS: 30000}},
		"gone": {ID: uuid.NewString(), ServerID: "crashed-server", Kind: KindCommand, Status: record.StatusRunning, Command: "y",
			Image: fakeImage, ContainerID: strings.Repeat("ab", 32), CreatedAt: now, StartedAt: now, Limits: record.Limits{TimeoutMS: 30000}},
		"queued": {ID: uuid.NewString(), ServerID: "crashed-server", Kind: KindCommand, Status: record.StatusQueued, Command: "z",
			Image: fakeImage, CreatedAt: now},
	}
	for _, rec := range recs {
		if err := e.st.CreateJob(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gone", "queued"} {
		got, err := e.m.Get(ctx, recs[name].ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != record.StatusFailed || got.Reason != record.ReasonLost || got.Error == "" {
			t.Errorf("%s job after Recover: %s/%s %q, want failed/lost", name, got.Status, got.Reason, got.Error)
		}
	}
	if e.eng.Exists(orphan) {
		t.Error("orphan of this instance not removed")
	}
	if !e.eng.Exists(theirs) {
		t.Error("another instance's container removed")
	}
	got := e.wait(adoptID)
	if got.Status != record.StatusFailed || got.Reason != record.ReasonExitCode || got.ExitCode == nil || *got.ExitCode != 5 {
		t.Fatalf("adopted job: %s/%s exit %v", got.Status, got.Reason, got.ExitCode)
	}
	zero := int64(0)
	for sel, want := range map[output.Selector]string{output.StdoutOnly: "one\ntwo\n", output.StderrOnly: "err\n"} {
		r, err := e.m.Read(ctx, adoptID, ReadRequest{Stream: sel, Cursor: &zero, MaxBytes: 100, Peek: true})
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Data) != want {
			t.Errorf("adopted job's output (%v): %q, want %q", sel, r.Data, want)
		}
	}
	if e.eng.Exists(cid) {
		t.Error("adopted job's container left")
	}
}

// peers is a fixed answer to "which servers are alive".
type peers map[string]bool

func (p peers) Alive(id string) bool { return p[id] }
func (p peers) Stale() []string      { return nil }
func (p peers) Forget(string)        {}

// TestMachineSharedStateDir: with several servers on one state directory, a
// server's recovery pass leaves a live server's jobs and containers alone,
// claims a dead server's, and sweeps the dead server's probes and warm
// sandboxes — never its own.
func TestMachineSharedStateDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	eng := fake.NewEngine()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pol := policy.Default()
	alive := peers{"live": true, "me": true}
	m, err := New(eng.Runtime("machine", "me"), st, pol, dir, zerolog.Nop(), WithServer("me", alive))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	ctx := context.Background()
	live, dead, me := eng.Runtime("machine", "live"), eng.Runtime("machine", "dead"), eng.Runtime("machine", "me")
	sleepSpec := func(id, kind string) sandbox.Spec {
		return sandbox.Spec{JobID: id, Kind: kind, Image: fakeImage, Cmd: []string{"bash", "-c", "sleep 60"}}
	}
	liveJob := uuid.NewString()
	liveCID, _ := live.StartDetached(sleepSpec(liveJob, KindCommand))
	liveProbe, _ := live.StartDetached(sleepSpec("probe-1", KindProbe))
	deadProbe, _ := dead.StartDetached(sleepSpec("probe-2", KindProbe))
	deadWarm, _ := dead.StartDetached(sleepSpec("", sandbox.KindPool))
	myProbe, _ := me.StartDetached(sleepSpec("probe-3", KindProbe))
	deadJob := uuid.NewString()
	deadCID, _ := dead.StartDetached(sleepSpec(deadJob, KindCommand))
	now := time.Now()
	for _, rec := range []*record.Job{
		{ID: liveJob, ServerID: "live", Kind: KindCommand, Status: record.StatusRunning, Image: fakeImage, ContainerID: liveCID, CreatedAt: now, StartedAt: now, Limits: record.Limits{TimeoutMS: 60000}},
		{ID: deadJob, ServerID: "dead", Kind: KindCommand, Status: record.StatusRunning, Image: fakeImage, ContainerID: deadCID, CreatedAt: now, StartedAt: now, Limits: record.Limits{TimeoutMS: 60000}},
	} {
		if err := st.CreateJob(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	for pass := 0; pass < 3; pass++ { // every cleanup interval, again and again
		if err := m.Recover(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, id := range map[string]string{"live server's job": liveCID, "live server's probe": liveProbe, "own probe": myProbe, "adopted job": deadCID} {
		if !eng.Exists(id) {
			t.Errorf("%s's container was removed", name)
		}
	}
	for name, id := range map[string]string{"dead server's probe": deadProbe, "dead server's warm sandbox": deadWarm} {
		if eng.Exists(id) {
			t.Errorf("%s was not swept", name)
		}
	}
	if got, _ := m.Get(ctx, liveJob); got.Status != record.StatusRunning || got.ServerID != "live" {
		t.Errorf("live server's job after recovery: %s on %s", got.Status, got.ServerID)
	}
	if got, _ := m.Get(ctx, deadJob); got.ServerID != "me" || got.Status != record.StatusRunning {
		t.Errorf("dead server's job not adopted: %s on %s", got.Status, got.ServerID)
	}
	if _, err := m.Kill(ctx, liveJob, "KILL", 0, record.ReasonRequested); !errors.Is(err, ErrOtherServer) {
		t.Errorf("kill of a live server's job: %v, want ErrOtherServer", err)
	}
	for _, id := range []string{liveCID, liveProbe, myProbe} {
		_ = me.Remove(ctx, id)
	}
}

// TestMachineAdoptCopies: the running jobs of a workspace a fork copied
// with its processes become jobs of the copy: new ids and records, the
// output so far replayed, input kept; the source's go on apart.
func TestMachineAdoptCopies(t *testing.T) {
	e := newFakeEnv(t, nil)
	ctx := context.Background()
	ws := func(name string, start bool) string {
		refs, err := e.rt.CreateWorkspace(ctx, sandbox.WorkspaceSpec{Name: name, Image: fakeImage})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.rt.RemoveWorkspace(context.Background(), refs) })
		if start {
			if err := e.rt.StartWorkspace(ctx, refs.ContainerID); err != nil {
				t.Fatal(err)
			}
		}
		return refs.ContainerID
	}
	src, dst := ws("src", true), ws("dst", false)
	out := &sandbox.Buffer{Max: 1 << 20}
	h, err := e.rt.StartIn(ctx, src, sandbox.Spec{JobID: "orig", Kind: sandbox.KindSession, Image: fakeImage, Cmd: []string{"bash", "-c", "echo ready; cat"}, OpenStdin: true}, out)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy(context.Background())
	for deadline := time.Now().Add(10 * time.Second); out.Stdout() != "ready\n"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the source's session: %q", out.Stdout())
		}
	}
	orig := &record.Job{ID: "orig", Kind: KindSession, Status: record.StatusRunning, Command: "cat", Image: fakeImage, Workspace: "src",
		ContainerID: h.ContainerID(), StdinOpen: true, CreatedAt: time.Now(), StartedAt: time.Now(),
		Limits: record.Limits{TimeoutMS: time.Hour.Milliseconds()}}
	if err := e.st.CreateJob(ctx, orig); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(t.TempDir(), "image")
	if err := e.rt.CheckpointWorkspace(ctx, src, image, true); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.RestoreWorkspace(ctx, dst, image); err != nil {
		t.Fatal(err)
	}
	copied, err := e.m.AdoptCopies(ctx, "src", src, "dst", dst)
	if err != nil || len(copied) != 1 || copied[0].From != "orig" || copied[0].Workspace != "dst" {
		t.Fatalf("AdoptCopies: %+v, %v", copied, err)
	}
	id := copied[0].JobID
	if _, err := e.m.SendInput(ctx, id, []byte("typed in the copy\n"), false); err != nil {
		t.Fatalf("input to the copy's session: %v", err)
	}
	want := "ready\ntyped in the copy\n"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r, err := e.m.Read(ctx, id, ReadRequest{Stream: output.StdoutOnly, Cursor: new(int64), MaxBytes: 1 << 20})
		if err == nil && string(r.Data) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copy's session output: %+v %v", r, err)
		}
	}
	if got := out.Stdout(); got != "ready\n" {
		t.Fatalf("input to the copy reached the source: %q", got)
	}
	if j, err := e.m.Get(ctx, id); err != nil || j.Workspace != "dst" || !j.StdinOpen || j.ContainerID != dst+"/"+strings.SplitN(h.ContainerID(), "/", 2)[1] {
		t.Fatalf("the copy's job record: %+v %v", j, err)
	}
	if _, err := e.m.Kill(ctx, id, "KILL", 0, record.ReasonRequested); err != nil {
		t.Fatal(err)
	}
}

// TestMachineWaitsForRoom: on an engine whose sandboxes wait for room (the
// fake's node of one CPU), a job that does not fit yet is queued with the
// engine's reason, counts the wait in queued_ms, and runs once the job
// before it ends; Submit answers a caller that waits for the start once
// the job waits for room; one killed while it waits ends killed, not failed; one
// asking more than the node has is refused at once, naming cpus.
func TestMachineWaitsForRoom(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, nil)
	e.eng.SetCapacity(1_000_000_000)
	e.m.capacity = e.rt // as the server wires an engine declaring Capacity
	ctx := context.Background()

	started := func(id string) func() bool {
		return func() bool { rec, err := e.m.Get(ctx, id); return err == nil && !rec.StartedAt.IsZero() }
	}
	first := e.submit("sleep 0.4", detach)
	eventually(t, "the first job runs", started(first.ID))
	second := e.submit("echo second", detach)
	eventually(t, "the second job waits for room", func() bool { return e.m.QueueReason(ctx, second.ID) != "" })
	if why := e.m.QueueReason(ctx, second.ID); !strings.Contains(why, "Insufficient cpu") {
		t.Fatalf("queue reason %q, want the engine's", why)
	}
	if rec, err := e.m.Get(ctx, second.ID); err != nil || rec.Status != record.StatusQueued {
		t.Fatalf("while it waits for room: %+v %v, want queued", rec, err)
	}
	if done := e.wait(first.ID); done.Status != record.StatusCompleted {
		t.Fatalf("first job: %s", done.Status)
	}
	done := e.wait(second.ID)
	if done.Status != record.StatusCompleted || done.QueuedMS < 200 {
		t.Fatalf("second job: %s, queued %d ms; want completed after a wait of about 400 ms", done.Status, done.QueuedMS)
	}
	if why := e.m.QueueReason(ctx, second.ID); why != "" {
		t.Fatalf("queue reason %q after the job ended", why)
	}

	holder := e.submit("sleep 30", detach)
	eventually(t, "the holder runs", started(holder.ID))
	// A caller that waits for its job's start is answered once the job
	// waits for room: queued, with the engine's reason.
	waiter := e.submit("echo never")
	if waiter.Status != record.StatusQueued || e.m.QueueReason(ctx, waiter.ID) == "" {
		t.Fatalf("Submit while the node is full: %s, reason %q; want queued with the engine's", waiter.Status, e.m.QueueReason(ctx, waiter.ID))
	}
	k, err := e.m.Kill(ctx, waiter.ID, "TERM", time.Second, record.ReasonRequested)
	if err != nil {
		t.Fatal(err)
	}
	if k.Status != record.StatusKilled || k.Reason != record.ReasonRequested || k.Error != "" {
		t.Fatalf("killed while it waited for room: %s/%s %q, want killed/requested", k.Status, k.Reason, k.Error)
	}
	if _, err := e.m.Kill(ctx, holder.ID, "KILL", 0, record.ReasonRequested); err != nil {
		t.Fatal(err)
	}

	big := e.req("echo big")
	big.Limits.NanoCPUs = 2_000_000_000
	if _, err := e.m.Submit(ctx, big); !errors.Is(err, ErrNeverFits) || !strings.Contains(err.Error(), "cpus 2 ") {
		t.Fatalf("a job asking 2 CPUs of a 1-CPU node: %v, want refused naming cpus", err)
	}
}

package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
)

// warmer is a sandbox.Warmer over the fake runtime: a warm sandbox launches
// its job as a fresh fake start, and tests can end it, fail it or count.
type warmer struct {
	*fake.Runtime
	mu         sync.Mutex
	prepared   []*testWarm
	prepareErr error
	nextID     atomic.Int64
}

type testWarm struct {
	w          *warmer
	id         string
	key        string
	ended      chan struct{}
	endOnce    sync.Once
	launched   atomic.Bool
	discarded  atomic.Bool
	failLaunch bool
}

func (w *warmer) Prepare(ctx context.Context, spec sandbox.Spec) (sandbox.Warm, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.prepareErr != nil {
		return nil, w.prepareErr
	}
	tw := &testWarm{w: w, id: fmt.Sprintf("warm-%d", w.nextID.Add(1)), key: spec.PoolKey(), ended: make(chan struct{})}
	w.prepared = append(w.prepared, tw)
	return tw, nil
}

func (t *testWarm) ContainerID() string    { return t.id }
func (t *testWarm) Ended() <-chan struct{} { return t.ended }
func (t *testWarm) end()                   { t.endOnce.Do(func() { close(t.ended) }) }
func (t *testWarm) Discard(context.Context) error {
	t.discarded.Store(true)
	t.end()
	return nil
}

func (t *testWarm) Launch(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if t.failLaunch {
		return nil, errors.New("gone")
	}
	if spec.PoolKey() != t.key {
		return nil, errors.New("wrong shape")
	}
	t.launched.Store(true)
	return t.w.Runtime.Start(ctx, spec, out)
}

func (w *warmer) all() []*testWarm {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*testWarm(nil), w.prepared...)
}

func spec(image string) sandbox.Spec {
	return sandbox.Spec{JobID: "j", Kind: "command", Image: image, Cmd: []string{"bash", "-c", "echo hi"}, WorkDir: "/workspace"}
}

func newPool(t *testing.T, size int) (*Pool, *warmer) {
	t.Helper()
	w := &warmer{Runtime: fake.New("test")}
	p := New(w, []Target{{Name: "bash", Spec: spec("base"), Size: size}}, 2, zerolog.Nop())
	go p.Run()
	t.Cleanup(func() { p.Drain(context.Background()) })
	return p, w
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ready(p *Pool) int { return p.Stats()[0].Ready }

func run(t *testing.T, p *Pool, s sandbox.Spec) {
	t.Helper()
	h, err := p.Start(context.Background(), s, &sandbox.Buffer{Max: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	if st := h.Status(); st.ExitCode != 0 {
		t.Fatalf("status %+v", st)
	}
}

// A matching job takes a warm sandbox (each serves one job), the pool
// refills, and a job of another shape starts cold.
func TestWarmServesOneJobAndRefills(t *testing.T) {
	p, w := newPool(t, 2)
	waitFor(t, "pool full", func() bool { return ready(p) == 2 })
	run(t, p, spec("base"))
	launched := 0
	for _, tw := range w.all() {
		if tw.launched.Load() {
			launched++
		}
	}
	if launched != 1 {
		t.Fatalf("%d warm sandboxes launched, want 1", launched)
	}
	waitFor(t, "refill", func() bool { return ready(p) == 2 && len(w.all()) == 3 })
	run(t, p, spec("other-image"))
	if st := p.Stats()[0]; st.Served != 1 || st.Missed != 0 || len(w.all()) != 3 {
		t.Fatalf("after a cold job of another shape: %+v, %d prepared", st, len(w.all()))
	}
	// Other limits, same shape: served warm (the limits are set at launch).
	s := spec("base")
	s.Limits.MemoryBytes = 64 << 20
	run(t, p, s)
	if st := p.Stats()[0]; st.Served != 2 {
		t.Fatalf("a job with other limits was not served warm: %+v", st)
	}
}

// A warm sandbox that dies while waiting is replaced; one that fails to
// launch is skipped, and the job still runs.
func TestDeadWarmIsReplaced(t *testing.T) {
	p, w := newPool(t, 1)
	waitFor(t, "pool full", func() bool { return ready(p) == 1 })
	first := w.all()[0]
	first.end() // removed from outside
	waitFor(t, "replacement", func() bool { return ready(p) == 1 && len(w.all()) == 2 })
	if !first.discarded.Load() {
		t.Error("the dead sandbox was not discarded")
	}
	w.all()[1].failLaunch = true
	run(t, p, spec("base")) // falls through to cold
	if !w.all()[1].discarded.Load() {
		t.Error("a sandbox that failed to launch was not discarded")
	}
}

// Engine failures back off and are reported; Drain removes every warm
// sandbox and stops refilling, after which jobs start cold.
func TestBackoffAndDrain(t *testing.T) {
	w := &warmer{Runtime: fake.New("test"), prepareErr: errors.New("engine down")}
	p := New(w, []Target{{Name: "bash", Spec: spec("base"), Size: 2}}, 2, zerolog.Nop())
	go p.Run()
	waitFor(t, "failure reported", func() bool { return p.Stats()[0].LastErr == "engine down" })
	w.mu.Lock()
	w.prepareErr = nil
	w.mu.Unlock()
	waitFor(t, "recovery after backoff", func() bool { return ready(p) == 2 })
	p.Drain(context.Background())
	for _, tw := range w.all() {
		if !tw.discarded.Load() {
			t.Errorf("%s not discarded by Drain", tw.id)
		}
	}
	n := len(w.all())
	run(t, p, spec("base"))
	time.Sleep(50 * time.Millisecond)
	if len(w.all()) != n {
		t.Error("the pool refilled after Drain")
	}
}

func TestAddAndRemoveTargets(t *testing.T) {
	w := &warmer{Runtime: fake.New("test")}
	p := New(w, nil, 2, zerolog.Nop())
	go p.Run() // runs with no targets: they may come later
	t.Cleanup(func() { p.Drain(context.Background()) })
	withMount := spec("node")
	withMount.Mounts = []sandbox.Mount{{Volume: "deps-1", Target: "/deps", ReadOnly: true}}
	if withMount.PoolKey() == spec("node").PoolKey() {
		t.Fatal("mounts are not part of the pool key")
	}
	p.AddTarget(Target{Name: "deps", Spec: withMount, Size: 1})
	p.AddTarget(Target{Name: "deps again", Spec: withMount, Size: 1}) // the same shape: kept once
	waitFor(t, "a warm sandbox with the mount", func() bool { s := p.Stats(); return len(s) == 1 && s[0].Ready == 1 })

	// A job without the mount is never served by it.
	h, err := p.Start(context.Background(), spec("node"), &sandbox.Buffer{Max: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	for _, tw := range w.all() {
		if tw.launched.Load() {
			t.Fatal("a job without the mount took the warm sandbox that has it")
		}
	}
	h, err = p.Start(context.Background(), withMount, &sandbox.Buffer{Max: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	if !w.all()[0].launched.Load() {
		t.Fatal("the job with the mount did not take its warm sandbox")
	}
	waitFor(t, "the refill", func() bool { return p.Stats()[0].Ready == 1 })

	p.RemoveTargets(context.Background(), func(s sandbox.Spec) bool { return len(s.Mounts) > 0 && s.Mounts[0].Volume == "deps-1" })
	if len(p.Stats()) != 0 {
		t.Fatalf("target still kept: %v", p.Stats())
	}
	for _, tw := range w.all()[1:] {
		if !tw.discarded.Load() {
			t.Errorf("warm sandbox %s of a removed target was not discarded", tw.id)
		}
	}
}

// statOf is the target of an image, if the pool keeps one.
func statOf(p *Pool, image string) (Stat, bool) {
	for _, st := range p.Stats() {
		if st.Image == image {
			return st, true
		}
	}
	return Stat{}, false
}

// Following use: a shape used once gets a warm sandbox (its next job is
// served warm), within the budget of warm sandboxes in all, and is no longer
// kept once unused for Idle.
func TestFollowUse(t *testing.T) {
	w := &warmer{Runtime: fake.New("test")}
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	p := New(w, []Target{{Name: "bash", Spec: spec("base"), Size: 1}}, 2, zerolog.Nop(), FollowUse(Follow{MaxTotal: 2, Idle: time.Minute, Now: clock}))
	go p.Run()
	t.Cleanup(func() { p.Drain(context.Background()) })
	waitFor(t, "pool full", func() bool { return ready(p) == 1 })

	run(t, p, spec("node")) // cold: no target yet, one is kept from now on
	waitFor(t, "a warm node sandbox", func() bool { st, ok := statOf(p, "node"); return ok && st.Ready == 1 })
	run(t, p, spec("node"))
	if st, _ := statOf(p, "node"); st.Served != 1 {
		t.Fatalf("the second node job was not served warm: %+v", st)
	}
	// The budget (2: bash's 1 and node's 1) is spent: another shape runs cold, unfollowed.
	run(t, p, spec("python"))
	if _, ok := statOf(p, "python"); ok {
		t.Fatalf("python followed past the budget: %+v", p.Stats())
	}
	// Unused for Idle: node is no longer kept, and its warm sandbox goes; the
	// configured target stays.
	waitFor(t, "node refilled", func() bool { st, _ := statOf(p, "node"); return st.Ready == 1 })
	advance(2 * time.Minute)
	p.signal()
	waitFor(t, "node unfollowed", func() bool { _, ok := statOf(p, "node"); return !ok })
	if _, ok := statOf(p, "base"); !ok {
		t.Fatalf("the configured target went too: %+v", p.Stats())
	}
	for _, tw := range w.all() {
		if tw.key == spec("node").PoolKey() && !tw.launched.Load() {
			waitFor(t, "the idle warm node sandbox discarded", tw.discarded.Load)
		}
	}
	// With the budget free again, python is followed now.
	run(t, p, spec("python"))
	waitFor(t, "python followed", func() bool { _, ok := statOf(p, "python"); return ok })
}

// A shape with a volume is followed only when Follow.Volume allows that
// volume (a shared build cache); a dependency cache's is left to AddTarget.
func TestFollowVolumes(t *testing.T) {
	w := &warmer{Runtime: fake.New("test")}
	p := New(w, nil, 2, zerolog.Nop(), FollowUse(Follow{MaxTotal: 4, Idle: time.Minute, Volume: func(m sandbox.Mount) bool { return m.Target == "/shared" && m.ReadOnly }}))
	go p.Run()
	t.Cleanup(func() { p.Drain(context.Background()) })
	shared, deps := spec("go"), spec("py")
	shared.Mounts = []sandbox.Mount{{Volume: "cache", Target: "/shared", ReadOnly: true}}
	deps.Mounts = []sandbox.Mount{{Volume: "deps-x", Target: "/deps", ReadOnly: true}}
	run(t, p, shared)
	run(t, p, deps)
	waitFor(t, "the shared cache's shape followed", func() bool { st, ok := statOf(p, "go"); return ok && st.Ready == 1 })
	run(t, p, shared)
	if st, _ := statOf(p, "go"); st.Served != 1 {
		t.Fatalf("the second job with the shared cache was not served warm: %+v", st)
	}
	if _, ok := statOf(p, "py"); ok {
		t.Fatalf("a dependency cache's shape was followed: %+v", p.Stats())
	}
}

// A warm sandbox on the egress network never serves a job without network,
// nor the reverse; jobs on it share one shape whatever their own allowlist
// (the grant is in the environment, handed over at launch).
func TestPoolKeySeparatesEgress(t *testing.T) {
	none, onEgress, own := spec("base"), spec("base"), spec("base")
	none.Network = "none"
	onEgress.Network, own.Network = sandbox.NetworkEgress, sandbox.NetworkEgress
	own.Egress = []string{"mirror.test"}
	if none.PoolKey() == onEgress.PoolKey() {
		t.Error("jobs with and without egress share a pool key")
	}
	if own.PoolKey() != onEgress.PoolKey() {
		t.Error("a job's own allowlist changes the sandbox's shape")
	}
}

// A warm sandbox that starts its job's program ahead serves only jobs that
// ask for that program (the supervisor still checks each job, and starts
// any other anew); the rest of a job's command is not part of the shape.
func TestPoolKeySeparatesPrestart(t *testing.T) {
	plain, pre, other := spec("node"), spec("node"), spec("node")
	pre.Prestart = &sandbox.Prestart{Argv: []string{"node", "/runner.js"}, EarlyEnv: []string{"NODE_*"}}
	other.Prestart = &sandbox.Prestart{Argv: []string{"node", "/other.js"}, EarlyEnv: []string{"NODE_*"}}
	late := pre
	late.Prestart = &sandbox.Prestart{Argv: []string{"node", "/runner.js"}, EarlyEnv: []string{"NODE_*"}, LateEnv: []string{"NODE_PATH"}}
	if plain.PoolKey() == pre.PoolKey() || pre.PoolKey() == other.PoolKey() || late.PoolKey() == pre.PoolKey() {
		t.Error("jobs with another prestart (or none) share a pool key")
	}
	again := pre
	again.Cmd = []string{"node", "/runner.js", "arg"}
	if again.PoolKey() != pre.PoolKey() {
		t.Error("a job's arguments change the sandbox's shape")
	}
}

// TestDepthFollowsArrivals: a shape whose jobs come back to back keeps as
// many warm sandboxes as came in the window, within Follow.MaxTotal, and
// its refills start at once; a shape of size 1 called once stays at 1.
func TestDepthFollowsArrivals(t *testing.T) {
	w := &warmer{Runtime: fake.New("test")}
	p := New(w, []Target{{Name: "bash", Spec: spec("base"), Size: 1}}, 2, zerolog.Nop(),
		FollowUse(Follow{MaxTotal: 4, Idle: time.Minute, Now: time.Now}))
	go p.Run()
	t.Cleanup(func() { p.Drain(context.Background()) })
	waitFor(t, "pool full", func() bool { return ready(p) == 1 })
	if st := p.Stats()[0]; st.Depth != 1 {
		t.Fatalf("depth before any job: %+v", st)
	}
	for range 6 {
		run(t, p, spec("base"))
	}
	// Six jobs in the window: depth 4 (the whole budget), and the pool
	// fills to it.
	waitFor(t, "depth 4, filled", func() bool { st := p.Stats()[0]; return st.Depth == 4 && st.Ready == 4 })
	if st := p.Stats()[0]; st.Served+st.Missed != 6 {
		t.Fatalf("stats after six jobs: %+v", st)
	}
}

// On an engine whose sandboxes wait for room (the fake's node of two CPUs,
// both held by the pool's idle sandboxes), a cold job of another shape
// makes the pool give its idle sandboxes back: the job is placed, hears
// why it waited and that it was placed, and the pool fills again after it.
func TestPoolYieldsRoomToAWaitingJob(t *testing.T) {
	eng := fake.NewEngine()
	eng.SetCapacity(2_000_000_000)
	rt := eng.Runtime("test", "")
	p := New(rt, []Target{{Name: "bash", Spec: spec("base"), Size: 2}}, 2, zerolog.Nop())
	go p.Run()
	t.Cleanup(func() { p.Drain(context.Background()) })
	waitFor(t, "pool full", func() bool { return ready(p) == 2 })
	idle, err := rt.List(context.Background())
	if err != nil || len(idle) != 2 {
		t.Fatalf("the pool's sandboxes: %+v %v", idle, err)
	}

	var mu sync.Mutex
	var heard []string
	ctx := sandbox.WithCapacityWait(context.Background(), func(why string) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, why)
	})
	job := spec("other-image")
	job.Cmd = []string{"bash", "-c", "sleep 0.2"}
	h, err := p.Start(ctx, job, &sandbox.Buffer{Max: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(heard) != 2 || !strings.Contains(heard[0], "Insufficient cpu") || heard[1] != "" {
		t.Fatalf("the job heard %q, want the engine's reason, then its placing", heard)
	}
	mu.Unlock()
	for _, c := range idle {
		waitFor(t, "the idle sandboxes given back", func() bool { return !eng.Exists(c.ID) })
	}
	<-h.Done()
	waitFor(t, "the pool full again once the job ended", func() bool { return ready(p) == 2 })
}

// A warm sandbox refused for want of room is tried again at the shortest
// backoff, not later and later as for an engine that fails: room comes back
// when a job ends.
func TestNoRoomIsRetriedSoon(t *testing.T) {
	eng := fake.NewEngine()
	eng.SetCapacity(1_000_000_000)
	p := New(eng.Runtime("test", ""), []Target{{Name: "bash", Spec: spec("base"), Size: 2}}, 2, zerolog.Nop())
	go p.Run()
	t.Cleanup(func() { p.Drain(context.Background()) })
	waitFor(t, "one warm sandbox and a refusal", func() bool {
		st := p.Stats()[0]
		return st.Ready == 1 && strings.Contains(st.LastErr, "Insufficient cpu")
	})
	time.Sleep(3500 * time.Millisecond) // three retries or more
	p.mu.Lock()
	backoff := p.targets[0].backoff
	p.mu.Unlock()
	if backoff != minBackoff {
		t.Fatalf("backoff after refusals for room: %s, want %s", backoff, minBackoff)
	}
}

// Package pool is a sandbox.Runtime that keeps sandboxes started before their
// jobs arrive (docs/architecture.md, "The warm pool"): a job whose shape matches a warm sandbox takes it
// and starts in milliseconds; any other job, or any job when the pool is
// empty, starts cold on the runtime below. Each warm sandbox serves exactly
// one job and then goes, like a cold one: isolation is not traded for speed.
//
// The pool refills in the background, a few starts at a time, and backs off
// while the engine fails. Close removes every sandbox it still holds.
package pool

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

const (
	// prepareTimeout bounds starting one warm sandbox.
	prepareTimeout = 60 * time.Second
	// discardTimeout bounds removing one.
	discardTimeout = 30 * time.Second
	// refillMaxDelay is how long after a job takes a warm sandbox its
	// replacement starts at the latest (it starts when the job ends, if
	// sooner): a job does not share the CPUs with its replacement's start,
	// and a long one does not keep the pool short.
	refillMaxDelay = 2 * time.Second
	// Backoff after a failed start, doubling up to the maximum.
	minBackoff = time.Second
	maxBackoff = time.Minute
	// arrivalWindow: a shape keeps as many warm sandboxes as jobs of it came
	// in this window (at least its size), within Follow.MaxTotal.
	arrivalWindow = 10 * time.Second
)

// Target is one kind of warm sandbox to keep: a spec (shape and default
// limits; its command is ignored) and how many to keep ready.
type Target struct {
	Name string // for reports, e.g. the language
	Spec sandbox.Spec
	Size int
}

// Stat is a target's state.
type Stat struct {
	Name     string
	Image    string
	Size     int // wanted
	Depth    int // kept now: Size, more while its jobs come fast
	Ready    int // started and waiting for a job
	Starting int
	Served   int64  // jobs that took a warm sandbox
	Missed   int64  // jobs of this shape that found none ready and started cold
	LastErr  string // the last start failure, if the most recent start failed
}

// Follow makes the pool follow use: a shape that finds no warm sandbox gets
// one kept for it (a language used now is likely used again soon), within a
// budget of warm sandboxes in all, and loses it after Idle without use.
type Follow struct {
	MaxTotal int           // warm sandboxes wanted in all, configured targets included
	Idle     time.Duration // a followed shape unused this long is no longer kept
	Now      func() time.Time
	// Volume says whether a shape that mounts this volume may be followed:
	// one the server never removes while it runs (a tenant's shared build
	// cache). nil = none.
	Volume func(sandbox.Mount) bool
}

// Pool keeps warm sandboxes for its targets in front of a runtime.
type Pool struct {
	sandbox.Warmer
	// observer is told of each job that asked for a
	// warm sandbox of its image, and whether it got one.
	observer observe.Observer
	log      zerolog.Logger
	parallel chan struct{} // starts in flight, at most cap
	follow   Follow        // MaxTotal 0: only the configured targets

	mu      sync.Mutex
	targets []*target
	byKey   map[string]*target
	closed  bool
	// roomWaits counts cold starts waiting for room on the engine
	// (sandbox.WaitingForCapacity): while any does, the pool keeps no idle
	// sandbox and starts none, so it is never why a job cannot be placed.
	roomWaits int
	kick      chan struct{}
	stop      chan struct{}
	wg        sync.WaitGroup
}

type target struct {
	Target
	key      string
	ready    []sandbox.Warm
	starting int
	served   int64
	missed   int64
	lastErr  string
	backoff  time.Duration
	retryAt  time.Time
	removed  bool        // taken out by RemoveTarget: what it still starts is discarded
	followed bool        // added because a job of its shape came (Follow)
	lastUse  time.Time   // of a followed target
	arrivals []time.Time // jobs of its shape in the last arrivalWindow, oldest first
	depth    int         // how many it keeps now: Size, more while jobs come fast (depthsLocked)
}

// arrived counts a job of t's shape at now, and forgets those out of the window.
func (t *target) arrived(now time.Time) {
	t.arrivals = append(t.recent(now), now)
}

// recent are t's arrivals within the window before now.
func (t *target) recent(now time.Time) []time.Time {
	i := 0
	for i < len(t.arrivals) && now.Sub(t.arrivals[i]) > arrivalWindow {
		i++
	}
	return t.arrivals[i:]
}

// depthsLocked sets each target's depth: its size, and for shapes whose
// jobs come faster than that, as many as came in the last window while the
// budget (Follow.MaxTotal, past the sizes) lasts, the busiest first.
func (p *Pool) depthsLocked(now time.Time) {
	budget := p.follow.MaxTotal - p.wantedLocked()
	busy := make([]*target, 0, len(p.targets))
	for _, t := range p.targets {
		t.depth = t.Size
		if len(t.recent(now)) > t.Size {
			busy = append(busy, t)
		}
	}
	slices.SortFunc(busy, func(a, b *target) int { return len(b.recent(now)) - len(a.recent(now)) })
	for _, t := range busy {
		extra := min(len(t.recent(now))-t.Size, budget)
		if extra <= 0 {
			break
		}
		t.depth += extra
		budget -= extra
	}
}

var _ sandbox.Runtime = (*Pool)(nil)

// New puts a pool in front of w. parallel is how many sandboxes may be
// starting at once (at least 1): refilling must not starve running jobs of
// the engine. Call Run to start filling.
func New(w sandbox.Warmer, targets []Target, parallel int, log zerolog.Logger, opts ...Option) *Pool {
	p := &Pool{
		Warmer: w, log: log, observer: observe.Nop{},
		parallel: make(chan struct{}, max(parallel, 1)),
		byKey:    map[string]*target{},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	for _, t := range targets {
		if t.Size <= 0 {
			continue
		}
		t.Spec.Kind, t.Spec.JobID = sandbox.KindPool, ""
		tg := &target{Target: t, key: t.Spec.PoolKey()}
		if _, dup := p.byKey[tg.key]; dup {
			p.byKey[tg.key].Size += t.Size
			continue
		}
		p.targets = append(p.targets, tg)
		p.byKey[tg.key] = tg
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Option configures a pool at construction.
type Option func(*Pool)

// FollowUse makes the pool follow use (see Follow).
func FollowUse(f Follow) Option {
	return func(p *Pool) {
		if f.Now == nil {
			f.Now = time.Now
		}
		p.follow = f
	}
}

// WithObserver tells o of each take, and whether it hit (metrics).
func WithObserver(o observe.Observer) Option { return func(p *Pool) { p.observer = observe.Or(o) } }

// Start runs spec in a warm sandbox of its shape when one is ready, else cold.
func (p *Pool) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	for {
		w := p.take(spec.PoolKey())
		if p.observer != nil {
			p.observer.PoolTake(spec.Image, w != nil)
		}
		if w == nil {
			observe.MarkCtx(ctx, "cold")
			p.followShape(spec)
			return p.startCold(ctx, spec, out)
		}
		observe.MarkCtx(ctx, "warm_taken")
		h, err := w.Launch(ctx, spec, out)
		if err == nil {
			go p.refillAfter(h)
			return h, nil
		}
		// It died between being ready and being taken (removed from
		// outside, engine trouble): never the job's problem while cold works.
		p.log.Warn().Err(err).Str("container", short(w.ContainerID())).Msg("warm sandbox failed to launch; trying another")
		p.discard(w)
		if ctx.Err() != nil {
			return nil, err
		}
	}
}

// startCold starts spec on the engine. While the engine has no room for
// it, the pool yields: its idle sandboxes go and it starts no others until
// no start waits any more.
func (p *Pool) startCold(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	waiting := false
	wait := func(why string) {
		switch {
		case why != "" && !waiting:
			waiting = true
			p.yieldRoom()
		case why == "" && waiting:
			waiting = false
			p.roomFound()
		}
	}
	h, err := p.Warmer.Start(sandbox.WithCapacityWait(ctx, wait), spec, out)
	if waiting { // it gave up waiting (killed, failed)
		p.roomFound()
	}
	return h, err
}

// yieldRoom counts a start waiting for room and removes every idle sandbox.
func (p *Pool) yieldRoom() {
	p.mu.Lock()
	p.roomWaits++
	var idle []sandbox.Warm
	for _, t := range p.targets {
		idle = append(idle, t.ready...)
		t.ready = nil
	}
	p.mu.Unlock()
	if len(idle) > 0 {
		p.log.Info().Int("warm", len(idle)).Msg("a job waits for room on the engine: the pool gives back its idle sandboxes")
	}
	for _, w := range idle {
		go p.discard(w)
	}
}

// roomFound ends a start's wait for room; the pool refills once none waits.
func (p *Pool) roomFound() {
	p.mu.Lock()
	p.roomWaits--
	refill := p.roomWaits == 0
	p.mu.Unlock()
	if refill {
		p.signal()
	}
}

// take removes and returns a ready sandbox of key, or nil.
func (p *Pool) take(key string) sandbox.Warm {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.byKey[key]
	if t == nil || p.closed {
		return nil
	}
	if t.followed {
		t.lastUse = p.follow.Now()
	}
	t.arrived(time.Now())
	for len(t.ready) > 0 {
		w := t.ready[0]
		t.ready = t.ready[1:]
		select {
		case <-w.Ended():
			go p.discard(w)
			continue
		default:
		}
		t.served++
		if len(t.ready) == 0 && len(t.recent(time.Now())) > 1 {
			// Jobs come fast and this was the last one waiting: refill now,
			// or the next job misses. While others wait, the refill waits
			// for this job's end (refillAfter), so the job does not share
			// the CPUs with a container's start: that sharing cost every
			// warm call 2 to 3 ms p50 here (bisected: d07bc6d).
			p.signal()
		}
		return w // else refilled after its job (refillAfter)
	}
	t.missed++
	p.signal() // the refill starts at once
	return nil
}

// refillAfter refills the pool when h's job ends, or refillMaxDelay after
// it started.
func (p *Pool) refillAfter(h sandbox.Handle) {
	t := time.NewTimer(refillMaxDelay)
	defer t.Stop()
	select {
	case <-h.Done():
	case <-t.C:
	}
	p.signal()
}

func (p *Pool) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// followShape keeps a warm sandbox for a shape that had none, within the
// budget (granted host directories included: a recently used mount set is
// served warm). Shapes with other volumes than Follow.Volume allows are
// left to whoever mounts them (AddTarget: dependency caches).
func (p *Pool) followShape(spec sandbox.Spec) {
	if slices.ContainsFunc(spec.Mounts, func(m sandbox.Mount) bool {
		return m.Volume != "" && (p.follow.Volume == nil || !p.follow.Volume(m))
	}) {
		return
	}
	spec.Kind, spec.JobID = sandbox.KindPool, ""
	key := spec.PoolKey()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.follow.MaxTotal <= 0 || p.closed || p.byKey[key] != nil || p.wantedLocked()+1 > p.follow.MaxTotal {
		return
	}
	tg := &target{Target: Target{Name: "follow " + spec.Image, Spec: spec, Size: 1}, key: key, followed: true, lastUse: p.follow.Now(),
		arrivals: []time.Time{time.Now()}}
	p.targets = append(p.targets, tg)
	p.byKey[key] = tg
	p.log.Debug().Str("image", spec.Image).Msg("pool follows use: keeping a warm sandbox")
	p.signal()
}

// wantedLocked is how many warm sandboxes the targets want in all.
func (p *Pool) wantedLocked() int {
	n := 0
	for _, t := range p.targets {
		n += t.Size
	}
	return n
}

// unfollowIdle stops keeping followed shapes unused for Follow.Idle.
func (p *Pool) unfollowIdle() {
	p.mu.Lock()
	if p.follow.MaxTotal <= 0 || p.follow.Idle <= 0 {
		p.mu.Unlock()
		return
	}
	now := p.follow.Now()
	idle := map[string]bool{}
	for _, t := range p.targets {
		if t.followed && now.Sub(t.lastUse) >= p.follow.Idle {
			idle[t.key] = true
		}
	}
	p.mu.Unlock()
	if len(idle) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	p.RemoveTargets(ctx, func(s sandbox.Spec) bool {
		s.Kind, s.JobID = sandbox.KindPool, ""
		return idle[s.PoolKey()]
	})
}

// Run fills the pool until Close (targets may be added later: AddTarget).
func (p *Pool) Run() {
	p.wg.Add(1)
	defer p.wg.Done()
	tick := time.NewTicker(minBackoff)
	defer tick.Stop()
	for {
		p.unfollowIdle()
		p.fill()
		select {
		case <-p.stop:
			return
		case <-p.kick:
		case <-tick.C:
		}
	}
}

// fill starts what each target lacks, within the parallel limit.
func (p *Pool) fill() {
	for {
		p.mu.Lock()
		if p.closed || p.roomWaits > 0 {
			p.mu.Unlock()
			return
		}
		now := time.Now()
		p.depthsLocked(now)
		// The policy's targets before followed shapes (where room is
		// short, pool.size is what the operator asked for), then the
		// target furthest below its depth.
		var next *target
		for _, t := range p.targets {
			lack := t.depth - len(t.ready) - t.starting
			if lack <= 0 || !now.After(t.retryAt) {
				continue
			}
			if next == nil || next.followed && !t.followed ||
				next.followed == t.followed && lack > next.depth-len(next.ready)-next.starting {
				next = t
			}
		}
		if next == nil {
			p.mu.Unlock()
			return
		}
		select {
		case p.parallel <- struct{}{}:
		default:
			p.mu.Unlock()
			return // a start that ends kicks the loop again
		}
		next.starting++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.prepare(next)
	}
}

func (p *Pool) prepare(t *target) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	w, err := p.Warmer.Prepare(ctx, t.Spec)
	cancel()
	<-p.parallel
	p.mu.Lock()
	t.starting--
	if err != nil {
		t.backoff = min(max(t.backoff*2, minBackoff), maxBackoff)
		if errors.Is(err, sandbox.ErrNoRoom) {
			// Room comes back when a job ends: try again soon, not later
			// and later as for an engine that fails.
			t.backoff = minBackoff
		}
		t.retryAt = time.Now().Add(t.backoff)
		t.lastErr = err.Error()
		backoff := t.backoff
		p.mu.Unlock()
		p.log.Debug().Err(err).Str("pool", t.Name).Dur("retry_in", backoff).Msg("warm sandbox did not start")
		p.signal()
		return
	}
	t.backoff, t.lastErr = 0, ""
	if p.closed || t.removed || p.roomWaits > 0 {
		t.starting++ // until it is gone: RemoveTargets waits for it
		p.mu.Unlock()
		p.discard(w)
		p.mu.Lock()
		t.starting--
		p.mu.Unlock()
		return
	}
	t.ready = append(t.ready, w)
	p.mu.Unlock()
	p.signal()
	// A sandbox that dies while waiting (removed from outside) leaves the pool.
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		select {
		case <-w.Ended():
		case <-p.stop:
			return
		}
		if p.remove(t, w) {
			p.log.Info().Str("pool", t.Name).Str("container", short(w.ContainerID())).Msg("warm sandbox ended before a job came; replacing it")
			p.discard(w)
			p.signal()
		}
	}()
}

// remove takes w out of t's ready list; false when it was taken already.
func (p *Pool) remove(t *target, w sandbox.Warm) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range t.ready {
		if r == w {
			t.ready = append(t.ready[:i], t.ready[i+1:]...)
			return true
		}
	}
	return false
}

func (p *Pool) discard(w sandbox.Warm) {
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	if err := w.Discard(ctx); err != nil && !errors.Is(err, context.Canceled) {
		p.log.Warn().Err(err).Str("container", short(w.ContainerID())).Msg("remove warm sandbox")
	}
}

// AddTarget keeps warm sandboxes for one more shape (e.g. a script's
// dependency cache mounted); a shape already kept is left as it is.
func (p *Pool) AddTarget(t Target) {
	if t.Size <= 0 {
		return
	}
	t.Spec.Kind, t.Spec.JobID = sandbox.KindPool, ""
	key := t.Spec.PoolKey()
	p.mu.Lock()
	if _, ok := p.byKey[key]; ok || p.closed {
		p.mu.Unlock()
		return
	}
	tg := &target{Target: t, key: key}
	p.targets = append(p.targets, tg)
	p.byKey[key] = tg
	p.mu.Unlock()
	p.signal()
}

// RemoveTargets stops keeping the shapes match selects and removes their
// warm sandboxes, waiting (bounded by ctx) for those still starting, so
// what they mount is free when it returns.
func (p *Pool) RemoveTargets(ctx context.Context, match func(sandbox.Spec) bool) {
	p.mu.Lock()
	var gone []*target
	var ws []sandbox.Warm
	kept := p.targets[:0]
	for _, t := range p.targets {
		if !match(t.Spec) {
			kept = append(kept, t)
			continue
		}
		t.removed = true
		delete(p.byKey, t.key)
		gone = append(gone, t)
		ws = append(ws, t.ready...)
		t.ready = nil
	}
	p.targets = kept
	p.mu.Unlock()
	for _, w := range ws {
		p.discard(w)
	}
	for _, t := range gone {
		for {
			p.mu.Lock()
			n := t.starting
			p.mu.Unlock()
			if n == 0 || ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Stats reports each target.
func (p *Pool) Stats() []Stat {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Stat, 0, len(p.targets))
	for _, t := range p.targets {
		out = append(out, Stat{Name: t.Name, Image: t.Spec.Image, Size: t.Size, Depth: max(t.depth, t.Size), Ready: len(t.ready),
			Starting: t.starting, Served: t.served, Missed: t.missed, LastErr: t.lastErr})
	}
	return out
}

// Drain removes every warm sandbox and stops refilling; jobs then start
// cold. It waits (bounded by ctx) for starts in flight, whose sandboxes are
// removed too. The runtime below stays open.
func (p *Pool) Drain(ctx context.Context) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.stop)
	var all []sandbox.Warm
	for _, t := range p.targets {
		all = append(all, t.ready...)
		t.ready = nil
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range all {
		wg.Add(1)
		go func() { defer wg.Done(); p.discard(w) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		p.log.Warn().Msg("pool: gave up waiting for warm sandboxes to go")
	}
}

// Close drains the pool and closes the runtime below.
func (p *Pool) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	p.Drain(ctx)
	return p.Warmer.Close()
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

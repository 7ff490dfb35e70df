package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/terminal"
)

const (
	// startTimeout bounds creating, attaching and starting one container.
	startTimeout = 60 * time.Second
	// destroyTimeout bounds removing one container.
	destroyTimeout = 30 * time.Second
)

// Errors the tool layer turns into messages an agent can act on.
var (
	ErrOtherServer  = errors.New("job belongs to another server")
	ErrQueueFull    = errors.New("job queue full")
	ErrShuttingDown = errors.New("server is shutting down")
	ErrNoStdin      = errors.New("job has no open stdin")
	ErrInputStalled = errors.New("input not fully written")
)

// Manager runs jobs in sandboxes and keeps their records and output.
//
// Several servers (one per stdio client) may share a state directory, its
// database and its engine. Each manager has an identity (server); it runs,
// kills and sweeps only its own jobs and containers, and adopts those of a
// server only once alive says that server is gone.
type Manager struct {
	rt     sandbox.Runtime
	st     *store.Store
	pol    *policy.Policy
	outDir string
	log    zerolog.Logger
	server string
	peers  Peers

	mu   sync.Mutex
	live map[string]*liveJob // queued and running jobs
	// ended are jobs this server finished lately, kept endedKeep so the
	// call that waited for one builds its answer from memory (its record
	// and capture) instead of the store: endedJob.
	ended     map[string]endedJob
	slots     *slots         // jobs.max_concurrent, shared by tenants
	weights   map[string]int // tenants' weights (WithShares); nil: one pool
	queue     []*liveJob
	closed    bool
	recovered bool // restart recovery has run against a reachable engine
	stop      chan struct{}
	bg        sync.WaitGroup
	created   chan struct{} // closed (and replaced) each time a job is recorded

	observer observe.Observer
	ext      Extension                // nil: none
	capacity sandbox.CapacityReporter // WithCapacity: the largest sandbox the engine can place
}

// Extension adds to a job's request what the server gives every job of its
// kind (e.g. a tenant's shared build cache) and learns how the job ended.
type Extension interface {
	// Extend changes a request before its job is queued; ctx is the
	// caller's (its tenant). The job's record keeps what the caller asked.
	Extend(ctx context.Context, req *Request)
	// Ended is told of every job's end with its request as Extend left it.
	Ended(req Request, st sandbox.ExitStatus)
}

// liveJob is a queued or running job's in-memory state.
type liveJob struct {
	id      string
	req     Request
	tl      *observe.Timeline // the call's timeline that made it (nil: none)
	capture *output.Capture
	done    chan struct{} // closed once the final status is stored
	started chan struct{} // closed once the sandbox runs (handle set)

	mu     sync.Mutex
	rec    record.Job
	handle sandbox.Handle
	// endStatus/endReason are decided by whoever ends the job on purpose
	// (timeout, kill, cancel, shutdown) before the container goes.
	endStatus, endReason string
	timer                *time.Timer
	hasSlot              bool // holds one of Manager.slots
	// owner is who submitted the job (its tenant), for whom it starts: a
	// workspace it names is that tenant's; its slot counts in its share.
	owner tenant.Tenant
	// queueWhy says why a queued job waits (under Manager.mu).
	queueWhy string
	// roomWhy says why a job that holds a slot still waits: its engine has
	// no room for its sandbox yet (sandbox.WaitingForCapacity); "" when it
	// does not wait. cancelStart ends that wait (a kill).
	roomWhy     string
	cancelStart context.CancelCauseFunc
	// roomWait is closed when the start first waits for room; startErr is
	// its error when it failed (for the caller that waits for the start).
	roomWait     chan struct{}
	roomWaitOnce sync.Once
	startErr     error
	readCursors  [3]int64 // "new since last read", per stream selector
	// Sessions: term is a PTY session's emulated screen (fed as output
	// arrives); idle ends a session that got no input for its idle timeout.
	term *terminal.Terminal
	idle *time.Timer
	// figuresShown counts the returned figures a session call has shown
	// (Manager.NewFigures), so each comes back once.
	figuresShown int
}

// Option configures a Manager.
type Option func(*Manager)

// Peers tells about the other servers of a state directory (internal/serverlock).
type Peers interface {
	// Alive says whether the server with this identity still runs.
	Alive(server string) bool
	// Stale lists servers that are gone but whose traces remain; Forget removes them.
	Stale() []string
	Forget(server string)
}

// WithServer gives the manager its server identity and its peers. Without it
// the manager has a fresh identity and takes every other server for gone,
// which is right for a server alone on its state directory.
func WithServer(id string, peers Peers) Option {
	return func(m *Manager) { m.server, m.peers = id, peers }
}

// WithExtension has ext extend every request and learn every end.
func WithExtension(ext Extension) Option { return func(m *Manager) { m.ext = ext } }

// WithCapacity refuses at once a job asking more CPU or memory than c says
// one sandbox can ever get (it would wait for room forever).
func WithCapacity(c sandbox.CapacityReporter) Option { return func(m *Manager) { m.capacity = c } }

// ErrNeverFits is a job asking more than the engine can ever place.
var ErrNeverFits = errors.New("the job can never be placed")

// checkFits refuses a request larger than the largest sandbox the engine
// can place, naming the argument.
func (m *Manager) checkFits(ctx context.Context, req Request) error {
	if m.capacity == nil {
		return nil
	}
	cpus, mem, err := m.capacity.LargestSandbox(ctx)
	if err != nil {
		m.log.Debug().Err(err).Msg("largest sandbox unknown: the job is not checked against it")
		return nil
	}
	if cpus > 0 && req.Limits.NanoCPUs > cpus {
		return fmt.Errorf("%w: cpus %g is more than any node of the engine can give one sandbox (%g); ask for at most %g",
			ErrNeverFits, float64(req.Limits.NanoCPUs)/1e9, float64(cpus)/1e9, float64(cpus)/1e9)
	}
	if mem > 0 && req.Limits.MemoryBytes > mem {
		return fmt.Errorf("%w: memory_mb %d is more than any node of the engine can give one sandbox (%d); ask for at most %d",
			ErrNeverFits, req.Limits.MemoryBytes>>20, mem>>20, mem>>20)
	}
	return nil
}

// WithShares shares the job slots among the tenants named, by weight
// (slots.go); without it every job takes from one pool.
func WithShares(weights map[string]int) Option { return func(m *Manager) { m.weights = weights } }

// WithObserver tells o of jobs' starts and ends, and their waits (metrics).
func WithObserver(o observe.Observer) Option { return func(m *Manager) { m.observer = observe.Or(o) } }

// New makes a manager keeping job output under stateDir/jobs.
func New(rt sandbox.Runtime, st *store.Store, pol *policy.Policy, stateDir string, log zerolog.Logger, opts ...Option) (*Manager, error) {
	outDir := filepath.Join(stateDir, "jobs")
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return nil, fmt.Errorf("job output dir: %w", err)
	}
	m := &Manager{
		rt: rt, st: st, pol: pol, outDir: outDir, log: log,
		server:   uuid.NewString(),
		live:     map[string]*liveJob{},
		created:  make(chan struct{}),
		observer: observe.Nop{},
		stop:     make(chan struct{}),
	}
	for _, o := range opts {
		o(m)
	}
	m.slots = newSlots(pol.Jobs.MaxConcurrent, m.weights)
	return m, nil
}

// Server is this manager's server identity.
func (m *Manager) Server() string { return m.server }

// othersAlive says whether server is another server that is still running.
func (m *Manager) othersAlive(server string) bool {
	return server != m.server && m.peers != nil && m.peers.Alive(server)
}

// Policy is the policy the manager enforces.
func (m *Manager) Policy() *policy.Policy { return m.pol }

func (m *Manager) jobDir(id string) string { return filepath.Join(m.outDir, id) }

func (m *Manager) openCapture(id string) (*output.Capture, error) {
	return output.Open(m.jobDir(id), m.pol.Output.MaxBytesPerJob, int(m.pol.Output.RingBytes))
}

// Created is closed the next time any tenant's job is recorded (what a
// listener to the resource list waits on; it looks at its own jobs then).
func (m *Manager) Created() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.created
}

// Submit records a job and starts it, or queues it when every slot is taken.
// A start failure is returned as an error (the record says start_error too).
func (m *Manager) Submit(ctx context.Context, req Request) (*record.Job, error) {
	if t, ok := tenant.From(ctx); ok && t.MaxJobs > 0 {
		// The store counts the tenant's own (its filter), so a token's
		// limit is its alone.
		n, err := m.st.CountActiveJobs(ctx)
		if err != nil {
			return nil, err
		}
		if n >= t.MaxJobs {
			return nil, fmt.Errorf("%w: %d of this token's jobs are queued or running, the most its token allows (jobs=%d in the token file); wait for one to end or kill one",
				ErrQueueFull, n, t.MaxJobs)
		}
	}
	if err := m.checkFits(ctx, req); err != nil {
		return nil, err
	}
	id := uuid.NewString()
	capture, err := m.openCapture(id)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	j := &liveJob{id: id, req: req, capture: capture, done: make(chan struct{}), started: make(chan struct{}), term: newTerm(req),
		roomWait: make(chan struct{}), tl: observe.TimelineOf(ctx)}
	j.tl.Note("job", id)
	j.tl.Note("image", req.Image)
	if req.Workspace != "" {
		j.tl.Note("workspace", req.Workspace)
	}
	j.tl.Mark("capture_opened")
	j.owner, _ = tenant.From(ctx)
	if m.ext != nil {
		m.ext.Extend(ctx, &j.req)
	}
	j.rec = record.Job{
		ID: id, ServerID: m.server, Kind: req.Kind, Status: record.StatusQueued, Command: req.Command,
		Language: req.Language, Image: req.Image, Workspace: req.Workspace, Cwd: req.Cwd,
		Env: envKeys(req.Env), StdinOpen: req.KeepStdinOpen, CreatedAt: now, Details: req.Details,
		Limits: record.Limits{
			TimeoutMS: req.Limits.Timeout.Milliseconds(), MemoryBytes: req.Limits.MemoryBytes,
			NanoCPUs: req.Limits.NanoCPUs, Pids: req.Limits.Pids,
		},
	}

	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		capture.Close()
		os.RemoveAll(m.jobDir(id))
		return nil, ErrShuttingDown
	case !m.slots.canTake(j.owner.Name) && len(m.queue) >= m.pol.Jobs.MaxQueued:
		running, queued := m.slots.running, len(m.queue)
		m.mu.Unlock()
		capture.Close()
		os.RemoveAll(m.jobDir(id))
		return nil, fmt.Errorf("%w: %d jobs running and %d queued (policy jobs.max_concurrent=%d, jobs.max_queued=%d); wait for a job to finish or kill one",
			ErrQueueFull, running, queued, m.pol.Jobs.MaxConcurrent, m.pol.Jobs.MaxQueued)
	}
	startNow := m.slots.canTake(j.owner.Name)
	if startNow {
		// Holding a slot is running, from the caller's view, while the sandbox starts.
		m.slots.take(j.owner.Name)
		j.hasSlot = true
		j.rec.Status = record.StatusRunning
	} else {
		m.queue = append(m.queue, j)
		j.queueWhy = m.slots.why(j.owner.Name)
	}
	m.live[id] = j
	m.mu.Unlock()

	if err := m.st.CreateJob(ctx, &j.rec); err != nil {
		m.mu.Lock()
		delete(m.live, id)
		if startNow {
			m.slots.give(j.owner.Name)
		} else {
			m.removeQueued(j)
		}
		m.mu.Unlock()
		capture.Close()
		os.RemoveAll(m.jobDir(id))
		return nil, fmt.Errorf("record job: %w", err)
	}
	j.tl.Mark("recorded")
	m.mu.Lock()
	close(m.created)
	m.created = make(chan struct{})
	m.mu.Unlock()
	if !startNow {
		return j.snapshot(), nil
	}
	if req.Detach {
		snap := j.snapshot()
		m.startAsync(j)
		return snap, nil
	}
	// The caller waits for the start, but not for room on the engine:
	// a job that waits for room is queued, and the call's wait_s applies.
	m.startAsync(j)
	select {
	case <-j.started:
	case <-j.roomWait:
	case <-j.done:
		j.mu.Lock()
		err := j.startErr
		j.mu.Unlock()
		if err != nil {
			return j.snapshot(), err
		}
	}
	return j.snapshot(), nil
}

// startAsync starts a job that holds a slot without waiting for it. Shutdown
// waits for such starts, so no sandbox can start after the server stopped.
func (m *Manager) startAsync(j *liveJob) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bg.Add(1) // under m.mu, before Shutdown (which sets closed under m.mu) waits
	go func() {
		defer m.bg.Done()
		_ = m.start(j)
	}()
}

func envKeys(env []string) []string {
	// Only keys are recorded: values may be secrets.
	keys := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	return keys
}

// start runs a job that holds a slot. On failure the job is finished as
// failed/start_error and the slot released.
func (m *Manager) start(j *liveJob) error {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	j.mu.Lock()
	if closed && j.endStatus == "" {
		j.endStatus, j.endReason = record.StatusKilled, record.ReasonShutdown
	}
	if j.endStatus != "" { // killed while it waited for its slot, or shutting down
		j.mu.Unlock()
		m.finish(j, sandbox.ExitStatus{})
		return nil
	}
	j.mu.Unlock()

	// startTimeout bounds the start's own work, not a wait for room on the
	// engine: that is queue time, as long as it takes (or until a kill).
	ctx, cancel := context.WithCancelCause(observe.WithTimeline(tenant.With(context.Background(), j.owner), j.tl))
	defer cancel(nil)
	deadline := time.AfterFunc(startTimeout, func() {
		cancel(fmt.Errorf("the sandbox did not start within %s: %w", startTimeout, context.DeadlineExceeded))
	})
	defer deadline.Stop()
	ctx = sandbox.WithCapacityWait(ctx, func(why string) { m.waitForRoom(j, why, deadline) })
	j.mu.Lock()
	j.cancelStart = cancel
	j.mu.Unlock()
	spec := SandboxSpec(m.pol, j.req)
	spec.JobID = j.id
	m.collectSpec(&spec, j.req, j.id)
	startAt := time.Now()
	j.tl.MarkAt("spec_built", startAt)
	h, err := m.rt.Start(ctx, spec, m.liveOutput(j))
	j.tl.Mark("sandbox_started")
	if err != nil {
		j.mu.Lock()
		j.roomWhy = ""
		j.startErr = err
		if j.endStatus == "" { // not ended on purpose while it waited for room
			j.rec.Error = err.Error()
			j.endStatus, j.endReason = record.StatusFailed, record.ReasonStartError
		}
		j.mu.Unlock()
		m.finish(j, sandbox.ExitStatus{})
		return err
	}
	j.mu.Lock()
	j.handle = h
	close(j.started)
	j.rec.Status = record.StatusRunning
	j.rec.StartedAt = time.Now()
	j.rec.ContainerID = h.ContainerID()
	m.observer.JobStarted(j.rec.Kind, j.rec.Language, startAt.Sub(j.rec.CreatedAt), j.rec.StartedAt.Sub(startAt))
	j.timer = time.AfterFunc(j.req.Limits.Timeout, func() { m.end(j, record.StatusTimedOut, record.ReasonTimeout) })
	m.startIdle(j)
	rec := j.rec
	// Ended (killed, cancelled, shut down) while the sandbox was starting: end
	// found no handle then, so the sandbox goes now. Deciding under j.mu means
	// one of the two always sees the other.
	endedWhileStarting := j.endStatus != ""
	j.mu.Unlock()
	if err := m.st.UpdateJob(context.Background(), &rec); err != nil {
		m.log.Error().Err(err).Str("job", j.id).Msg("store running job")
	}
	j.tl.Mark("running_recorded")
	m.log.Debug().Str("job", j.id).Str("container", shortID(rec.ContainerID)).Str("image", rec.Image).Msg("job started")
	if endedWhileStarting {
		m.watch(j, h)
		ctx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
		defer cancel()
		if err := h.Destroy(ctx); err != nil {
			m.log.Error().Err(err).Str("job", j.id).Msg("destroy sandbox")
		}
		return nil
	}
	if j.req.Stdin != nil {
		go func() {
			// Bounded by the job's life: a job that never reads its stdin
			// ends by its timeout, which ends this write too.
			ctx, cancel := context.WithTimeout(context.Background(), j.req.Limits.Timeout)
			defer cancel()
			_, _ = h.WriteStdin(ctx, j.req.Stdin)
			if !j.req.KeepStdinOpen {
				_ = h.CloseStdin()
			}
		}()
	}
	m.watch(j, h)
	return nil
}

// watch finishes the job when its sandbox ends.
func (m *Manager) watch(j *liveJob, h sandbox.Handle) {
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		<-h.Done()
		st := h.Status()
		markSupervisor(j.tl, st.Stamps)
		j.tl.Mark("exit_seen")
		m.finish(j, st)
		if m.ext != nil {
			m.ext.Ended(j.req, st)
		}
	}()
}

// end stops a job on purpose: the status it will get is decided first, then
// the container goes (taking every process of the job with it).
func (m *Manager) end(j *liveJob, status, reason string) {
	j.mu.Lock()
	if j.endStatus == "" {
		j.endStatus, j.endReason = status, reason
	}
	h := j.handle
	if h == nil && j.roomWhy != "" && j.cancelStart != nil {
		// Waiting for room on the engine: the wait ends now, and start
		// finishes the job with the status decided here.
		j.cancelStart(fmt.Errorf("the job was ended (%s) while it waited for room", reason))
	}
	j.mu.Unlock()
	if h == nil {
		// Still queued: take it out of the queue and finish it here. (A job
		// whose sandbox is starting is in no queue: start ends it.)
		m.mu.Lock()
		queued := m.removeQueued(j)
		m.mu.Unlock()
		if queued {
			m.finish(j, sandbox.ExitStatus{})
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), destroyTimeout)
	defer cancel()
	if err := h.Destroy(ctx); err != nil {
		m.log.Error().Err(err).Str("job", j.id).Msg("destroy sandbox")
	}
}

// QueueReason says why job id waits, for a slot or for room on the engine
// ("" when it does not wait, or is not ctx's tenant's).
func (m *Manager) QueueReason(ctx context.Context, id string) string {
	if _, err := m.st.GetJob(ctx, id); err != nil {
		return ""
	}
	m.mu.Lock()
	for _, q := range m.queue {
		if q.id == id {
			m.mu.Unlock()
			return q.queueWhy
		}
	}
	j := m.live[id]
	m.mu.Unlock()
	if j == nil {
		return ""
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.roomWhy
}

// waitForRoom is told by the runtime's start while the engine has no room
// for j's sandbox (why) and once it is placed (""): meanwhile j shows as
// queued with the engine's reason, and its start's own deadline is held.
func (m *Manager) waitForRoom(j *liveJob, why string, deadline *time.Timer) {
	j.mu.Lock()
	was := j.roomWhy
	j.roomWhy = why
	if why != "" && j.endStatus != "" && j.cancelStart != nil {
		// Ended just before its wait began (end saw no wait to cancel).
		j.cancelStart(fmt.Errorf("the job was ended (%s) before it waited for room", j.endReason))
	}
	if why != "" {
		j.rec.Status = record.StatusQueued
	} else if was != "" {
		j.rec.Status = record.StatusRunning
		j.rec.QueuedMS = time.Since(j.rec.CreatedAt).Milliseconds()
	}
	j.mu.Unlock()
	switch {
	case why != "" && was == "":
		deadline.Stop()
		j.roomWaitOnce.Do(func() { close(j.roomWait) })
		j.tl.Mark("room_wait")
		m.log.Info().Str("job", j.id).Str("why", why).Msg("job waits for room on the engine")
	case why == "" && was != "":
		deadline.Reset(startTimeout)
		j.tl.Mark("room_found")
		m.log.Info().Str("job", j.id).Msg("job's sandbox placed")
	}
}

func (m *Manager) removeQueued(j *liveJob) bool {
	for i, q := range m.queue {
		if q == j {
			m.queue = append(m.queue[:i], m.queue[i+1:]...)
			return true
		}
	}
	return false
}

// finish records a job's final status, releases its slot and starts the next
// queued job. Safe to call once per job.
func (m *Manager) finish(j *liveJob, st sandbox.ExitStatus) {
	j.mu.Lock()
	if j.timer != nil {
		j.timer.Stop()
	}
	if j.idle != nil {
		j.idle.Stop()
	}
	if j.term != nil {
		j.term.Close()
	}
	hadSlot := j.hasSlot
	rec := &j.rec
	now := time.Now()
	if !hadSlot { // ended while it waited: all its life was queue time
		rec.QueuedMS = now.Sub(rec.CreatedAt).Milliseconds()
	}
	// A timeout removes the sandbox, which leaves its exit code unknown or
	// SIGKILL's; any other known code means the process exited on its own
	// before the removal reached it, and that exit is the job's end.
	exitedFirst := j.endReason == record.ReasonTimeout && st.Err == nil && !st.Gone && st.ExitCode >= 0 && st.ExitCode != 128+9
	switch {
	case j.endStatus != "" && !exitedFirst:
		rec.Status, rec.Reason = j.endStatus, j.endReason
	case st.Stopped != "":
		// The runtime stopped it on its own (a workspace's disk quota).
		rec.Status, rec.Reason = record.StatusKilled, st.Stopped
		rec.Error = st.StoppedWhy
	case st.StartErr != nil:
		rec.Status, rec.Reason = record.StatusFailed, record.ReasonStartError
		rec.Error = st.StartErr.Error()
	case st.TimedOut:
		// The sandbox stopped the job at its deadline (the server may have
		// been away then).
		rec.Status, rec.Reason = record.StatusTimedOut, record.ReasonTimeout
	case st.Err != nil:
		rec.Status, rec.Reason = record.StatusFailed, record.ReasonLost
		rec.Error = "lost track of the sandbox: " + st.Err.Error()
	case st.Gone:
		rec.Status, rec.Reason = record.StatusFailed, record.ReasonLost
		rec.Error = "the job's container was removed from outside the server"
	case st.OOMKilled:
		rec.Status, rec.Reason = record.StatusFailed, record.ReasonOOMKilled
	case st.ExitCode == 0:
		rec.Status, rec.Reason = record.StatusCompleted, ""
	default:
		rec.Status, rec.Reason = record.StatusFailed, record.ReasonExitCode
		if j.req.ExitReason != nil {
			if head, _, err := j.capture.Read(output.StderrOnly, 0, ExitReasonHeadBytes); err == nil {
				if r := j.req.ExitReason(head); r != "" {
					rec.Reason = r
				}
			}
		}
	}
	// ExitCode < 0 is the runtime's "unknown" (the container was already gone).
	if j.handle != nil && st.Err == nil && !st.Gone && st.ExitCode >= 0 {
		code := st.ExitCode
		rec.ExitCode = &code
		if code > 128 && code < 160 {
			rec.Signal = signalName(code - 128)
		}
	}
	if !st.StartedAt.IsZero() && rec.StartedAt.IsZero() {
		rec.StartedAt = st.StartedAt
	}
	rec.EndedAt = now
	rec.Usage = record.Usage{CPUMS: st.Usage.CPUMS, PeakMemoryBytes: st.Usage.PeakMemoryBytes, WallMS: st.Usage.WallMS}
	if rec.Usage.WallMS == 0 && !rec.StartedAt.IsZero() && j.handle != nil {
		rec.Usage.WallMS = now.Sub(rec.StartedAt).Milliseconds()
	}
	if len(st.Files) > 0 {
		rec.Details.Returned = append(rec.Details.Returned, m.keepReturned(j.id, notKept(rec.Details.Returned, st.Files))...)
	}
	_ = j.capture.Close()
	sz := j.capture.Sizes()
	rec.StdoutBytes, rec.StderrBytes = sz.Stdout, sz.Stderr
	rec.DroppedBytes = sz.DroppedCombined
	rec.ReadCursor = j.readCursors[output.Both]
	rec.StdoutReadCursor, rec.StderrReadCursor = j.readCursors[output.StdoutOnly], j.readCursors[output.StderrOnly]
	final := *rec
	j.mu.Unlock()

	if err := m.st.UpdateJob(context.Background(), &final); err != nil {
		m.log.Error().Err(err).Str("job", j.id).Msg("store finished job")
	}
	if j.tl != nil {
		j.tl.Mark("end_recorded")
		j.tl.Note("status", final.Status)
		if final.ExitCode != nil {
			j.tl.Note("exit_code", strconv.Itoa(*final.ExitCode))
		}
		j.tl.Note("output_bytes", strconv.FormatInt(final.StdoutBytes+final.StderrBytes, 10))
	}
	if st.CleanupErr != nil {
		// The cleanup loop sweeps the container later; the job's end stands.
		m.log.Warn().Err(st.CleanupErr).Str("job", j.id).Msg("sandbox not removed")
	}
	var ran time.Duration
	if !final.StartedAt.IsZero() {
		ran = final.EndedAt.Sub(final.StartedAt)
	}
	ev := m.log.Info().Str("job", j.id).Str("status", final.Status).Str("reason", final.Reason).
		Dur("ran", ran).Int64("output_bytes", final.StdoutBytes+final.StderrBytes)
	if final.ExitCode != nil {
		ev = ev.Int("exit_code", *final.ExitCode)
	}
	ev.Msg("job ended")
	m.observer.JobEnded(final.Kind, final.Language, final.Status, final.Reason, ran)
	m.mu.Lock()
	delete(m.live, j.id)
	m.keepEnded(j, now)
	var next *liveJob
	if hadSlot {
		m.slots.give(j.owner.Name)
		if i := m.slots.next(m.queue); !m.closed && i >= 0 {
			next = m.queue[i]
			m.queue = append(m.queue[:i], m.queue[i+1:]...)
			m.slots.take(next.owner.Name)
			next.mu.Lock()
			next.hasSlot = true
			next.rec.Status = record.StatusRunning
			next.rec.QueuedMS = time.Since(next.rec.CreatedAt).Milliseconds()
			next.mu.Unlock()
		}
		for _, q := range m.queue { // the reasons of those still waiting
			q.queueWhy = m.slots.why(q.owner.Name)
		}
	}
	m.mu.Unlock()
	close(j.done)
	if next != nil {
		m.startAsync(next)
	}
}

// markSupervisor puts the supervisor's own stamps of the job on its
// timeline (the same host clock; a remote engine's may differ).
func markSupervisor(tl *observe.Timeline, st proto.Stamps) {
	for _, m := range []struct {
		name string
		at   int64
	}{{"sv_spec", st.Spec}, {"sv_exec", st.Exec}, {"sv_started", st.Started}, {"sv_first_output", st.FirstOutput},
		{"sv_exited", st.Exited}, {"sv_drained", st.Drained}, {"sv_exit", st.Exit}} {
		if m.at > 0 {
			tl.MarkAt(m.name, time.Unix(0, m.at))
		}
	}
}

func (j *liveJob) snapshot() *record.Job {
	j.mu.Lock()
	defer j.mu.Unlock()
	rec := j.rec
	if !record.Finished(rec.Status) {
		sz := j.capture.Sizes()
		rec.StdoutBytes, rec.StderrBytes, rec.DroppedBytes = sz.Stdout, sz.Stderr, sz.DroppedCombined
	}
	return &rec
}

// endedKeep is how long a finished job stays in memory for the answer of
// the call that waited for it; endedMax bounds how many do.
const (
	endedKeep = 10 * time.Second
	endedMax  = 256
)

// endedJob is a finished job kept in memory, and when it finished.
type endedJob struct {
	j  *liveJob
	at time.Time
}

// keepEnded keeps j for endedKeep, dropping those kept longer (m.mu held).
func (m *Manager) keepEnded(j *liveJob, now time.Time) {
	if m.ended == nil {
		m.ended = map[string]endedJob{}
	}
	for id, e := range m.ended {
		if now.Sub(e.at) > endedKeep || len(m.ended) >= endedMax {
			delete(m.ended, id)
		}
	}
	m.ended[j.id] = endedJob{j: j, at: now}
}

// recentlyEnded is a job this server finished within endedKeep, or nil.
func (m *Manager) recentlyEnded(id string) *liveJob {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.ended[id]; ok && time.Since(e.at) <= endedKeep {
		return e.j
	}
	return nil
}

func (m *Manager) liveJob(id string) *liveJob {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[id]
}

// checkID refuses what cannot be a job id before it reaches the store or a path.
func checkID(id string) error {
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		shown := id
		if len(shown) > 64 {
			shown = shown[:64] + "…"
		}
		return fmt.Errorf("%w: %q is not a job id (job ids are lower-case UUIDs, as run_command and list_jobs return them)", record.ErrJobNotFound, shown)
	}
	return nil
}

// steerable returns the record of a job that is not live here, or an error
// when another live server runs it: only that server can signal it or write
// to it.
func (m *Manager) steerable(ctx context.Context, id string) (*record.Job, error) {
	rec, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !record.Finished(rec.Status) && m.othersAlive(rec.ServerID) {
		return rec, fmt.Errorf("%w: job %s is run by another sandboxer server on this state directory (another MCP client's); kill it or send it input from that client — if that server exits, this one takes the job over", ErrOtherServer, id)
	}
	return rec, nil
}

// visible refuses a job another tenant owns exactly as an unknown one: the
// store decides (its lookup filters by ctx's tenant, internal/tenant). A
// live job is in the store from Submit on.
func (m *Manager) visible(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if tenant.Scope(ctx) == "" {
		return nil
	}
	// Without the caller's cancel (its tenant stays): a call cancelled
	// mid-wait still learns its job's state, and kills it (run_command).
	_, err := m.st.GetJob(context.WithoutCancel(ctx), id)
	if errors.Is(err, record.ErrJobNotFound) {
		return fmt.Errorf("%w %q: list_jobs shows the known ones", record.ErrJobNotFound, id)
	}
	return err
}

// Get returns a job's record.
func (m *Manager) Get(ctx context.Context, id string) (*record.Job, error) {
	if err := m.visible(ctx, id); err != nil {
		return nil, err
	}
	if j := m.liveJob(id); j != nil {
		return j.snapshot(), nil
	}
	rec, err := m.st.GetJob(ctx, id)
	if errors.Is(err, record.ErrJobNotFound) {
		return nil, fmt.Errorf("%w %q: list_jobs shows the known ones", record.ErrJobNotFound, id)
	}
	return rec, err
}

// LiveCounts counts this server's queued and running jobs by kind and status.
func (m *Manager) LiveCounts() map[[2]string]int {
	m.mu.Lock()
	live := make([]*liveJob, 0, len(m.live))
	for _, j := range m.live {
		live = append(live, j)
	}
	m.mu.Unlock()
	n := map[[2]string]int{}
	for _, j := range live {
		j.mu.Lock()
		n[[2]string{j.rec.Kind, j.rec.Status}]++
		j.mu.Unlock()
	}
	return n
}

// Wait waits up to d (or until ctx ends) for a job to finish, then returns its record.
func (m *Manager) Wait(ctx context.Context, id string, d time.Duration) (*record.Job, error) {
	if err := m.visible(ctx, id); err != nil {
		return nil, err
	}
	j := m.liveJob(id)
	if j == nil {
		return m.Get(ctx, id)
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-j.done:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	// Finished: its record as stored (finish stored exactly j.rec).
	return j.snapshot(), nil
}

// Kill signals a job and removes its sandbox after grace if it is still
// running. Killing a finished job is not an error: it returns its record.
func (m *Manager) Kill(ctx context.Context, id, signal string, grace time.Duration, reason string) (*record.Job, error) {
	if err := m.visible(ctx, id); err != nil {
		return nil, err
	}
	j := m.liveJob(id)
	if j == nil {
		return m.steerable(ctx, id)
	}
	j.mu.Lock()
	if j.endStatus == "" {
		j.endStatus, j.endReason = record.StatusKilled, reason
	}
	h := j.handle
	j.mu.Unlock()
	if h != nil && signal != "KILL" && grace > 0 {
		if err := h.Signal(ctx, signal); err != nil {
			m.log.Warn().Err(err).Str("job", id).Msg("signal")
		}
		t := time.NewTimer(grace)
		select {
		case <-j.done:
		case <-t.C:
		}
		t.Stop()
	}
	select {
	case <-j.done:
	default:
		m.end(j, record.StatusKilled, reason)
		// A job whose sandbox is still starting ends once the start returns
		// (start sees the kill and removes it): allow for that, too.
		limit := destroyTimeout
		if h == nil {
			limit += startTimeout
		}
		select {
		case <-j.done:
		case <-time.After(limit):
			return j.snapshot(), fmt.Errorf("job %s did not end within %s of being killed; its record shows it as it is now", id, limit)
		}
	}
	return m.Get(context.Background(), id)
}

// SendInput writes to a running job's stdin; eof closes it afterwards. It
// returns how many bytes went in: when ctx ends first (a job that does not
// read its stdin), that is fewer than len(data), with the error saying so.
// Writes to one job are serialized.
func (m *Manager) SendInput(ctx context.Context, id string, data []byte, eof bool) (int, error) {
	if err := m.visible(ctx, id); err != nil {
		return 0, err
	}
	j := m.liveJob(id)
	if j == nil {
		if _, err := m.steerable(ctx, id); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: job %s has finished", ErrNoStdin, id)
	}
	j.touch()
	j.mu.Lock()
	h, queued := j.handle, !j.hasSlot
	j.mu.Unlock()
	if queued {
		return 0, fmt.Errorf("%w: job %s is queued and has not started yet", ErrNoStdin, id)
	}
	if h == nil {
		// Its sandbox is starting: input waits for it, as a terminal would.
		select {
		case <-j.started:
		case <-j.done:
		case <-ctx.Done():
			return 0, fmt.Errorf("job %s: its sandbox was still starting when the wait ended; nothing was written", id)
		}
		j.mu.Lock()
		h = j.handle
		j.mu.Unlock()
		if h == nil {
			return 0, fmt.Errorf("%w: job %s ended before its sandbox started", ErrNoStdin, id)
		}
	}
	n := 0
	if len(data) > 0 {
		var err error
		n, err = h.WriteStdin(ctx, data)
		switch {
		case errors.Is(err, sandbox.ErrNoStdin):
			return 0, fmt.Errorf("%w: job %s was started without keep_stdin_open (or its stdin was closed by a server restart)", ErrNoStdin, id)
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			return n, fmt.Errorf("%w: job %s took only %d of %d bytes before the wait ended (it is not reading its stdin)", ErrInputStalled, id, n, len(data))
		case err != nil:
			return n, fmt.Errorf("%w: job %s: its stdin is closed (%d of %d bytes written)", ErrNoStdin, id, n, len(data))
		}
	}
	if eof {
		if err := h.CloseStdin(); err != nil {
			return n, fmt.Errorf("close stdin of job %s: %w", id, err)
		}
	}
	return n, nil
}

// List lists job records, newest first.
func (m *Manager) List(ctx context.Context, f record.ListFilter) ([]*record.Job, string, error) {
	jobs, next, err := m.st.ListJobs(ctx, f)
	if err != nil {
		return nil, "", err
	}
	for i, rec := range jobs {
		if j := m.liveJob(rec.ID); j != nil {
			jobs[i] = j.snapshot()
		}
	}
	return jobs, next, nil
}

// Prune deletes finished jobs that ended more than olderThan ago, with their output.
func (m *Manager) Prune(ctx context.Context, olderThan time.Duration, statuses []string) (removed []string, remaining int, err error) {
	ids, err := m.st.DeleteJobs(ctx, record.PruneFilter{EndedBefore: time.Now().Add(-olderThan), Status: statuses})
	if err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	for _, id := range ids {
		delete(m.ended, id) // gone from the store: gone from memory too
	}
	m.mu.Unlock()
	for _, id := range ids {
		if err := os.RemoveAll(m.jobDir(id)); err != nil {
			m.log.Warn().Err(err).Str("job", id).Msg("remove job output")
		}
	}
	n, err := m.st.CountJobs(ctx)
	return ids, n, err
}

// Shutdown kills every queued and running job (their containers go) and
// waits, bounded by ctx, for their records to be stored.
func (m *Manager) Shutdown(ctx context.Context) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.stop)
	jobs := make([]*liveJob, 0, len(m.live))
	for _, j := range m.live {
		jobs = append(jobs, j)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func(j *liveJob) {
			defer wg.Done()
			m.end(j, record.StatusKilled, record.ReasonShutdown)
		}(j)
	}
	waitCh := make(chan struct{})
	go func() { wg.Wait(); m.bg.Wait(); close(waitCh) }()
	select {
	case <-waitCh:
	case <-ctx.Done():
		m.log.Warn().Msg("shutdown: gave up waiting for jobs to end")
	}
}

var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}

func signalName(n int) string {
	if s, ok := signalNames[n]; ok {
		return s
	}
	return fmt.Sprintf("signal %d", n)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

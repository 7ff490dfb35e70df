package job

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/terminal"
)

// claimedElsewhere marks a job that another live server took over during
// this pass: its container is not ours to touch.
const claimedElsewhere = "\x00other"

// Recover reconciles the store with the engine: jobs of servers that are gone
// (crashed, killed, or this state directory's previous server) are claimed
// and adopted when their container still runs (output capture resumes,
// including what was printed while no server watched), or marked
// failed/lost; containers whose owner is gone and that no job claims are
// removed. Jobs and containers of live servers are left alone. It runs at
// start and every cleanup interval, so the jobs of a server that dies later
// are adopted too. When the engine is unreachable it returns the error.
func (m *Manager) Recover(ctx context.Context) error {
	containers, err := m.rt.List(ctx)
	if err != nil {
		return err
	}
	byJob, byID := map[string]sandbox.Container{}, map[string]sandbox.Container{}
	for _, c := range containers {
		byJob[c.JobID] = c
		byID[c.ID] = c
	}
	pending, err := m.st.JobsWithStatus(ctx, record.StatusQueued, record.StatusRunning)
	if err != nil {
		return err
	}
	owner := map[string]string{} // active job (and its container) → the server that runs it after this pass
	for _, rec := range pending {
		if m.liveJob(rec.ID) != nil {
			owner[rec.ID] = m.server
			continue
		}
		if m.othersAlive(rec.ServerID) {
			owner[rec.ID] = rec.ServerID
			continue
		}
		won, err := m.st.ClaimJob(ctx, rec.ID, rec.ServerID, m.server)
		if err != nil {
			return err
		}
		if !won {
			owner[rec.ID] = claimedElsewhere
			continue
		}
		rec.ServerID = m.server
		// The container recorded with the job is the one it runs in (a pooled
		// container's labels were written before the job existed).
		c, ok := byID[rec.ContainerID]
		if !ok {
			c, ok = byJob[rec.ID]
		}
		if _, inWorkspace := sandbox.WorkspaceJob(rec.ContainerID); !ok && inWorkspace {
			// A job in a workspace's container is not listed: its
			// workspace's supervisor says whether it still runs.
			c, ok = sandbox.Container{ID: rec.ContainerID, JobID: rec.ID, Running: true}, true
		}
		if rec.Status == record.StatusRunning && ok {
			if err := m.adopt(ctx, rec, c); err == nil {
				owner[rec.ID] = m.server
				continue
			} else {
				m.log.Warn().Err(err).Str("job", rec.ID).Msg("could not adopt job's container")
				rec.Error = "its server stopped and the job could not be resumed: " + err.Error()
			}
		} else if rec.Status == record.StatusQueued {
			rec.Error = "its server stopped before the job started"
		} else {
			rec.Error = "its server stopped and the job's container was gone"
		}
		rec.Status, rec.Reason, rec.EndedAt = record.StatusFailed, record.ReasonLost, time.Now()
		if err := m.st.UpdateJob(ctx, rec); err != nil {
			return err
		}
	}
	// A pooled container was labelled before its job existed: it is known
	// by the id stored with the job.
	for _, rec := range pending {
		if o, ok := owner[rec.ID]; ok && rec.ContainerID != "" {
			owner[rec.ContainerID] = o
		}
	}
	m.removeOrphans(ctx, containers, owner)
	m.forgetPeers(owner, containers)
	m.mu.Lock()
	m.recovered = true
	m.mu.Unlock()
	return nil
}

// removeOrphans removes the sandboxes that belong to no job a live server
// runs: this server's own that it no longer tracks (an end missed while the
// engine was down), and those of servers that are gone — jobs, probes and
// pooled containers alike — unless their job was adopted. This server's own
// probes and pooled containers are managed by their owners, not swept.
func (m *Manager) removeOrphans(ctx context.Context, containers []sandbox.Container, owner map[string]string) {
	for _, c := range containers {
		if m.liveJob(c.JobID) != nil || m.liveContainer(c.ID) {
			continue
		}
		o, active := owner[c.ID]
		if !active {
			o, active = owner[c.JobID]
		}
		if !active {
			o = c.Server
		}
		if o == claimedElsewhere || m.othersAlive(o) {
			continue
		}
		if o == m.server && c.Kind != KindCommand && c.Kind != KindScript && c.Kind != KindSession {
			// A probe or a warm sandbox of this server: its owner manages it,
			// also while it is only created, not yet started (a sweep then
			// would pull it from under the job that takes it). What a failed
			// removal leaves, the final sweep at exit (SweepOwn) takes.
			continue
		}
		m.log.Info().Str("container", shortID(c.ID)).Str("job", c.JobID).Str("kind", c.Kind).Msg("removing orphaned sandbox")
		if err := m.rt.Remove(ctx, c.ID); err != nil {
			m.log.Warn().Err(err).Str("container", c.ID).Msg("remove orphan")
		}
	}
}

// liveContainer says whether a live job runs in the container with this id.
func (m *Manager) liveContainer(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range m.live {
		j.mu.Lock()
		h := j.handle
		j.mu.Unlock()
		if h != nil && h.ContainerID() == id {
			return true
		}
	}
	return false
}

func (m *Manager) adopt(ctx context.Context, rec *record.Job, c sandbox.Container) error {
	capture, err := m.openCapture(rec.ID)
	if err != nil {
		return err
	}
	if err := capture.TrimTornWrite(); err != nil {
		capture.Close()
		return err
	}
	sz := capture.Sizes()
	j := &liveJob{id: rec.ID, capture: capture, done: make(chan struct{}), started: make(chan struct{}), rec: *rec, hasSlot: true,
		owner: tenant.Tenant{Name: rec.Tenant}}
	close(j.started)
	j.req = Request{Kind: rec.Kind, Command: rec.Command, Language: rec.Language, Image: rec.Image,
		Workspace: rec.Workspace, Cwd: rec.Cwd, Limits: policy.Resolved{Timeout: time.Duration(rec.Limits.TimeoutMS) * time.Millisecond}}
	j.readCursors = readCursorsOf(rec)
	if s := rec.Details.Session; rec.Kind == KindSession && s != nil && s.Mode == ModePTY {
		// The screen so far, from what was captured before the restart.
		j.term = terminal.New(s.Rows, s.Cols)
		if data, _, err := capture.Read(output.Both, max(0, sz.Combined-maxReplayBytes), maxReplayBytes); err == nil {
			_, _ = j.term.Write(data)
		}
	}
	h, err := m.rt.Adopt(ctx, c.ID, sz.Stdout, sz.Stderr, m.liveOutput(j))
	if err != nil {
		capture.Close()
		if errors.Is(err, sandbox.ErrNotFound) {
			return errors.New("container gone")
		}
		return err
	}
	j.handle = h
	j.rec.ContainerID = c.ID
	// Stdin survives a restart only where something held it meanwhile (a
	// workspace's daemon); elsewhere the engine closed it with our attach.
	j.rec.StdinOpen = rec.StdinOpen && h.KeepsStdin()
	if j.rec.StartedAt.IsZero() {
		// Crashed between the sandbox's start and storing it: the timeout counts from now.
		j.rec.StartedAt = time.Now()
	}
	remaining := time.Until(j.rec.StartedAt.Add(j.req.Limits.Timeout))
	if remaining < 0 {
		remaining = 0
	}
	m.mu.Lock()
	m.live[rec.ID] = j
	m.slots.take(j.owner.Name)
	m.mu.Unlock()
	j.mu.Lock()
	j.timer = time.AfterFunc(remaining, func() { m.end(j, record.StatusTimedOut, record.ReasonTimeout) })
	// An adopted session's idle timeout counts from now.
	m.startIdle(j)
	j.mu.Unlock()
	m.log.Info().Str("job", rec.ID).Dur("timeout_left", remaining).Msg("adopted running job")
	m.watch(j, h)
	return nil
}

// RunCleanup prunes finished jobs past the policy's retention and retries
// restart recovery until it has succeeded, every cleanup interval, until Shutdown.
func (m *Manager) RunCleanup() {
	interval := time.Duration(m.pol.Jobs.CleanupIntervalS) * time.Second
	retention := time.Duration(m.pol.Jobs.RetentionS) * time.Second
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		m.mu.Lock()
		recovered := m.recovered
		m.mu.Unlock()
		// Also adopts the jobs of servers that died since, and sweeps what
		// they (or this server, while the engine was down) left behind.
		if err := m.Recover(ctx); err != nil {
			if recovered {
				m.log.Warn().Err(err).Msg("recovery pass")
			} else {
				m.log.Debug().Err(err).Msg("restart recovery still waiting for the engine")
			}
		}
		if ids, _, err := m.Prune(ctx, retention, nil); err != nil {
			m.log.Warn().Err(err).Msg("prune")
		} else if len(ids) > 0 {
			m.log.Info().Int("removed", len(ids)).Msg("pruned finished jobs past retention")
		}
		m.cleanTasks(ctx)
		cancel()
	}
}

// forgetPeers removes the traces of gone servers that nothing refers to any
// more: no active job and no container of theirs is left.
func (m *Manager) forgetPeers(owner map[string]string, containers []sandbox.Container) {
	if m.peers == nil {
		return
	}
	used := map[string]bool{}
	for _, o := range owner {
		used[o] = true
	}
	for _, c := range containers {
		used[c.Server] = true
	}
	for _, id := range m.peers.Stale() {
		if !used[id] {
			m.peers.Forget(id)
		}
	}
}

// SweepOwn removes every sandbox this server made that runs no live job: at
// exit, after Shutdown, it catches what a failed removal left (the engine
// was down when a job or a warm sandbox ended), so a server leaves nothing
// behind. Bounded by ctx.
func (m *Manager) SweepOwn(ctx context.Context) {
	containers, err := m.rt.List(ctx)
	if err != nil {
		m.log.Warn().Err(err).Msg("final sweep: cannot list sandboxes")
		return
	}
	for _, c := range containers {
		if c.Server != m.server || m.liveJob(c.JobID) != nil || m.liveContainer(c.ID) {
			continue
		}
		if err := m.rt.Remove(ctx, c.ID); err != nil {
			m.log.Warn().Err(err).Str("container", shortID(c.ID)).Msg("final sweep: remove")
		}
	}
}

// AdoptCopies adopts, as jobs of workspace to (its container toCID), the
// copies of the running jobs of ctx's tenant's workspace from (container
// fromCID) that a fork with processes put there: each gets an id and a
// record of its own, its output so far replayed by the copy's daemon, its
// input kept. A job the copy lacks (started after the checkpoint) is left
// out: its record says so, failed.
func (m *Manager) AdoptCopies(ctx context.Context, from, fromCID, to, toCID string) ([]record.CopiedJob, error) {
	running, _, err := m.List(ctx, record.ListFilter{Status: []string{record.StatusRunning}, Workspace: from, Limit: record.MaxListLimit})
	if err != nil {
		return nil, err
	}
	var copied []record.CopiedJob
	for _, src := range running {
		cid, key, ok := strings.Cut(src.ContainerID, "/")
		if !ok || cid != fromCID {
			continue
		}
		now := time.Now()
		rec := &record.Job{
			ID: uuid.NewString(), ServerID: m.server, Kind: src.Kind, Status: record.StatusRunning, Command: src.Command,
			Language: src.Language, Image: src.Image, Workspace: to, Cwd: src.Cwd, Env: src.Env, StdinOpen: src.StdinOpen,
			Limits: src.Limits, ContainerID: toCID + "/" + key, CreatedAt: now, StartedAt: now,
			Details: record.Details{Session: src.Details.Session, Script: src.Details.Script},
		}
		if err := m.st.CreateJob(ctx, rec); err != nil {
			return copied, err
		}
		if err := m.adopt(ctx, rec, sandbox.Container{ID: rec.ContainerID, JobID: rec.ID, Running: true}); err != nil {
			m.log.Info().Err(err).Str("job", src.ID).Str("workspace", to).Msg("a fork's copy lacks the job")
			rec.Status, rec.Reason, rec.EndedAt = record.StatusFailed, record.ReasonLost, time.Now()
			rec.Error = "the fork's copy did not have this job's process (it started after the checkpoint): " + err.Error()
			if err := m.st.UpdateJob(ctx, rec); err != nil {
				return copied, err
			}
			continue
		}
		copied = append(copied, record.CopiedJob{Workspace: to, JobID: rec.ID, From: src.ID})
	}
	return copied, nil
}

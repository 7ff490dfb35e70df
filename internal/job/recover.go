package job

import (
	"context"
	"errors"
	"time"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Recover reconciles the store with the engine after a (re)start: running jobs
// whose container still exists are adopted (output capture resumes, including
// what was printed while the server was down); the rest are marked
// failed/lost; labelled containers that belong to no running job are removed.
// When the engine is unreachable it returns the error and the cleanup loop
// tries again later.
func (m *Manager) Recover(ctx context.Context) error {
	containers, err := m.rt.List(ctx)
	if err != nil {
		return err
	}
	byJob := map[string]sandbox.Container{}
	for _, c := range containers {
		byJob[c.JobID] = c
	}
	pending, err := m.st.JobsWithStatus(ctx, StatusQueued, StatusRunning)
	if err != nil {
		return err
	}
	for _, rec := range pending {
		if m.liveJob(rec.ID) != nil {
			continue // started by this process
		}
		c, ok := byJob[rec.ID]
		if rec.Status == StatusRunning && ok {
			if err := m.adopt(ctx, rec, c); err == nil {
				continue
			} else {
				m.log.Warn().Err(err).Str("job", rec.ID).Msg("could not adopt job's container")
				rec.Error = "server restarted and could not resume the job: " + err.Error()
			}
		} else if rec.Status == StatusQueued {
			rec.Error = "server restarted before the job started"
		} else {
			rec.Error = "server restarted and the job's container was gone"
		}
		rec.Status, rec.Reason, rec.EndedAt = StatusFailed, ReasonLost, time.Now()
		if err := m.st.UpdateJob(ctx, rec); err != nil {
			return err
		}
	}
	// Adopted jobs are live now: every other sandbox of this instance is an orphan.
	m.removeOrphans(ctx, containers)
	m.mu.Lock()
	m.recovered = true
	m.mu.Unlock()
	return nil
}

func (m *Manager) adopt(ctx context.Context, rec *Job, c sandbox.Container) error {
	capture, err := m.openCapture(rec.ID)
	if err != nil {
		return err
	}
	sz := capture.Sizes()
	j := &liveJob{id: rec.ID, capture: capture, done: make(chan struct{}), started: make(chan struct{}), rec: *rec, hasSlot: true}
	close(j.started)
	j.req = Request{Kind: rec.Kind, Command: rec.Command, Language: rec.Language, Image: rec.Image,
		Workspace: rec.Workspace, Cwd: rec.Cwd, Limits: policy.Resolved{Timeout: time.Duration(rec.Limits.TimeoutMS) * time.Millisecond}}
	j.readCursors = readCursorsOf(rec)
	// Stdin does not survive a restart: the engine closed it when our attach dropped.
	j.rec.StdinOpen = false
	h, err := m.rt.Adopt(ctx, c.ID, sz.Stdout, sz.Stderr, capture)
	if err != nil {
		capture.Close()
		if errors.Is(err, sandbox.ErrNotFound) {
			return errors.New("container gone")
		}
		return err
	}
	j.handle = h
	j.rec.ContainerID = c.ID
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
	m.running++
	m.mu.Unlock()
	j.mu.Lock()
	j.timer = time.AfterFunc(remaining, func() { m.end(j, StatusTimedOut, ReasonTimeout) })
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
		if !recovered {
			if err := m.Recover(ctx); err != nil {
				m.log.Debug().Err(err).Msg("restart recovery still waiting for the engine")
			}
		} else if containers, err := m.rt.List(ctx); err == nil {
			// Containers whose end the server missed while the engine was down.
			m.removeOrphans(ctx, containers)
		}
		if ids, _, err := m.Prune(ctx, retention, nil); err != nil {
			m.log.Warn().Err(err).Msg("prune")
		} else if len(ids) > 0 {
			m.log.Info().Int("removed", len(ids)).Msg("pruned finished jobs past retention")
		}
		cancel()
	}
}

// removeOrphans removes those of this instance's sandboxes that belong to no
// live job (probes excepted: they are not jobs).
func (m *Manager) removeOrphans(ctx context.Context, containers []sandbox.Container) {
	for _, c := range containers {
		if c.Kind == KindProbe || m.liveJob(c.JobID) != nil {
			continue
		}
		m.log.Info().Str("container", shortID(c.ID)).Str("job", c.JobID).Msg("removing orphaned sandbox")
		if err := m.rt.Remove(ctx, c.ID); err != nil {
			m.log.Warn().Err(err).Str("container", c.ID).Msg("remove orphan")
		}
	}
}

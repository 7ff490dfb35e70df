package workspace

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/record"
)

// Hibernation: a workspace idle for workspaces.hibernate_after_s is
// checkpointed (its processes, memory and open files written to an image
// under CheckpointDir, by tenant, 0600) and its container stopped; the
// next call restores it and its held jobs go on. Where its runtime cannot
// be checkpointed, it is stopped as idle_stop_s would, and the log says
// why. A restore that fails starts the workspace afresh with its files,
// and the next job's output says its processes were lost.

// imageDir is where workspace w's image is kept: under its tenant's
// directory, named by the workspace's id (never reused).
func (m *Manager) imageDir(w *record.Workspace) string {
	return filepath.Join(m.CheckpointDir, tenantDir(w.Tenant), w.ID)
}

// tenantDir is a tenant's directory name: its name where that is a plain
// file name, else a hash of it.
func tenantDir(tenant string) string {
	if tenant != "" && tenantPattern.MatchString(tenant) && tenant != "." && tenant != ".." {
		return tenant
	}
	sum := sha256.Sum256([]byte(tenant))
	return "t-" + hex.EncodeToString(sum[:8])
}

// hibernateRefusal says why workspace w cannot be hibernated here ("" when
// it can).
func (m *Manager) hibernateRefusal(ctx context.Context, w *record.Workspace) string {
	switch {
	case m.cp == nil:
		return "the engine cannot checkpoint a workspace"
	case m.CheckpointDir == "":
		return "the server keeps no checkpoint images"
	}
	return m.cp.CheckpointRefusal(ctx, cmp.Or(w.Details.Runtime, m.pol.Runtime))
}

// hibernateIdle checkpoints workspace id when it is still idle for after,
// re-checking under its lock; where it cannot be, it is stopped instead.
func (m *Manager) hibernateIdle(ctx context.Context, id string, after time.Duration) {
	s := m.ws(id)
	s.lock.Lock()
	w, err := m.st.GetWorkspaceByID(ctx, id)
	if err != nil || (w.State != StateRunning && w.State != StatePaused) || !m.idleFor(s, w, after) {
		s.lock.Unlock()
		return
	}
	why := m.hibernateRefusal(ctx, w)
	if why == "" {
		why = m.hibernateLocked(ctx, w)
	}
	s.lock.Unlock()
	if why == "" {
		return
	}
	m.mu.Lock()
	busy := s.busy
	s.unhibernated = time.Now()
	m.mu.Unlock()
	if busy > 0 {
		m.log.Info().Str("workspace", w.Name).Str("why", why).Msg("idle workspace not hibernated: its sessions keep it running")
		return
	}
	m.log.Info().Str("workspace", w.Name).Str("why", why).Msg("idle workspace stopped instead of hibernated: its processes end")
	m.stopIdle(ctx, id, after)
}

// mayHibernate says whether a hibernation of s may be tried: not within
// after of one that did not happen (no log line and no engine call every
// poll for a workspace that cannot be hibernated and is kept running).
func (m *Manager) mayHibernate(s *wsState, after time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Since(s.unhibernated) >= after
}

// hibernateLocked checkpoints w (its lock held): "" when done, else why
// not. An image that would take w past its disk quota, with its files, is
// not kept.
func (m *Manager) hibernateLocked(ctx context.Context, w *record.Workspace) string {
	quota := cmp.Or(w.Limits.DiskBytes, m.pol.Workspaces.DiskMB<<20)
	used, err := m.diskUsage(ctx, w.ContainerID)
	if err != nil {
		return fmt.Sprintf("measure its files: %v", err)
	}
	dir := m.imageDir(w)
	start := time.Now()
	if err := m.cp.CheckpointWorkspace(ctx, w.ContainerID, dir, false); err != nil {
		return fmt.Sprintf("checkpoint: %v", err)
	}
	size, err := dirSize(dir)
	if err == nil && used+size > quota {
		err = fmt.Errorf("its files (%d MiB) and its image (%d MiB) would pass its disk quota of %d MiB (policy workspaces.disk_mb)", used>>20, size>>20, quota>>20)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		// The checkpoint stopped it: started afresh, its jobs end.
		if serr := m.rt.StartWorkspace(ctx, w.ContainerID); serr != nil {
			m.log.Warn().Err(serr).Str("workspace", w.Name).Msg("start a workspace whose image was not kept")
		}
		return err.Error()
	}
	w.State = StateHibernated
	w.Details.LostProcesses = ""
	if err := m.st.UpdateWorkspace(ctx, w); err != nil {
		m.log.Warn().Err(err).Str("workspace", w.Name).Msg("record hibernated workspace")
	}
	s := m.ws(w.ID)
	m.mu.Lock()
	s.asleep = true
	m.mu.Unlock()
	m.log.Info().Str("workspace", w.Name).Int64("image_bytes", size).Dur("took", time.Since(start)).Msg("idle workspace hibernated")
	return ""
}

// restoreLocked restores hibernated workspace w (its lock held). A restore
// that fails starts it afresh with its files: that is not an error of the
// call, which the next job's output tells.
func (m *Manager) restoreLocked(ctx context.Context, w *record.Workspace) error {
	observe.MarkCtx(ctx, "ws_restore")
	defer observe.MarkCtx(ctx, "ws_restored")
	dir := m.imageDir(w)
	start := time.Now()
	err := errors.New("the engine cannot restore a checkpoint")
	if m.cp != nil {
		err = m.cp.RestoreWorkspace(ctx, w.ContainerID, dir)
	}
	_ = os.RemoveAll(dir) // a copy of its memory: kept no longer than needed
	s := m.ws(w.ID)
	if err != nil {
		lost := fmt.Sprintf("workspace %q was hibernated and could not be restored (%v): it started afresh with its files, and the processes it had are gone", w.Name, err)
		m.log.Warn().Err(err).Str("workspace", w.Name).Msg("restore hibernated workspace: started afresh")
		if serr := m.rt.StartWorkspace(ctx, w.ContainerID); serr != nil {
			return fmt.Errorf("start workspace %q: %w", w.Name, serr)
		}
		w.Details.LostProcesses = lost
		m.mu.Lock()
		s.lost = lost
		m.mu.Unlock()
	} else {
		m.log.Info().Str("workspace", w.Name).Dur("took", time.Since(start)).Msg("workspace restored")
	}
	w.State = StateRunning
	w.LastUsedAt = time.Now()
	if err := m.st.UpdateWorkspace(ctx, w); err != nil {
		return err
	}
	m.mu.Lock()
	s.asleep = false
	m.mu.Unlock()
	return nil
}

// takeLost is, once, why workspace id's processes were lost at its last
// restore ("" if they were not).
func (m *Manager) takeLost(id string) string {
	s := m.ws(id)
	m.mu.Lock()
	defer m.mu.Unlock()
	lost := s.lost
	s.lost = ""
	return lost
}

// dirSize is the bytes of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}

// HibernateNow hibernates a workspace if nothing but idle sessions holds
// it (tests and operators; the idle loop does the same after
// hibernate_after_s).
func (m *Manager) HibernateNow(ctx context.Context, name string) error {
	w, err := m.Get(ctx, name)
	if err != nil {
		return err
	}
	if why := m.hibernateRefusal(ctx, w); why != "" {
		return fmt.Errorf("hibernate workspace %q: %s", name, why)
	}
	m.hibernateIdle(ctx, w.ID, 0)
	return nil
}

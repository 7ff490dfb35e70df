package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/record"
)

// MaxCopies is the most workspaces one fork makes (create_workspace's
// count).
const MaxCopies = 8

// copyParallel is how many copies of a fork are made at once.
const copyParallel = 4

// Forks with processes: the source is checkpointed once, left running (it
// stops only for the checkpoint's own time), and the image restored into
// each copy after its files are copied. Each copy is its own container:
// its own name, hostname, ports and egress grant. What memory holds is
// copied as it is, a userspace random generator's state included
// (docs/workspaces.md). Where the source's runtime cannot be checkpointed,
// the copies get its files only, and Origin.ProcessesNote says why.

// CopyNames are the names count copies of a fork named name get: name
// itself for one, NAME-1 … NAME-count for more.
func CopyNames(name string, count int) []string {
	if count <= 1 {
		return []string{name}
	}
	names := make([]string, count)
	for i := range names {
		names[i] = name + "-" + strconv.Itoa(i+1)
	}
	return names
}

// Copies makes count workspaces from req.From (named by CopyNames), with
// the source's processes and memory when req.WithProcesses. A failure
// removes the copies made before it.
func (m *Manager) Copies(ctx context.Context, req CreateRequest, count int) ([]*record.Workspace, *Origin, error) {
	if req.From == "" {
		return nil, nil, fmt.Errorf("count: copies are of a workspace: give from")
	}
	if count < 1 || count > MaxCopies {
		return nil, nil, fmt.Errorf("count: must be 1 to %d, got %d", MaxCopies, count)
	}
	names := CopyNames(req.Name, count)
	for _, name := range names {
		if err := CheckName(name); err != nil {
			return nil, nil, err
		}
	}
	start := time.Now()
	image, note, done := "", "", func() {}
	if req.WithProcesses {
		image, note, done = m.checkpointSource(ctx, req.From)
		defer done()
	}
	// The copies are made side by side, at most copyParallel at once.
	made := make([]*record.Workspace, len(names))
	origins := make([]*Origin, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, copyParallel)
	var wg sync.WaitGroup
	for i, name := range names {
		one := req
		one.Name, one.restoreFrom = name, image
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			made[i], origins[i], errs[i] = m.Create(ctx, one)
		}()
	}
	wg.Wait()
	if image != "" {
		observe.MarkCtx(ctx, "fork_copied")
	}
	if err := errors.Join(errs...); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer cancel()
		for _, w := range made {
			if w != nil {
				_ = m.delete(cctx, w)
			}
		}
		return nil, nil, errs[slices.IndexFunc(errs, func(e error) bool { return e != nil })]
	}
	origin := origins[0]
	m.log.Info().Str("from", req.From).Int("copies", count).Bool("processes", image != "").Dur("took", time.Since(start)).Msg("workspace forked")
	if origin != nil && req.WithProcesses {
		origin.Processes, origin.ProcessesNote = image != "", note
	}
	return made, origin, nil
}

// checkpointSource writes an image of workspace name's processes, leaving
// it running: the image's directory, or "" and why not; done removes it.
func (m *Manager) checkpointSource(ctx context.Context, name string) (image, note string, done func()) {
	done = func() {}
	src, err := m.Get(ctx, name)
	if err != nil {
		return "", err.Error(), done
	}
	if why := m.hibernateRefusal(ctx, src); why != "" {
		return "", "files only: " + why, done
	}
	src, release, err := m.Acquire(ctx, name) // running, and kept so
	if err != nil {
		return "", "files only: " + err.Error(), done
	}
	dir := filepath.Join(m.CheckpointDir, tenantDir(src.Tenant), "fork-"+uuid.NewString())
	s := m.ws(src.ID)
	s.lock.Lock()
	start := time.Now()
	observe.MarkCtx(ctx, "fork_checkpoint")
	err = m.cp.CheckpointWorkspace(ctx, src.ContainerID, dir, true)
	observe.MarkCtx(ctx, "fork_checkpointed")
	s.lock.Unlock()
	release()
	if err != nil {
		return "", "files only: checkpoint: " + err.Error(), done
	}
	m.log.Info().Str("workspace", src.Name).Dur("took", time.Since(start)).Msg("workspace checkpointed for a fork")
	return dir, "", func() { _ = os.RemoveAll(dir) }
}

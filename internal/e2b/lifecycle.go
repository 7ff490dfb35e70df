package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/template"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// Templates are the templates a tenant sees (internal/template): its
// snapshots among them, which it may remove.
type Templates interface {
	List(ctx context.Context) []template.Info
	RemoveSnapshot(ctx context.Context, name string) error
}

// metrics answers one sample of a running sandbox's use (E2B keeps a
// series; sandboxer measures when asked): none for a paused one, which is
// not woken to be measured.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	if s.workspaces == nil {
		apiError(w, http.StatusNotImplemented, "metrics: this server has no workspaces")
		return
	}
	m, err := s.workspaces.Metrics(r.Context(), sb.ID)
	switch {
	case errors.Is(err, workspace.ErrNotRunning):
		writeJSON(w, http.StatusOK, []any{})
		return
	case err != nil:
		apiError(w, http.StatusInternalServerError, "metrics of %s: %v", sb.ID, err)
		return
	}
	writeJSON(w, http.StatusOK, []map[string]any{{
		"timestamp": m.At.Format(time.RFC3339Nano), "timestampUnix": m.At.Unix(),
		"cpuCount": max(1, int(m.CPUs+0.999)), "cpuUsedPct": m.CPUUsedPct,
		"memUsed": m.MemUsed, "memTotal": m.MemTotal, "memCache": m.MemCache,
		"diskUsed": m.DiskUsed, "diskTotal": m.DiskTotal,
	}})
}

// snapshot makes a template of a sandbox (snapshot_workspace): its packages
// and files, which a sandbox created with the snapshot's id starts with.
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	if !s.call.HasTool("snapshot_workspace") {
		apiError(w, http.StatusNotImplemented, "snapshots need the templates toolset: the operator serves it with --toolsets all (or a list with templates)")
		return
	}
	var req struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		apiError(w, http.StatusBadRequest, "the body is not a snapshot to make: %v", err)
		return
	}
	name := req.Name
	if name == "" {
		name = "snap-" + randomHex(6)
	}
	if !policy.TemplateNamePattern.MatchString(name) {
		apiError(w, http.StatusBadRequest, "name %q: a snapshot's name is a template name here (%s)", truncate(name, 64), policy.TemplateNamePattern)
		return
	}
	if _, err := s.tool(r.Context(), "snapshot_workspace", map[string]any{"workspace": sb.ID, "template": name}); err != nil {
		apiError(w, http.StatusBadRequest, "snapshot of %s: %v", sb.ID, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"snapshotID": name, "names": []string{name}})
}

// listSnapshots lists the tenant's snapshots by name, of one sandbox when
// sandboxID names it, a page at a time.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := pageLimit(w, q)
	if !ok {
		return
	}
	out := []map[string]any{}
	if s.templates == nil {
		writeJSON(w, http.StatusOK, out)
		return
	}
	owner := tenant.Owner(r.Context()) // an admin's key too lists its own, as with sandboxes
	infos := s.templates.List(r.Context())
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	for _, t := range infos {
		if t.Source != record.TemplateSnapshot || t.Tenant != owner || t.Name <= q.Get("nextToken") ||
			(q.Get("sandboxID") != "" && t.Workspace != q.Get("sandboxID")) || (q.Get("name") != "" && t.Name != q.Get("name")) {
			continue
		}
		if len(out) == limit {
			w.Header().Set("X-Next-Token", out[len(out)-1]["snapshotID"].(string))
			break
		}
		out = append(out, map[string]any{"snapshotID": t.Name, "names": []string{t.Name}})
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteSnapshot removes one of the tenant's snapshots (never the
// policy's templates), as the operator's templates rm does: no tool does.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if s.templates == nil {
		apiError(w, http.StatusNotImplemented, "snapshots: this server builds no templates")
		return
	}
	id := r.PathValue("id")
	if err := s.templates.RemoveSnapshot(r.Context(), id); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, record.ErrTemplateNotFound) {
			status = http.StatusNotFound
		}
		apiError(w, status, "snapshot %q: %v", truncate(id, 64), err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fork makes count new sandboxes of a sandbox with its files, processes
// and memory (create_workspace from it, with_processes): where its runtime
// cannot carry processes (runc), a sandbox with none running forks with its
// files, and one with processes running is refused rather than forked
// without them.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	sb := s.ownedOr404(w, r)
	if sb == nil {
		return
	}
	var req struct {
		Timeout *int `json:"timeout"`
		Count   *int `json:"count"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		apiError(w, http.StatusBadRequest, "the body is not a fork: %v", err)
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > workspace.MaxCopies {
		apiError(w, http.StatusBadRequest, "count %d: must be 1 to %d", count, workspace.MaxCopies)
		return
	}
	timeout, problem := timeoutOf(req.Timeout, defaultTimeout)
	if problem != "" {
		apiError(w, http.StatusBadRequest, "%s", problem)
		return
	}
	running := s.runningProcs(r.Context(), sb)
	base := newID()
	args := map[string]any{"name": base, "from": sb.ID, "with_processes": true}
	if count > 1 {
		args["count"] = count
	}
	out, err := s.tool(r.Context(), "create_workspace", args)
	if err != nil {
		apiError(w, http.StatusConflict, "fork of %s: %v", sb.ID, err)
		return
	}
	names := workspace.CopyNames(base, count)
	origin, _ := out["origin"].(map[string]any)
	if carried, _ := origin["processes"].(bool); !carried && len(running) > 0 {
		for _, name := range names {
			_, _ = s.tool(r.Context(), "delete_workspace", map[string]any{"name": name})
		}
		note, _ := origin["processes_note"].(string)
		apiError(w, http.StatusConflict, "fork of %s: its processes %v would not be carried (%s): kill them first to fork its files, or run it on runsc", sb.ID, running, note)
		return
	}
	adopted := map[string]map[string]string{} // copy → source job → its job there
	if jobs, ok := origin["jobs"].([]any); ok {
		for _, j := range jobs {
			if m, ok := j.(map[string]any); ok {
				ws, _ := m["workspace"].(string)
				from, _ := m["from"].(string)
				to, _ := m["job_id"].(string)
				if adopted[ws] == nil {
					adopted[ws] = map[string]string{}
				}
				adopted[ws][from] = to
			}
		}
	}
	now := time.Now()
	results := make([]map[string]any, 0, len(names))
	for _, name := range names {
		c, err := s.register(r.Context(), &record.E2BSandbox{ID: name, Template: sb.Template, Token: randomHex(16),
			Envs: sb.Envs, Metadata: sb.Metadata, StartedAt: now, EndAt: now.Add(timeout)})
		if err != nil {
			results = append(results, map[string]any{"error": map[string]any{"code": http.StatusInternalServerError, "message": err.Error()}})
			continue
		}
		c.adopt(sb, adopted[name])
		results = append(results, map[string]any{"sandbox": connection(c)})
	}
	writeJSON(w, http.StatusCreated, results)
}

// runningProcs are the pids of a sandbox's processes still running.
func (s *Server) runningProcs(ctx context.Context, sb *sandbox) []uint32 {
	return slices.Sorted(maps.Keys(s.running(ctx, sb)))
}

// adopt gives a fork the source's processes that were carried into it
// (jobs: the source's job → the copy's), under the same pids.
func (c *sandbox) adopt(src *sandbox, jobs map[string]string) {
	if len(jobs) == 0 {
		return
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid, p := range src.procs {
		if to, ok := jobs[p.job]; ok {
			cp := *p
			cp.job = to
			c.procs[pid] = &cp
		}
	}
	c.next = max(c.next, src.next)
}

// Package workspace keeps named, persistent sandboxes: a long-lived container
// plus a volume at /workspace, recorded in the store so they survive server
// restarts. Jobs run in a workspace through Runtime, a sandbox.Runtime in
// front of the job runtime: a spec naming a workspace runs as an exec of the
// supervisor in that workspace's container (started first if it was stopped);
// any other spec goes to the runtime behind it. A workspace without a job for
// the policy's idle_stop_s is stopped (not deleted); its disk quota is
// enforced by polling while jobs run.
package workspace

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/baseline"
	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/secret"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// States of a workspace's record.
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StateStopped  = "stopped"
	// StatePaused is a workspace frozen after workspaces.pause_after_s
	// with nothing running: its processes and memory are kept, and the
	// next call that touches it thaws it first.
	StatePaused = "paused"
	// StateHibernated is a workspace checkpointed after
	// workspaces.hibernate_after_s: its processes and memory are in an
	// image under the state directory, its container stopped; the next
	// call restores it.
	StateHibernated = "hibernated"
)

// ReasonDiskQuota is why a job was stopped when its workspace filled past its quota.
const ReasonDiskQuota = "disk_quota"

// NamePattern is the grammar of a workspace name.
var NamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// Errors callers act on.
var (
	ErrDisabled = errors.New("workspaces are disabled by the policy (workspaces.enabled: false)")
	ErrTooMany  = errors.New("too many workspaces")
)

// pollInterval is how often busy workspaces are checked (quota, last use)
// and idle ones considered for stopping.
const pollInterval = 2 * time.Second

// opTimeout bounds one engine call made in the background.
const opTimeout = 30 * time.Second

// CacheEnv puts the toolchains' caches and user installs of a workspace on
// its volume, not on the /tmp tmpfs: they survive idle stops and restarts, a
// second build is incremental, and no other workspace or fresh job reads them.
var CacheEnv = []string{
	"GOCACHE=/workspace/.cache/go-build",
	// A plain cache on the volume, the image's standard-library seed linked
	// into it by the daemon: no GOCACHEPROG round trip per action.
	"GOCACHEPROG=",
	"SANDBOXER_GOCACHE_LINK_SEEDS=1",
	"GOMODCACHE=/workspace/.cache/go-mod",
	"GOPATH=/workspace/.cache/go",
	"npm_config_cache=/workspace/.cache/npm",
	"PIP_CACHE_DIR=/workspace/.cache/pip",
	"PYTHONUSERBASE=/workspace/.local",
	"CARGO_HOME=/workspace/.cargo",
	// Where apt unpacks packages on a runtime without root execs (AptUnpackDir).
	"SANDBOXER_APT_DIR=" + AptUnpackDir,
}

// Manager creates, lists, deletes, starts and stops workspaces.
type Manager struct {
	Options
	rt     sandbox.WorkspaceRuntime
	tunnel sandbox.TunnelInstaller       // nil: installers have a network of their own
	frozen sandbox.WorkspaceFreezer      // nil: the engine cannot freeze (no pause)
	cp     sandbox.WorkspaceCheckpointer // nil: the engine cannot checkpoint (no hibernation)
	st     *store.Store
	pol    *policy.Policy
	server string
	log    zerolog.Logger

	mu    sync.Mutex
	state map[string]*wsState          // by workspace ID
	ports map[string]map[int]*exposure // open ports by workspace ID
	stop  chan struct{}
	once  sync.Once
	// diskUsage measures a workspace's /workspace in bytes (tests replace it).
	diskUsage func(ctx context.Context, containerID string) (int64, error)
}

// wsState is this server's live view of one workspace.
type wsState struct {
	lock sync.Mutex // one create/start/stop/delete at a time
	busy int        // jobs and operations under way here
	jobs map[*handle]struct{}
	// touched is when this server last wrote the workspace's last use (under
	// Manager.mu): a burst of short jobs writes it once a touchEvery.
	touched time.Time
	// asleep mirrors the record's state paused or hibernated (under
	// Manager.mu): a session's input wakes the workspace without a store
	// read.
	asleep bool
	// lost says, once, why a restore failed and the workspace started
	// afresh (under Manager.mu): the next job's output says so.
	lost string
	// unhibernated is when a hibernation last did not happen (under
	// Manager.mu): it is not tried again for hibernate_after_s.
	unhibernated time.Time
}

// touchEvery is how often a workspace's last use is written while jobs come
// and go; idle stops count in minutes.
const touchEvery = time.Second

// Options are a manager's collaborators, all optional.
type Options struct {
	// Observer is told of each package manager's run in install_packages
	// and whether it succeeded.
	Observer observe.Observer
	// Egress grants an install the egress allowlist (through the server's
	// proxy) until revoke, with the environment pointing at it
	// (workspaces.install_network: egress).
	Egress func(ctx context.Context, job string) (env []string, revoke func())
	// TunnelProxy grants an install on an engine whose installers have no
	// network (Capabilities.TunnelInstalls) the proxy its tunnel reaches,
	// until revoke.
	TunnelProxy func(ctx context.Context, job string) (proxy http.Handler, revoke func())
	// Through starts a job of a workspace made with its own allowlist or
	// secrets with start, holding a grant of the proxy for the job's life
	// (the list checked against the policy's at each grant; the secrets as
	// placeholders, swapped at the proxy): egress.Runtime.Through.
	Through func(ctx context.Context, spec sandbox.Spec, out sandbox.Output, start sandbox.StartFunc) (sandbox.Handle, error)
	// Baselines keeps imports' baselines (nil: imports and forks'
	// baselines are not available).
	Baselines *baseline.Store
	// CheckpointDir keeps hibernated workspaces' images, by tenant ("":
	// no hibernation; workspaces.hibernate_after_s stops them instead).
	CheckpointDir string
}

// New makes a manager, or returns nil when the engine keeps no workspaces;
// Run starts its background loop.
func New(e sandbox.Engine, st *store.Store, pol *policy.Policy, server string, log zerolog.Logger, o Options) *Manager {
	caps := e.Capabilities()
	if caps.Workspaces == nil {
		return nil
	}
	o.Observer = observe.Or(o.Observer)
	m := &Manager{Options: o, rt: caps.Workspaces, tunnel: caps.TunnelInstalls, frozen: caps.Freezer, cp: caps.Checkpointer, st: st, pol: pol, server: server, log: log,
		state: map[string]*wsState{}, ports: map[string]map[int]*exposure{}, stop: make(chan struct{})}
	m.diskUsage = m.du
	return m
}

// ws is this server's state of workspace id.
func (m *Manager) ws(id string) *wsState {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.state[id]
	if s == nil {
		s = &wsState{jobs: map[*handle]struct{}{}}
		m.state[id] = s
	}
	return s
}

// CheckName says what is wrong with a new workspace's name, if anything.
func CheckName(name string) error {
	if !NamePattern.MatchString(name) {
		return fmt.Errorf("workspace name %q is not valid: 1 to 63 characters, lowercase letters, digits, '_', '.' and '-', starting with a letter or digit", truncate(name, 80))
	}
	return nil
}

// tenantPattern is a tenant's name in an admin's TENANT/NAME.
var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$`)

// CheckRef says what is wrong with a name that refers to a workspace: a
// workspace name, or (for an admin) TENANT/NAME.
func CheckRef(ref string) error {
	if owner, name, ok := strings.Cut(ref, "/"); ok {
		if !tenantPattern.MatchString(owner) {
			return fmt.Errorf("workspace name %q is not valid: a name has no '/' (an admin names another tenant's workspace TENANT/NAME)", truncate(ref, 80))
		}
		return CheckName(name)
	}
	return CheckName(ref)
}

// ownerCtx is ctx acting for w's tenant: work the server does later on a
// workspace's behalf (relays of its ports) finds it as its owner would.
func ownerCtx(ctx context.Context, w *record.Workspace) context.Context {
	return tenant.With(ctx, tenant.Tenant{Name: w.Tenant})
}

// Enabled says whether the policy allows workspaces.
func (m *Manager) Enabled() bool { return m.pol.Workspaces.Enabled }

// Policy is the policy the manager enforces.
func (m *Manager) Policy() *policy.Policy { return m.pol }

// CreateRequest is what a workspace is made of.
type CreateRequest struct {
	Name, Language, Image string
	// Runtime is the template's or snapshot's OCI runtime (lang.Language's);
	// "" = the policy's. A fork gives its source's.
	Runtime string
	// Template is the template Image is (""= a language's image): a new
	// workspace starts with its files (proto.SeedDir) unless Import or
	// From fill it.
	Template string
	Limits   policy.Resolved
	Mounts   []sandbox.Mount // granted host directories, read-only
	// Import, when set, fills /workspace with a copy of a granted mount's
	// tree and keeps it as the baseline of Changes.
	Import *Import
	// From, when set, names a workspace whose files (and baseline) the new
	// one starts with; Image and Language must be that workspace's.
	From string
	// WithProcesses, with From, copies the source's processes and memory
	// too where its runtime can be checkpointed (Copies).
	WithProcesses bool
	// restoreFrom is a checkpoint's image (Copies): the new container is
	// started from it once its files are in, not started empty.
	restoreFrom string
	// Egress, when not empty, is the workspace's own allowlist (already
	// checked against the policy's): its container joins the egress network
	// and its jobs reach these hosts through the proxy, for its life.
	Egress []string
	// Secrets name the policy's secrets its jobs use (already checked
	// against the policy and the tenant): the workspace keeps a placeholder
	// for each, its jobs are on the egress path and the proxy swaps the
	// values in for the secrets' hosts.
	Secrets []string
}

// Create makes a workspace and starts its container; with Import or From,
// the workspace starts with their files (Origin says what came).
func (m *Manager) Create(ctx context.Context, req CreateRequest) (*record.Workspace, *Origin, error) {
	if !m.Enabled() {
		return nil, nil, ErrDisabled
	}
	if err := CheckName(req.Name); err != nil {
		return nil, nil, err
	}
	n, err := m.st.CountWorkspaces(ctx)
	if err != nil {
		return nil, nil, err
	}
	if n >= m.pol.Workspaces.Max {
		return nil, nil, fmt.Errorf("%w: %d exist (policy workspaces.max=%d); delete one with delete_workspace", ErrTooMany, n, m.pol.Workspaces.Max)
	}
	if t, ok := tenant.From(ctx); ok && t.MaxWorkspaces > 0 {
		mine, err := m.st.ListWorkspaces(ctx) // the store lists the tenant's own
		if err != nil {
			return nil, nil, err
		}
		if len(mine) >= t.MaxWorkspaces {
			return nil, nil, fmt.Errorf("%w: this token has %d workspaces, the most it allows (workspaces=%d in the token file); delete one with delete_workspace", ErrTooMany, len(mine), t.MaxWorkspaces)
		}
	}
	if _, err := m.st.GetWorkspace(ctx, req.Name); err == nil {
		return nil, nil, fmt.Errorf("%w: %q (list_workspaces shows it; delete_workspace removes it)", record.ErrWorkspaceExists, req.Name)
	}
	var src *record.Workspace
	if req.From != "" {
		if src, err = m.Get(ctx, req.From); err != nil {
			return nil, nil, err
		}
	}
	var im *importer
	if req.Import != nil {
		// Before anything is made: a tree past the quota makes nothing.
		var done func()
		if im, done, err = m.prepareImport(ctx, req.Image, req.Import); err != nil {
			return nil, nil, err
		}
		defer done()
	}
	w, err := m.create(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	if m.Baselines != nil {
		_ = m.Baselines.Remove(w.ID) // a legacy workspace's, left by a server that died mid-delete
	}
	var origin *Origin
	switch {
	case im != nil:
		origin, err = m.fillImport(ctx, w, im)
	case src != nil:
		origin, err = m.fillFork(ctx, w, src)
	case req.Template != "":
		err = m.fillSeed(ctx, w)
	}
	if err == nil && req.restoreFrom != "" {
		if err = m.cp.RestoreWorkspace(ctx, w.ContainerID, req.restoreFrom); err != nil {
			err = fmt.Errorf("fork %q with its processes: restore: %w", w.Name, err)
		}
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer cancel()
		if derr := m.delete(cctx, w); derr != nil {
			m.log.Warn().Err(derr).Str("workspace", w.Name).Msg("remove a workspace whose copy failed")
		}
		return nil, nil, err
	}
	return w, origin, nil
}

// create makes the workspace's records, volume and container, and starts it.
func (m *Manager) create(ctx context.Context, req CreateRequest) (*record.Workspace, error) {
	l := req.Limits
	rec := &record.Workspace{
		Name: req.Name, Language: req.Language, Image: req.Image, State: StateCreating, ServerID: m.server,
		Limits: record.WorkspaceLimits{MemoryBytes: l.MemoryBytes, NanoCPUs: l.NanoCPUs, Pids: l.Pids,
			DiskBytes: m.pol.Workspaces.DiskMB << 20},
		CreatedAt: time.Now(), LastUsedAt: time.Now(), Details: record.WorkspaceDetails{Egress: req.Egress, Template: req.Template, Runtime: req.Runtime},
	}
	for _, name := range req.Secrets {
		rec.Details.Secrets = append(rec.Details.Secrets, record.SecretUse{Name: name, Placeholder: secret.NewPlaceholder()})
	}
	network := ""
	if len(req.Egress) > 0 || len(req.Secrets) > 0 {
		if m.Through == nil {
			return nil, errors.New("egress: the egress proxy is not running (policy key egress.allow is empty)")
		}
		network = sandbox.NetworkEgress
	}
	// Its identity first, and its lock held before its record is seen: a
	// job that finds the record waits for the container to be made.
	rec.ID = uuid.NewString()
	s := m.ws(rec.ID)
	s.lock.Lock()
	defer s.lock.Unlock()
	if err := m.st.CreateWorkspace(ctx, rec); err != nil {
		m.mu.Lock()
		delete(m.state, rec.ID) // never made: nobody else knows its id
		m.mu.Unlock()
		if errors.Is(err, record.ErrWorkspaceExists) {
			return nil, fmt.Errorf("%w: %q (list_workspaces shows it; delete_workspace removes it)", record.ErrWorkspaceExists, req.Name)
		}
		return nil, err
	}
	refs, err := m.rt.CreateWorkspace(ctx, sandbox.WorkspaceSpec{
		Name: req.Name, Image: req.Image, Runtime: cmp.Or(req.Runtime, m.pol.Runtime), Env: CacheEnv, Mounts: req.Mounts, Network: network,
		Limits: sandbox.Limits{MemoryBytes: l.MemoryBytes, NanoCPUs: l.NanoCPUs, Pids: l.Pids,
			OpenFiles: l.OpenFiles, TmpBytes: l.TmpBytes, LogBytes: 1 << 20},
	})
	if err == nil {
		rec.ContainerID, rec.Volume = refs.ContainerID, refs.Volume
		if req.restoreFrom == "" {
			err = m.rt.StartWorkspace(ctx, refs.ContainerID)
		}
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_ = m.rt.RemoveWorkspace(cctx, refs)
		_ = m.st.DeleteWorkspace(cctx, rec.ID)
		return nil, err
	}
	rec.State = StateRunning
	if err := m.st.UpdateWorkspace(ctx, rec); err != nil {
		return nil, err
	}
	m.log.Info().Str("workspace", req.Name).Str("container", short(refs.ContainerID)).Msg("workspace created")
	return rec, nil
}

// Get returns the record of ctx's tenant's workspace name (for an admin,
// TENANT/NAME names another tenant's).
func (m *Manager) Get(ctx context.Context, name string) (*record.Workspace, error) {
	if err := CheckRef(name); err != nil {
		return nil, err
	}
	w, err := m.st.GetWorkspace(ctx, name)
	if errors.Is(err, record.ErrWorkspaceNotFound) {
		return nil, fmt.Errorf("%w: %q (create_workspace makes it; list_workspaces shows those that exist)", record.ErrWorkspaceNotFound, name)
	}
	return w, err
}

// List returns every workspace.
func (m *Manager) List(ctx context.Context) ([]*record.Workspace, error) {
	return m.st.ListWorkspaces(ctx)
}

// Delete removes a workspace's container (its running jobs end with it),
// its volume and its record.
func (m *Manager) Delete(ctx context.Context, name string) error {
	w, err := m.Get(ctx, name)
	if err != nil {
		return err
	}
	return m.delete(ctx, w)
}

func (m *Manager) delete(ctx context.Context, w *record.Workspace) error {
	// Ports first, before the workspace's lock: closing waits for their
	// relays, and a relay just accepted may be waiting for that lock.
	m.closePorts(w.ID)
	s := m.ws(w.ID)
	s.lock.Lock()
	defer s.lock.Unlock()
	if err := m.rt.RemoveWorkspace(ctx, sandbox.WorkspaceRefs{ContainerID: w.ContainerID, Volume: w.Volume}); err != nil {
		return err
	}
	if err := m.st.DeleteWorkspace(ctx, w.ID); err != nil && !errors.Is(err, record.ErrWorkspaceNotFound) {
		return err
	}
	if m.Baselines != nil {
		if err := m.Baselines.Remove(w.ID); err != nil {
			m.log.Warn().Err(err).Str("workspace", w.Name).Msg("remove the workspace's baseline")
		}
	}
	if m.CheckpointDir != "" {
		if err := os.RemoveAll(m.imageDir(w)); err != nil {
			m.log.Warn().Err(err).Str("workspace", w.Name).Msg("remove the workspace's checkpoint image")
		}
	}
	m.mu.Lock()
	delete(m.state, w.ID)
	m.mu.Unlock()
	m.log.Info().Str("workspace", w.Name).Str("tenant", w.Tenant).Msg("workspace deleted")
	return nil
}

// Acquire makes sure the workspace's container runs (starting a stopped one)
// and counts a use until release is called: a workspace in use is never
// stopped for idleness.
func (m *Manager) Acquire(ctx context.Context, name string) (w *record.Workspace, release func(), err error) {
	if !m.Enabled() {
		return nil, nil, ErrDisabled
	}
	if w, err = m.Get(ctx, name); err != nil {
		return nil, nil, err
	}
	s := m.ws(w.ID)
	s.lock.Lock()
	defer s.lock.Unlock()
	running, err := m.rt.WorkspaceRunning(ctx, w.ContainerID)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, nil, fmt.Errorf("workspace %q lost its container (removed outside the server): delete_workspace it and create it again", name)
	}
	if err != nil {
		return nil, nil, err
	}
	if !running || w.State != StateRunning {
		// Read before the lock: an idle hibernation may have ended since.
		if w, err = m.st.GetWorkspaceByID(ctx, w.ID); err != nil {
			return nil, nil, err
		}
	}
	if !running && w.State == StateHibernated {
		if err := m.restoreLocked(ctx, w); err != nil {
			return nil, nil, err
		}
	} else if !running {
		if err := m.rt.StartWorkspace(ctx, w.ContainerID); err != nil {
			return nil, nil, fmt.Errorf("start workspace %q: %w", name, err)
		}
		m.log.Info().Str("workspace", name).Msg("workspace started")
	} else if w.State == StatePaused {
		if err := m.thawLocked(ctx, w); err != nil {
			return nil, nil, err
		}
	}
	now := time.Now()
	if w.State != StateRunning {
		w.State = StateRunning
		w.LastUsedAt = now
		if err := m.st.UpdateWorkspace(ctx, w); err != nil {
			return nil, nil, err
		}
	} else if err := m.touch(ctx, w.ID, now); err != nil {
		return nil, nil, err
	}
	return w, m.hold(w.ID), nil
}

// hold counts a use of running workspace id until release is called.
func (m *Manager) hold(id string) (release func()) {
	s := m.ws(id)
	m.mu.Lock()
	s.busy++
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			s.busy--
			m.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			_ = m.touch(ctx, id, time.Now())
		})
	}
}

// touch writes workspace id's last use, unless this server wrote it less
// than touchEvery ago.
func (m *Manager) touch(ctx context.Context, id string, now time.Time) error {
	s := m.ws(id)
	m.mu.Lock()
	recent := now.Sub(s.touched) < touchEvery && !now.Before(s.touched)
	if !recent {
		s.touched = now
	}
	m.mu.Unlock()
	if recent {
		return nil
	}
	return m.st.TouchWorkspace(ctx, id, now)
}

// byContainer is the ID of the workspace whose container has this id ("" if none).
func (m *Manager) byContainer(ctx context.Context, containerID string) (string, error) {
	all, err := m.st.ListWorkspaces(ctx)
	if err != nil {
		return "", err
	}
	for _, w := range all {
		if w.ContainerID == containerID {
			return w.ID, nil
		}
	}
	return "", nil
}

// Run stops idle workspaces and enforces disk quotas until Close.
func (m *Manager) Run() {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.poll()
	}
}

// Close stops Run.
func (m *Manager) Close() { m.once.Do(func() { close(m.stop) }) }

// poll runs one pass: busy workspaces are touched and measured, idle ones stopped.
func (m *Manager) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	list, err := m.st.ListWorkspaces(ctx)
	if err != nil {
		m.log.Warn().Err(err).Msg("workspaces: list")
		return
	}
	idle := time.Duration(m.pol.Workspaces.IdleStopS) * time.Second
	pauseAfter := time.Duration(m.pol.Workspaces.PauseAfterS) * time.Second
	if m.frozen == nil {
		pauseAfter = 0
	}
	hibernateAfter := time.Duration(m.pol.Workspaces.HibernateAfterS) * time.Second
	for _, w := range list {
		s := m.ws(w.ID)
		m.mu.Lock()
		busy, jobs := s.busy, len(s.jobs)
		s.asleep = w.State == StatePaused || w.State == StateHibernated // as another run of the server left it
		m.mu.Unlock()
		sleepAfter := pauseAfter
		if hibernateAfter > 0 && (sleepAfter == 0 || hibernateAfter < sleepAfter) {
			sleepAfter = hibernateAfter
		}
		sessionsIdle := sleepAfter > 0 && m.onlyIdleSessions(s, sleepAfter)
		switch {
		case busy > 0 && !sessionsIdle:
			_ = m.st.TouchWorkspace(ctx, w.ID, time.Now())
			if jobs > 0 {
				m.checkQuota(ctx, w, s)
			}
		case (w.State == StateRunning || w.State == StatePaused) && hibernateAfter > 0 && m.idleFor(s, w, hibernateAfter) && m.mayHibernate(s, hibernateAfter):
			m.hibernateIdle(ctx, w.ID, hibernateAfter)
		case w.State == StateRunning && pauseAfter > 0 && m.idleFor(s, w, pauseAfter):
			m.pauseIdle(ctx, w.ID, pauseAfter)
		case (w.State == StateRunning || w.State == StatePaused) && idle > 0 && busy == 0 && time.Since(w.LastUsedAt) >= idle:
			m.stopIdle(ctx, w.ID, idle)
		}
	}
}

// onlyIdleSessions says whether everything holding workspace s is an
// interactive session that had no input or output for at least idle: a
// workspace whose sessions wait for a person may be frozen with them.
func (m *Manager) onlyIdleSessions(s *wsState, idle time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.busy == 0 || s.busy != len(s.jobs) {
		return false
	}
	for h := range s.jobs {
		if !h.session || h.idleFor() < idle {
			return false
		}
	}
	return true
}

// idleFor says whether workspace w had nothing but idle sessions for d:
// no job, no call for d, and every session without input or output for d.
func (m *Manager) idleFor(s *wsState, w *record.Workspace, d time.Duration) bool {
	m.mu.Lock()
	busy := s.busy
	m.mu.Unlock()
	if busy == 0 {
		return time.Since(w.LastUsedAt) >= d
	}
	return m.onlyIdleSessions(s, d)
}

// pauseIdle freezes workspace id when it is still idle for pauseAfter,
// re-checking under its lock.
func (m *Manager) pauseIdle(ctx context.Context, id string, pauseAfter time.Duration) {
	s := m.ws(id)
	s.lock.Lock()
	defer s.lock.Unlock()
	w, err := m.st.GetWorkspaceByID(ctx, id)
	if err != nil || w.State != StateRunning {
		return
	}
	if !m.idleFor(s, w, pauseAfter) {
		return
	}
	m.mu.Lock()
	busy := s.busy
	m.mu.Unlock()
	if err := m.frozen.FreezeWorkspace(ctx, w.ContainerID); err != nil {
		m.log.Warn().Err(err).Str("workspace", w.Name).Msg("pause idle workspace")
		return
	}
	w.State = StatePaused
	if err := m.st.UpdateWorkspace(ctx, w); err != nil {
		m.log.Warn().Err(err).Str("workspace", w.Name).Msg("record paused workspace")
	}
	m.mu.Lock()
	s.asleep = true
	m.mu.Unlock()
	m.log.Info().Str("workspace", w.Name).Dur("idle", pauseAfter).Int("sessions", busy).Msg("idle workspace paused")
}

// thawLocked thaws a paused workspace and records it running (its lock
// held).
func (m *Manager) thawLocked(ctx context.Context, w *record.Workspace) error {
	observe.MarkCtx(ctx, "ws_thaw")
	defer observe.MarkCtx(ctx, "ws_thawed")
	if m.frozen != nil {
		if err := m.frozen.ThawWorkspace(ctx, w.ContainerID); err != nil {
			return fmt.Errorf("thaw workspace %q: %w", w.Name, err)
		}
	}
	w.State = StateRunning
	if err := m.st.UpdateWorkspace(ctx, w); err != nil {
		return err
	}
	s := m.ws(w.ID)
	m.mu.Lock()
	s.asleep = false
	m.mu.Unlock()
	m.log.Info().Str("workspace", w.Name).Msg("workspace thawed")
	return nil
}

// thawByID thaws workspace id if its record says paused, and restores it
// if hibernated (a server that has not polled yet knows it from the record
// only).
func (m *Manager) thawByID(ctx context.Context, id string) error {
	s := m.ws(id)
	s.lock.Lock()
	defer s.lock.Unlock()
	w, err := m.st.GetWorkspaceByID(ctx, id)
	switch {
	case err != nil:
		return err
	case w.State == StatePaused:
		return m.thawLocked(ctx, w)
	case w.State == StateHibernated:
		return m.restoreLocked(ctx, w)
	}
	return nil
}

// thaw thaws (or restores) workspace id if it is asleep: before anything
// reaches a process of it that is not a new call (a session's input, a
// signal).
func (m *Manager) thaw(ctx context.Context, id string) error {
	s := m.ws(id)
	m.mu.Lock()
	asleep := s.asleep
	m.mu.Unlock()
	if !asleep {
		return nil
	}
	return m.thawByID(ctx, id)
}

// stopIdle stops workspace id when nobody used it for idle, re-checking
// under its lock.
func (m *Manager) stopIdle(ctx context.Context, id string, idle time.Duration) {
	s := m.ws(id)
	s.lock.Lock()
	defer s.lock.Unlock()
	m.mu.Lock()
	busy := s.busy
	m.mu.Unlock()
	w, err := m.st.GetWorkspaceByID(ctx, id)
	if err != nil || busy > 0 || (w.State != StateRunning && w.State != StatePaused) || time.Since(w.LastUsedAt) < idle {
		return
	}
	name := w.Name
	if err := m.rt.StopWorkspace(ctx, w.ContainerID); err != nil {
		m.log.Warn().Err(err).Str("workspace", name).Msg("stop idle workspace")
		return
	}
	w.State = StateStopped
	if err := m.st.UpdateWorkspace(ctx, w); err != nil {
		m.log.Warn().Err(err).Str("workspace", name).Msg("record stopped workspace")
	}
	m.mu.Lock()
	s.asleep = false
	m.mu.Unlock()
	m.log.Info().Str("workspace", name).Dur("idle", idle).Msg("idle workspace stopped")
}

// StopNow stops a workspace's container if nothing runs in it (tests and
// operators; the idle loop does the same after idle_stop_s).
func (m *Manager) StopNow(ctx context.Context, name string) error {
	w, err := m.Get(ctx, name)
	if err != nil {
		return err
	}
	m.stopIdle(ctx, w.ID, 0)
	return nil
}

// PauseNow freezes a workspace if nothing but idle sessions holds it (tests
// and operators; the idle loop does the same after pause_after_s).
func (m *Manager) PauseNow(ctx context.Context, name string) error {
	if m.frozen == nil {
		return errors.New("pause: the engine cannot freeze a workspace (policy workspaces.pause_after_s needs docker or podman)")
	}
	w, err := m.Get(ctx, name)
	if err != nil {
		return err
	}
	m.pauseIdle(ctx, w.ID, 0)
	return nil
}

// checkQuota kills the jobs of a workspace whose /workspace holds more than its quota.
func (m *Manager) checkQuota(ctx context.Context, w *record.Workspace, s *wsState) {
	quota := w.Limits.DiskBytes
	if quota <= 0 {
		quota = m.pol.Workspaces.DiskMB << 20
	}
	used, err := m.diskUsage(ctx, w.ContainerID)
	if err != nil {
		m.log.Debug().Err(err).Str("workspace", w.Name).Msg("measure disk use")
		return
	}
	if used <= quota {
		return
	}
	why := fmt.Sprintf("workspace %q holds %d MiB under /workspace, past its disk quota of %d MiB (policy workspaces.disk_mb): the job was stopped; delete files to make room",
		w.Name, used>>20, quota>>20)
	m.mu.Lock()
	var victims []*handle
	for h := range s.jobs {
		victims = append(victims, h)
	}
	m.mu.Unlock()
	for _, h := range victims {
		h.stopFor(ctx, ReasonDiskQuota, why)
	}
	m.log.Warn().Str("workspace", w.Name).Int64("used_bytes", used).Int64("quota_bytes", quota).Int("jobs_stopped", len(victims)).Msg("workspace past its disk quota")
}

// DiskUsage measures a running workspace's /workspace in bytes (a stopped
// one is not started for it).
func (m *Manager) DiskUsage(ctx context.Context, name string) (int64, error) {
	w, err := m.Get(ctx, name)
	if err != nil {
		return 0, err
	}
	if w.State != "running" || w.ContainerID == "" {
		return 0, fmt.Errorf("workspace %q is %s", name, w.State)
	}
	return m.diskUsage(ctx, w.ContainerID)
}

// du measures /workspace (as root, so no file is out of its reach).
func (m *Manager) du(ctx context.Context, containerID string) (int64, error) {
	var out, errb bytes.Buffer
	code, err := m.rt.Exec(ctx, containerID, sandbox.ExecOptions{
		Cmd: []string{"du", "-s", "-x", "-k", "/workspace"}, User: "0:0", Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		return 0, err
	}
	f := strings.Fields(out.String())
	if len(f) == 0 {
		return 0, fmt.Errorf("du exited %d: %s", code, strings.TrimSpace(errb.String()))
	}
	kb, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("du: %q: %w", f[0], err)
	}
	return kb << 10, nil
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// fillSeed gives a workspace made from a template the template's files.
func (m *Manager) fillSeed(ctx context.Context, w *record.Workspace) error {
	var out bytes.Buffer
	code, err := m.rt.Exec(ctx, w.ContainerID, sandbox.ExecOptions{
		Cmd: []string{images.SupervisorPath, proto.SeedCommand, Root}, Stdout: &out, Stderr: &out})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d: %s", code, strings.TrimSpace(out.String()))
	}
	if err != nil {
		return fmt.Errorf("template %s: its files: %w", w.Details.Template, err)
	}
	return nil
}

// Files streams a workspace's /workspace as a tar ("./" names), running or
// stopped; the caller closes it.
func (m *Manager) Files(ctx context.Context, w *record.Workspace) (io.ReadCloser, error) {
	if err := m.thaw(ctx, w.ID); err != nil {
		return nil, err
	}
	return m.rt.CopyFrom(ctx, w.ContainerID, Root+"/.")
}

package workspace

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
	"github.com/sandboxer/sandboxer/internal/sandbox/sandboxtest"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// newFakeManager is a workspace manager over the fake engine (which keeps
// the same Workspaces contract as Docker and Kubernetes, in sandboxtest)
// and a real store.
func newFakeManager(t *testing.T, pol *policy.Policy) (*Manager, *fake.Runtime) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := fake.New("ws-" + t.Name())
	m := New(e, st, pol, "server-1", zerolog.Nop(), Options{})
	if m == nil {
		t.Fatal("no manager over an engine that declares workspaces")
	}
	t.Cleanup(m.Close)
	return m, e
}

// limits are the policy's defaults for a workspace.
func limits(t *testing.T, pol *policy.Policy) policy.Resolved {
	t.Helper()
	l, err := pol.Resolve(policy.Request{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// idle waits until no job holds workspace id.
func idle(t *testing.T, m *Manager, id string) {
	t.Helper()
	s := m.ws(id)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		busy := s.busy
		m.mu.Unlock()
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace %s still busy (%d)", id, busy)
		}
	}
}

func as(name string) context.Context {
	return tenant.With(context.Background(), tenant.Tenant{Name: name})
}

// run runs cmd as a job of workspace ws through the workspace runtime.
func run(t *testing.T, ctx context.Context, rt sandbox.Runtime, ws, cmd string) (int, string) {
	t.Helper()
	spec := sandboxtest.Spec("fake/base", cmd)
	spec.Workspace = ws
	out := &sandbox.Buffer{Max: 1 << 20}
	h, err := rt.Start(ctx, spec, out)
	if err != nil {
		t.Fatalf("job %q in %s: %v", cmd, ws, err)
	}
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("job %q did not end", cmd)
	}
	return h.Status().ExitCode, out.Stdout() + out.Stderr()
}

// TestLifecycle: a workspace is made running, keeps its files across jobs
// and a stop (a job starts it again), and its delete removes its container
// and volume from the engine and its record from the store.
func TestLifecycle(t *testing.T) {
	m, e := newFakeManager(t, policy.Default())
	ctx := as("alice")
	w, _, err := m.Create(ctx, CreateRequest{Name: "proj", Language: "bash", Image: "fake/base", Limits: limits(t, policy.Default())})
	if err != nil {
		t.Fatal(err)
	}
	if w.State != StateRunning || w.ContainerID == "" || w.Volume == "" || e.VolumeCount() != 1 {
		t.Fatalf("made %+v (%d volumes), want running with a container and a volume", w, e.VolumeCount())
	}
	rt := NewRuntime(e, m)
	if code, out := run(t, ctx, rt, "proj", "echo kept > notes.txt; echo done"); code != 0 || out != "done\n" {
		t.Fatalf("first job: %d %q", code, out)
	}
	idle(t, m, w.ID) // a job's end releases its workspace just after Done
	if err := m.StopNow(ctx, "proj"); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get(ctx, "proj"); got.State != StateStopped {
		t.Fatalf("after StopNow: %s, want stopped", got.State)
	}
	if running, _ := e.WorkspaceRunning(ctx, w.ContainerID); running {
		t.Fatal("the engine still runs a stopped workspace")
	}
	if code, out := run(t, ctx, rt, "proj", "cat notes.txt"); code != 0 || out != "kept\n" {
		t.Fatalf("a job of the stopped workspace: %d %q, want it started again with its file", code, out)
	}
	if got, _ := m.Get(ctx, "proj"); got.State != StateRunning {
		t.Fatalf("after the job: %s, want running", got.State)
	}
	if err := m.Delete(ctx, "proj"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "proj"); !errors.Is(err, record.ErrWorkspaceNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if _, err := e.WorkspaceRunning(ctx, w.ContainerID); !errors.Is(err, sandbox.ErrNotFound) || e.VolumeCount() != 0 {
		t.Fatalf("after Delete the engine keeps its container (%v) or volume (%d)", err, e.VolumeCount())
	}
}

// TestTenantsOwnTheirNames: two tenants' workspaces of one name are two
// containers; each job sees its own tenant's files, and a name of another
// tenant's is not found.
func TestTenantsOwnTheirNames(t *testing.T) {
	m, e := newFakeManager(t, policy.Default())
	rt := NewRuntime(e, m)
	for _, who := range []string{"alice", "bob"} {
		if _, _, err := m.Create(as(who), CreateRequest{Name: "proj", Language: "bash", Image: "fake/base", Limits: limits(t, policy.Default())}); err != nil {
			t.Fatal(err)
		}
		if code, _ := run(t, as(who), rt, "proj", "echo "+who+" > owner"); code != 0 {
			t.Fatalf("%s's job failed", who)
		}
	}
	for _, who := range []string{"alice", "bob"} {
		if _, out := run(t, as(who), rt, "proj", "cat owner"); out != who+"\n" {
			t.Fatalf("%s's workspace holds %q", who, out)
		}
	}
	if _, err := m.Get(as("carol"), "proj"); !errors.Is(err, record.ErrWorkspaceNotFound) {
		t.Fatalf("carol sees a workspace: %v", err)
	}
	if err := m.Delete(as("alice"), "proj"); err != nil {
		t.Fatal(err)
	}
	if _, out := run(t, as("bob"), rt, "proj", "cat owner"); out != "bob\n" {
		t.Fatalf("alice's delete touched bob's workspace: %q", out)
	}
}

// TestCreateRefusals: a duplicate name, a bad name and one past
// workspaces.max make nothing on the engine.
func TestCreateRefusals(t *testing.T) {
	pol := policy.Default()
	pol.Workspaces.Max = 1
	m, e := newFakeManager(t, pol)
	ctx := as("alice")
	req := CreateRequest{Name: "one", Language: "bash", Image: "fake/base", Limits: limits(t, pol)}
	if _, _, err := m.Create(ctx, req); err != nil {
		t.Fatal(err)
	}
	before := e.Count()
	if _, _, err := m.Create(ctx, req); !errors.Is(err, ErrTooMany) && !errors.Is(err, record.ErrWorkspaceExists) {
		t.Fatalf("a second workspace past max 1: %v", err)
	}
	req.Name = "Bad Name"
	if _, _, err := m.Create(ctx, req); err == nil || !strings.Contains(err.Error(), "not valid") {
		t.Fatalf("a bad name: %v", err)
	}
	if e.Count() != before {
		t.Fatalf("refusals made containers: %d, were %d", e.Count(), before)
	}
}

// TestPauseWhenIdleThawOnUse: with pause_after_s, an idle workspace is
// frozen (recorded paused, its engine container frozen) and the next job
// thaws it first and runs; a session waiting for input is frozen with it,
// and its input thaws it: its process goes on where it stopped.
func TestPauseWhenIdleThawOnUse(t *testing.T) {
	pol := policy.Default()
	pol.Workspaces.PauseAfterS = 1
	m, e := newFakeManager(t, pol)
	ctx := as("alice")
	w, _, err := m.Create(ctx, CreateRequest{Name: "proj", Language: "bash", Image: "fake/base", Limits: limits(t, pol)})
	if err != nil {
		t.Fatal(err)
	}
	rt := NewRuntime(e, m)
	if code, _ := run(t, ctx, rt, "proj", "echo hi"); code != 0 {
		t.Fatal("first job failed")
	}
	idle(t, m, w.ID)
	m.poll() // used just now: not paused
	if got, _ := m.Get(ctx, "proj"); got.State != StateRunning {
		t.Fatalf("a workspace used just now is %s", got.State)
	}
	paused := func() bool {
		got, _ := m.Get(ctx, "proj")
		frozen, _ := e.WorkspaceFrozen(ctx, w.ContainerID)
		return got.State == StatePaused && frozen
	}
	pollUntil(t, m, paused, "an idle workspace was not paused after pause_after_s")
	if code, out := run(t, ctx, rt, "proj", "echo thawed"); code != 0 || out != "thawed\n" {
		t.Fatalf("a job of the paused workspace: %d %q", code, out)
	}
	if paused() {
		t.Fatal("the job did not thaw the workspace")
	}

	// A session idle for pause_after_s is frozen with its workspace.
	h, out := startIdleSession(t, ctx, rt, "proj")
	m.poll()
	if paused() {
		t.Fatal("a workspace whose session just spoke was paused")
	}
	pollUntil(t, m, paused, "a workspace with only an idle session was not paused")
	finishSession(t, ctx, h, out, paused)
}

// TestHibernateWhenIdleRestoreOnUse: a workspace idle for
// hibernate_after_s, an idle session in it, is checkpointed into its
// tenant's directory and stopped; the session's input restores it and the
// session goes on. A restore that fails starts it afresh with its files and
// the next job says so. Without checkpoints it is stopped instead.
func TestHibernateWhenIdleRestoreOnUse(t *testing.T) {
	pol := policy.Default()
	pol.Workspaces.HibernateAfterS = 1
	m, e := newFakeManager(t, pol)
	m.CheckpointDir = t.TempDir()
	m.diskUsage = func(context.Context, string) (int64, error) { return 1 << 20, nil }
	ctx := as("alice")
	w, _, err := m.Create(ctx, CreateRequest{Name: "proj", Language: "bash", Image: "fake/base", Limits: limits(t, pol)})
	if err != nil {
		t.Fatal(err)
	}
	rt := NewRuntime(e, m)
	h, out := startIdleSession(t, ctx, rt, "proj")
	image := filepath.Join(m.CheckpointDir, "alice", w.ID)
	hibernated := func() bool {
		got, _ := m.Get(ctx, "proj")
		running, _ := e.WorkspaceRunning(ctx, w.ContainerID)
		return got.State == StateHibernated && !running
	}
	waitHibernated := func(what string) {
		t.Helper()
		pollUntil(t, m, hibernated, what+" was not hibernated after hibernate_after_s")
	}
	waitHibernated("a workspace with only an idle session")
	if fi, err := os.Stat(filepath.Join(image, "checkpoint.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the image under the tenant's directory: %v %v", fi, err)
	}
	finishSession(t, ctx, h, out, hibernated)
	if _, err := os.Stat(image); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the image outlived its restore: %v", err)
	}

	// A restore that fails: started afresh, files kept, the next job says so.
	idle(t, m, w.ID)
	if code, _ := run(t, ctx, rt, "proj", "echo kept > f"); code != 0 {
		t.Fatal("writing a file failed")
	}
	idle(t, m, w.ID)
	waitHibernated("an idle workspace")
	if err := os.WriteFile(filepath.Join(image, "checkpoint.json"), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, got := run(t, ctx, rt, "proj", "cat f")
	if code != 0 || !strings.Contains(got, "kept\n") || !strings.Contains(got, "could not be restored") || !strings.Contains(got, "processes it had are gone") {
		t.Fatalf("a job after a failed restore: %d %q", code, got)
	}
	if rec, _ := m.Get(ctx, "proj"); rec.State != StateRunning || rec.Details.LostProcesses == "" {
		t.Fatalf("after a failed restore: %s, lost %q", rec.State, rec.Details.LostProcesses)
	}
	if _, got := run(t, ctx, rt, "proj", "echo again"); got != "again\n" {
		t.Fatalf("the loss was said twice: %q", got)
	}

	// Deleted while hibernated: its image goes with it.
	idle(t, m, w.ID)
	waitHibernated("an idle workspace")
	if err := m.Delete(ctx, "proj"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(image); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the image outlived its workspace: %v", err)
	}

	// No checkpoints: stopped instead.
	m.CheckpointDir = ""
	if _, _, err := m.Create(ctx, CreateRequest{Name: "plain", Language: "bash", Image: "fake/base", Limits: limits(t, pol)}); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, m, func() bool {
		got, _ := m.Get(ctx, "plain")
		return got.State == StateStopped
	}, "a workspace that cannot be hibernated was not stopped")
}

// TestForkWithProcesses: copies of a workspace with its processes get its
// files and its jobs, which go on in each copy from where they were, while
// the source's go on in it; a runtime that cannot be checkpointed gives
// files only and says why.
func TestForkWithProcesses(t *testing.T) {
	pol := policy.Default()
	m, e := newFakeManager(t, pol)
	m.CheckpointDir = t.TempDir()
	ctx := as("alice")
	if _, _, err := m.Create(ctx, CreateRequest{Name: "src", Language: "bash", Image: "fake/base", Limits: limits(t, pol)}); err != nil {
		t.Fatal(err)
	}
	rt := NewRuntime(e, m)
	if code, _ := run(t, ctx, rt, "src", "echo file > f"); code != 0 {
		t.Fatal("writing a file failed")
	}
	spec := sandboxtest.Spec("fake/base", "echo one; sleep 1; echo two; sleep 60")
	spec.Workspace = "src"
	out := &sandbox.Buffer{Max: 1 << 20}
	h, err := rt.Start(ctx, spec, out)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy(context.Background())
	for deadline := time.Now().Add(10 * time.Second); out.Stdout() != "one\n"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("job output %q", out.Stdout())
		}
	}
	copies, origin, err := m.Copies(ctx, CreateRequest{Name: "cp", Language: "bash", Image: "fake/base", Limits: limits(t, pol), From: "src", WithProcesses: true}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 2 || copies[0].Name != "cp-1" || copies[1].Name != "cp-2" || !origin.Processes || origin.ProcessesNote != "" {
		t.Fatalf("copies %v, origin %+v", copies, origin)
	}
	_, key, _ := strings.Cut(h.ContainerID(), "/")
	for _, c := range copies {
		if code, got := run(t, ctx, rt, c.Name, "cat f"); code != 0 || got != "file\n" {
			t.Fatalf("%s's files: %d %q", c.Name, code, got)
		}
		copied := &sandbox.Buffer{Max: 1 << 20}
		hc, err := e.Adopt(ctx, c.ContainerID+"/"+key, 0, 0, copied)
		if err != nil {
			t.Fatalf("%s's copy of the job: %v", c.Name, err)
		}
		for deadline := time.Now().Add(10 * time.Second); copied.Stdout() != "one\ntwo\n"; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s's copy of the job: %q", c.Name, copied.Stdout())
			}
		}
		_ = hc.Signal(ctx, "KILL")
	}
	for deadline := time.Now().Add(10 * time.Second); out.Stdout() != "one\ntwo\n"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the source's job after the fork: %q", out.Stdout())
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(m.CheckpointDir, "alice")); len(entries) != 0 {
		t.Fatalf("the fork's image outlived it: %v", entries)
	}
	if _, _, err := m.Copies(ctx, CreateRequest{Name: "cp", From: "src"}, MaxCopies+1); err == nil || !strings.Contains(err.Error(), "count") {
		t.Fatalf("too many copies: %v", err)
	}

	// No checkpoints here: files only, and why.
	m.CheckpointDir = ""
	copies, origin, err = m.Copies(ctx, CreateRequest{Name: "plain", Language: "bash", Image: "fake/base", Limits: limits(t, pol), From: "src", WithProcesses: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 1 || copies[0].Name != "plain" || origin.Processes || !strings.Contains(origin.ProcessesNote, "files only") {
		t.Fatalf("a fork without checkpoints: %v %+v", copies, origin)
	}
}

// startIdleSession starts `echo ready; cat; echo after` as a session of
// workspace ws and waits for its first line.
func startIdleSession(t *testing.T, ctx context.Context, rt sandbox.Runtime, ws string) (sandbox.Handle, *sandbox.Buffer) {
	t.Helper()
	spec := sandboxtest.Spec("fake/base", "echo ready; cat; echo after")
	spec.Workspace, spec.Kind, spec.OpenStdin = ws, sandbox.KindSession, true
	out := &sandbox.Buffer{Max: 1 << 20}
	h, err := rt.Start(ctx, spec, out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Destroy(context.Background()) })
	for deadline := time.Now().Add(10 * time.Second); out.Stdout() != "ready\n"; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("session output %q", out.Stdout())
		}
	}
	return h, out
}

// finishSession types a line into a session asleep with its workspace and
// ends its input: the input wakes the workspace, and the session goes on.
func finishSession(t *testing.T, ctx context.Context, h sandbox.Handle, out *sandbox.Buffer, asleep func() bool) {
	t.Helper()
	if _, err := h.WriteStdin(ctx, []byte("typed\n")); err != nil {
		t.Fatalf("input to a sleeping session: %v", err)
	}
	if err := h.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the session did not go on after its input woke it: %q", out.Stdout())
	}
	if got := out.Stdout(); got != "ready\ntyped\nafter\n" || asleep() {
		t.Fatalf("after the input: %q (asleep %v)", got, asleep())
	}
}

// pollUntil runs the idle loop until cond holds.
func pollUntil(t *testing.T, m *Manager, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.poll(); !cond(); m.poll() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

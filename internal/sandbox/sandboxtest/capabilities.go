package sandboxtest

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// NewEngine makes an engine for one test, with its own instance and its
// cleanup registered on t.
type NewEngine func(t *testing.T) sandbox.Engine

// RunCapabilities runs the suite of every optional part an engine may
// declare (sandbox.Capabilities). A part the engine does not declare is
// skipped, saying so; one it declares must pass. image is one with bash,
// sleep and ps.
func RunCapabilities(t *testing.T, newEngine NewEngine, image string) {
	suites := []struct {
		name     string
		declared func(sandbox.Capabilities) bool
		run      func(t *testing.T, e sandbox.Engine, image string)
		alone    bool // it fills the engine: run before the others, not beside them
	}{
		{"Capacity", func(c sandbox.Capabilities) bool { return c.Capacity != nil }, runCapacity, true},
		{"Warm", func(c sandbox.Capabilities) bool { return c.Warm != nil }, runWarm, false},
		{"Volumes", func(c sandbox.Capabilities) bool { return c.Volumes != nil }, runVolumes, false},
		{"VolumeFiller", func(c sandbox.Capabilities) bool { return c.VolumeFiller != nil }, runVolumeFiller, false},
		{"Processes", func(c sandbox.Capabilities) bool { return c.Processes != nil }, runProcesses, false},
		{"Workspaces", func(c sandbox.Capabilities) bool { return c.Workspaces != nil }, runWorkspaces, false},
		{"Freezer", func(c sandbox.Capabilities) bool { return c.Freezer != nil && c.Workspaces != nil }, runFreezer, false},
		{"Checkpointer", func(c sandbox.Capabilities) bool { return c.Checkpointer != nil && c.Workspaces != nil }, runCheckpointer, false},
		{"Images", func(c sandbox.Capabilities) bool { return c.Images != nil }, runImages, false},
		{"SandboxImages", func(c sandbox.Capabilities) bool { return c.SandboxImages != nil }, runSandboxImages, false},
		{"EgressNetwork", func(c sandbox.Capabilities) bool { return c.EgressNetwork != nil }, runEgressNetwork, false},
		{"EgressTunnel", func(c sandbox.Capabilities) bool { return c.EgressTunnel != nil }, runEgressTunnel, false},
		{"TunnelInstalls", func(c sandbox.Capabilities) bool { return c.TunnelInstalls != nil }, runTunnelInstalls, false},
	}
	for _, s := range suites {
		t.Run(s.name, func(t *testing.T) {
			if !s.alone {
				t.Parallel()
			}
			e := newEngine(t)
			if !s.declared(e.Capabilities()) {
				t.Skipf("the engine declares no %s", s.name)
			}
			s.run(t, e, image)
		})
	}
}

// runWarm: a prepared sandbox is listed as the pool's, runs exactly the
// job it is launched with (and is listed as that job's), refuses a job of another shape, and ends when it
// is discarded or removed from outside.
func runWarm(t *testing.T, e sandbox.Engine, image string) {
	w := e.Capabilities().Warm
	prepare := func(t *testing.T) sandbox.Warm {
		t.Helper()
		wm, err := w.Prepare(context.Background(), Spec(image, ""))
		if err != nil {
			t.Fatalf("Prepare: %v", err)
		}
		t.Cleanup(func() { _ = wm.Discard(context.Background()) })
		return wm
	}
	t.Run("LaunchRunsTheJob", func(t *testing.T) {
		wm := prepare(t)
		c, ok := listed(t, e, wm.ContainerID())
		if !ok || c.Kind != sandbox.KindPool {
			t.Fatalf("prepared sandbox listed %v as %+v, want kind %s", ok, c, sandbox.KindPool)
		}
		out := newBuffer()
		h, err := wm.Launch(context.Background(), Spec(image, "echo warm; echo err >&2; exit 5"), out)
		if err != nil {
			t.Fatalf("Launch: %v", err)
		}
		t.Cleanup(func() { _ = h.Destroy(context.Background()) })
		st := waitDone(t, h, "launched job")
		if st.ExitCode != 5 || !cleanEnd(st) || out.Stdout() != "warm\n" || out.Stderr() != "err\n" {
			t.Fatalf("launched job: %s, stdout %q, stderr %q; want exit 5, warm and err", describe(st), out.Stdout(), out.Stderr())
		}
	})
	t.Run("ClaimedIsListedAsTheJobs", func(t *testing.T) {
		// A warm sandbox a job took is that job's: listed with its id and
		// kind, so a sweep treats it as the job's container once the job
		// is over (not as the pool's, which its owner manages).
		wm := prepare(t)
		spec := Spec(image, "sleep 300")
		h, err := wm.Launch(context.Background(), spec, newBuffer())
		if err != nil {
			t.Fatalf("Launch: %v", err)
		}
		t.Cleanup(func() { _ = h.Destroy(context.Background()) })
		var c sandbox.Container
		deadline := time.Now().Add(time.Minute) // how soon is the bench's business
		for {
			var ok bool
			if c, ok = listed(t, e, wm.ContainerID()); ok && c.JobID == spec.JobID && c.Kind == spec.Kind {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("claimed sandbox listed as %+v (found %v), want job %s kind %s", c, ok, spec.JobID, spec.Kind)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	t.Run("AnotherShapeRefused", func(t *testing.T) {
		wm := prepare(t)
		other := Spec(image, "exit 0")
		other.WorkDir = "/elsewhere"
		if h, err := wm.Launch(context.Background(), other, newBuffer()); err == nil {
			_ = h.Destroy(context.Background())
			t.Fatal("Launch of a job of another shape succeeded")
		}
	})
	t.Run("DiscardEndsIt", func(t *testing.T) {
		wm := prepare(t)
		if err := wm.Discard(context.Background()); err != nil {
			t.Fatalf("Discard: %v", err)
		}
		waitClosed(t, wm.Ended(), "Ended after Discard")
		if _, ok := listed(t, e, wm.ContainerID()); ok {
			t.Fatal("a discarded warm sandbox is still listed")
		}
		if err := wm.Discard(context.Background()); err != nil {
			t.Fatalf("second Discard: %v", err)
		}
	})
	t.Run("RemovedFromOutside", func(t *testing.T) {
		wm := prepare(t)
		if err := e.Remove(context.Background(), wm.ContainerID()); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		waitClosed(t, wm.Ended(), "Ended after an outside removal")
	})
}

// runVolumes: a volume is made with its labels, found by a label (and a
// label's value), and removed; removing it again is no error.
func runVolumes(t *testing.T, e sandbox.Engine, _ string) {
	v := e.Capabilities().Volumes
	ctx := context.Background()
	name, key := "sandboxer-contract-"+randomHex(6), "dev.sandboxer.contract"
	if err := v.CreateVolume(ctx, name, map[string]string{key: "yes"}); err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	t.Cleanup(func() { _ = v.RemoveVolume(context.Background(), name) })
	names := func(label string) []string {
		t.Helper()
		vols, err := v.ListVolumes(ctx, label)
		if err != nil {
			t.Fatalf("ListVolumes(%s): %v", label, err)
		}
		var out []string
		for _, vol := range vols {
			if vol.Name == name && vol.Labels[key] != "yes" {
				t.Fatalf("volume %s listed with labels %v, want %s=yes", name, vol.Labels, key)
			}
			out = append(out, vol.Name)
		}
		return out
	}
	if got := names(key); !slices.Contains(got, name) {
		t.Fatalf("ListVolumes(%s) = %v, want %s in it", key, got, name)
	}
	if got := names(key + "=yes"); !slices.Contains(got, name) {
		t.Fatalf("ListVolumes(%s=yes) = %v, want %s in it", key, got, name)
	}
	if got := names(key + "=no"); slices.Contains(got, name) {
		t.Fatalf("ListVolumes(%s=no) = %v, want %s left out", key, got, name)
	}
	if _, err := v.VolumeSizes(ctx); err != nil {
		t.Fatalf("VolumeSizes: %v", err)
	}
	if err := v.RemoveVolume(ctx, name); err != nil {
		t.Fatalf("RemoveVolume: %v", err)
	}
	if got := names(key); slices.Contains(got, name) {
		t.Fatalf("removed volume %s still listed", name)
	}
	if err := v.RemoveVolume(ctx, name); err != nil {
		t.Fatalf("RemoveVolume of a removed volume: %v, want none", err)
	}
}

// runProcesses: a running sandbox's job is among its processes; killing it
// by its pid ends the job; a pid that is not there is ErrNoSuchProcess, and
// a signal outside the list is refused.
func runProcesses(t *testing.T, e sandbox.Engine, image string) {
	p := e.Capabilities().Processes
	ctx := context.Background()
	h := start(t, e, Spec(image, "sleep 61"), newBuffer())
	var job sandbox.Process
	waitFor(t, "the job among the processes", func() bool {
		ps, err := p.Processes(ctx, h.ContainerID())
		if err != nil {
			t.Fatalf("Processes: %v", err)
		}
		i := slices.IndexFunc(ps, func(p sandbox.Process) bool { return strings.Contains(p.Command, "sleep 61") })
		if i < 0 {
			return false
		}
		job = ps[i]
		return true
	})
	if job.PID < 1 {
		t.Fatalf("the job's process has pid %d", job.PID)
	}
	if err := p.KillProcess(ctx, h.ContainerID(), 99999, "TERM"); !errors.Is(err, sandbox.ErrNoSuchProcess) {
		t.Fatalf("KillProcess of pid 99999: %v, want ErrNoSuchProcess", err)
	}
	if err := p.KillProcess(ctx, h.ContainerID(), job.PID, "BOGUS"); err == nil || errors.Is(err, sandbox.ErrNoSuchProcess) {
		t.Fatalf("KillProcess with signal BOGUS: %v, want it refused", err)
	}
	if err := p.KillProcess(ctx, h.ContainerID(), job.PID, "KILL"); err != nil {
		t.Fatalf("KillProcess(%d, KILL): %v", job.PID, err)
	}
	if st := waitDone(t, h, "the killed job"); st.ExitCode == 0 {
		t.Fatalf("the killed job ended %s, want a non-zero exit", describe(st))
	}
}

// runWorkspaces: a workspace's container runs jobs and plain commands
// whose files stay in its volume across jobs and a stop; its files can be
// copied out; removing it removes it, and removing it again is no error.
func runWorkspaces(t *testing.T, e sandbox.Engine, image string) {
	w := e.Capabilities().Workspaces
	ctx := context.Background()
	refs := startWorkspace(t, w, image)
	id := refs.ContainerID
	if running, err := w.WorkspaceRunning(ctx, id); err != nil || !running {
		t.Fatalf("WorkspaceRunning after start: %v, %v", running, err)
	}
	job := func(cmd string) (sandbox.ExitStatus, *sandbox.Buffer) {
		t.Helper()
		out := newBuffer()
		h, err := w.StartIn(ctx, id, Spec(image, cmd), out)
		if err != nil {
			t.Fatalf("StartIn(%q): %v", cmd, err)
		}
		return waitDone(t, h, cmd), out
	}
	if st, out := job("echo kept > /workspace/f; echo in; echo err >&2; exit 3"); st.ExitCode != 3 || out.Stdout() != "in\n" || out.Stderr() != "err\n" {
		t.Fatalf("a workspace job: %s, stdout %q, stderr %q; want exit 3, in and err", describe(st), out.Stdout(), out.Stderr())
	}
	if st, out := job("cat /workspace/f"); st.ExitCode != 0 || out.Stdout() != "kept\n" {
		t.Fatalf("the next job reads %q (%s), want the first job's file", out.Stdout(), describe(st))
	}
	exec := func(cmd ...string) (int, string) {
		t.Helper()
		var stdout strings.Builder
		code, err := w.Exec(ctx, id, sandbox.ExecOptions{Cmd: cmd, Stdout: &stdout})
		if err != nil {
			t.Fatalf("Exec(%q): %v", cmd, err)
		}
		return code, stdout.String()
	}
	if code, out := exec("bash", "-c", "cat /workspace/f; exit 4"); code != 4 || out != "kept\n" {
		t.Fatalf("Exec: exit %d, stdout %q; want 4 and the file", code, out)
	}
	if err := w.StopWorkspace(ctx, id); err != nil {
		t.Fatalf("StopWorkspace: %v", err)
	}
	if running, err := w.WorkspaceRunning(ctx, id); err != nil || running {
		t.Fatalf("WorkspaceRunning after stop: %v, %v", running, err)
	}
	if err := w.StartWorkspace(ctx, id); err != nil {
		t.Fatalf("StartWorkspace after stop: %v", err)
	}
	if code, out := exec("cat", "/workspace/f"); code != 0 || out != "kept\n" {
		t.Fatalf("after a stop and a start: exit %d, %q; want the file kept", code, out)
	}
	rc, err := w.CopyFrom(ctx, id, "/workspace/f")
	if err != nil {
		t.Fatalf("CopyFrom: %v", err)
	}
	files := readTar(t, rc)
	if files["f"] != "kept\n" {
		t.Fatalf("CopyFrom /workspace/f gave %v, want f with its content", files)
	}
	if err := w.RemoveWorkspace(ctx, refs); err != nil {
		t.Fatalf("RemoveWorkspace: %v", err)
	}
	if _, err := w.WorkspaceRunning(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("WorkspaceRunning after removal: %v, want ErrNotFound", err)
	}
	if err := w.RemoveWorkspace(ctx, refs); err != nil {
		t.Fatalf("second RemoveWorkspace: %v, want none", err)
	}
}

// startWorkspace creates and starts a workspace of image, removed when the
// test ends.
func startWorkspace(t *testing.T, w sandbox.WorkspaceRuntime, image string) sandbox.WorkspaceRefs {
	t.Helper()
	refs := createWorkspace(t, w, image, "")
	if err := w.StartWorkspace(context.Background(), refs.ContainerID); err != nil {
		t.Fatalf("StartWorkspace: %v", err)
	}
	return refs
}

// createWorkspace makes (not starts) a workspace on an OCI runtime ("" =
// the engine's default), removed at the test's end.
func createWorkspace(t *testing.T, w sandbox.WorkspaceRuntime, image, runtime string) sandbox.WorkspaceRefs {
	t.Helper()
	limits := Spec(image, "").Limits
	if runtime != "" {
		// gVisor's own threads count against the pids limit, and a restored
		// sandbox makes more of them (at 64, its execs fail).
		limits.Pids = 128
	}
	refs, err := w.CreateWorkspace(context.Background(), sandbox.WorkspaceSpec{Name: "contract-" + randomHex(4), Image: image, Runtime: runtime, Limits: limits})
	if err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	t.Cleanup(func() { _ = w.RemoveWorkspace(context.Background(), refs) })
	return refs
}

// runCheckpointer: a checkpoint stops the workspace with its job held, and
// a restore lets the job go on where it was (its output not repeated); an
// image restored into another workspace made the same way is a copy whose
// job goes on there, with its output so far, while the source runs on. A
// workspace started afresh instead ends the held job. Images are the
// owner's only (0700, 0600).
func runCheckpointer(t *testing.T, e sandbox.Engine, image string) {
	w, cp := e.Capabilities().Workspaces, e.Capabilities().Checkpointer
	ctx := context.Background()
	runtime, why := "", []string{}
	for _, rt := range []string{"", "runsc"} {
		if r := cp.CheckpointRefusal(ctx, rt); r != "" {
			why = append(why, r)
			continue
		}
		runtime, why = rt, nil
		break
	}
	if why != nil {
		t.Skipf("no runtime of this engine can be checkpointed: %s", strings.Join(why, "; "))
	}
	refs := createWorkspace(t, w, image, runtime)
	id := refs.ContainerID
	if err := w.StartWorkspace(ctx, id); err != nil {
		t.Fatalf("StartWorkspace: %v", err)
	}
	out := newBuffer()
	h, err := w.StartIn(ctx, id, Spec(image, "echo before; sleep 2; echo after; sleep 60"), out)
	if err != nil {
		t.Fatalf("StartIn: %v", err)
	}
	waitFor(t, "the job's first line", func() bool { return out.Stdout() == "before\n" })
	dir := filepath.Join(t.TempDir(), "image")
	if err := cp.CheckpointWorkspace(ctx, id, dir, false); err != nil {
		t.Fatalf("CheckpointWorkspace: %v", err)
	}
	if running, err := w.WorkspaceRunning(ctx, id); err != nil || running {
		t.Fatalf("WorkspaceRunning after a checkpoint: %v, %v; want stopped", running, err)
	}
	checkOwnerOnly(t, dir)
	time.Sleep(2500 * time.Millisecond)
	select {
	case <-h.Done():
		t.Fatalf("the job of a checkpointed workspace ended: %+v", h.Status())
	default:
	}
	if got := out.Stdout(); got != "before\n" {
		t.Fatalf("a checkpointed job went on: %q", got)
	}
	if err := cp.RestoreWorkspace(ctx, id, dir); err != nil {
		t.Fatalf("RestoreWorkspace: %v", err)
	}
	waitFor(t, "the job going on after the restore", func() bool { return out.Stdout() == "before\nafter\n" })
	var stderr strings.Builder
	if code, err := w.Exec(ctx, id, sandbox.ExecOptions{Cmd: []string{"true"}, Stderr: &stderr, Stdout: &stderr}); err != nil || code != 0 {
		t.Fatalf("an exec after the restore: %d, %v (%s)", code, err, stderr.String())
	}

	// A copy: the source runs on; the copy's job has the source's output
	// and goes on in the copy.
	out2 := newBuffer()
	h2, err := w.StartIn(ctx, id, Spec(image, "echo one; sleep 1; echo two; sleep 60"), out2)
	if err != nil {
		t.Fatalf("StartIn: %v", err)
	}
	waitFor(t, "the second job's first line", func() bool { return out2.Stdout() == "one\n" })
	forkDir := filepath.Join(t.TempDir(), "fork")
	if err := cp.CheckpointWorkspace(ctx, id, forkDir, true); err != nil {
		t.Fatalf("CheckpointWorkspace leaving it running: %v", err)
	}
	if running, err := w.WorkspaceRunning(ctx, id); err != nil || !running {
		t.Fatalf("WorkspaceRunning after a checkpoint that leaves it running: %v, %v", running, err)
	}
	copyRefs := createWorkspace(t, w, image, runtime)
	if err := cp.RestoreWorkspace(ctx, copyRefs.ContainerID, forkDir); err != nil {
		t.Fatalf("RestoreWorkspace into a copy: %v", err)
	}
	_, key, _ := strings.Cut(h2.ContainerID(), "/")
	copied := newBuffer()
	hc, err := e.Adopt(ctx, copyRefs.ContainerID+"/"+key, 0, 0, copied)
	if err != nil {
		t.Fatalf("Adopt the copy's job: %v", err)
	}
	waitFor(t, "the copy's job going on", func() bool { return copied.Stdout() == "one\ntwo\n" })
	waitFor(t, "the source's job going on", func() bool { return out2.Stdout() == "one\ntwo\n" })
	if err := hc.Signal(ctx, "KILL"); err != nil {
		t.Fatalf("kill the copy's job: %v", err)
	}
	waitDone(t, hc, "the copy's killed job")
	select {
	case <-h2.Done():
		t.Fatal("killing the copy's job ended the source's")
	default:
	}

	// Started afresh, not restored: the held jobs end.
	if err := cp.CheckpointWorkspace(ctx, id, dir, false); err != nil {
		t.Fatalf("CheckpointWorkspace again: %v", err)
	}
	if err := w.StartWorkspace(ctx, id); err != nil {
		t.Fatalf("StartWorkspace after a checkpoint: %v", err)
	}
	waitDone(t, h, "a held job of a workspace started afresh")
	waitDone(t, h2, "a held job of a workspace started afresh")
	if err := cp.RestoreWorkspace(ctx, id, filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a restore from no image succeeded")
	}
}

// checkOwnerOnly fails unless dir is 0700 and holds files, each 0600.
func checkOwnerOnly(t *testing.T, dir string) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("the checkpoint's image: %v", err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("the image's directory is %v, want 0700", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("the image's directory holds %d files (%v)", len(entries), err)
	}
	for _, en := range entries {
		info, err := en.Info()
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("image file %s: %v, %v; want 0600", en.Name(), info.Mode().Perm(), err)
		}
	}
}

// runFreezer: a frozen workspace's job makes no progress and nothing new
// runs in it; thawed, the job goes on where it stopped. Both are idempotent.
func runFreezer(t *testing.T, e sandbox.Engine, image string) {
	w, f := e.Capabilities().Workspaces, e.Capabilities().Freezer
	ctx := context.Background()
	refs := startWorkspace(t, w, image)
	id := refs.ContainerID
	out := newBuffer()
	h, err := w.StartIn(ctx, id, Spec(image, "echo before; sleep 0.3; echo after; sleep 30"), out)
	if err != nil {
		t.Fatalf("StartIn: %v", err)
	}
	waitFor(t, "the job's first line", func() bool { return out.Stdout() == "before\n" })
	if err := f.FreezeWorkspace(ctx, id); err != nil {
		t.Fatalf("FreezeWorkspace: %v", err)
	}
	if err := f.FreezeWorkspace(ctx, id); err != nil {
		t.Fatalf("a second FreezeWorkspace: %v, want none", err)
	}
	if frozen, err := f.WorkspaceFrozen(ctx, id); err != nil || !frozen {
		t.Fatalf("WorkspaceFrozen after the freeze: %v, %v", frozen, err)
	}
	time.Sleep(time.Second)
	if got := out.Stdout(); got != "before\n" {
		t.Fatalf("a frozen job went on: %q", got)
	}
	if _, err := w.Exec(ctx, id, sandbox.ExecOptions{Cmd: []string{"true"}}); err == nil {
		t.Fatal("an exec in a frozen workspace ran")
	}
	if err := f.ThawWorkspace(ctx, id); err != nil {
		t.Fatalf("ThawWorkspace: %v", err)
	}
	if err := f.ThawWorkspace(ctx, id); err != nil {
		t.Fatalf("a second ThawWorkspace: %v, want none", err)
	}
	if frozen, err := f.WorkspaceFrozen(ctx, id); err != nil || frozen {
		t.Fatalf("WorkspaceFrozen after the thaw: %v, %v", frozen, err)
	}
	waitFor(t, "the job going on after the thaw", func() bool { return out.Stdout() == "before\nafter\n" })
	if code, err := w.Exec(ctx, id, sandbox.ExecOptions{Cmd: []string{"true"}}); err != nil || code != 0 {
		t.Fatalf("an exec after the thaw: %d, %v", code, err)
	}
	if err := f.FreezeWorkspace(ctx, id); err != nil {
		t.Fatalf("FreezeWorkspace again: %v", err)
	}
	// A frozen workspace still stops and is removed (its jobs end).
	if err := w.StopWorkspace(ctx, id); err != nil {
		t.Fatalf("StopWorkspace of a frozen workspace: %v", err)
	}
	waitDone(t, h, "the job of a stopped workspace")
	if err := w.RemoveWorkspace(ctx, refs); err != nil {
		t.Fatalf("RemoveWorkspace: %v", err)
	}
	if _, err := f.WorkspaceFrozen(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("WorkspaceFrozen after removal: %v, want ErrNotFound", err)
	}
}

// readTar reads a tar stream's regular files, by base name.
func readTar(t *testing.T, rc io.ReadCloser) map[string]string {
	t.Helper()
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("reading the tar: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[path.Base(h.Name)] = string(b)
		}
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(endWithin):
		t.Fatalf("%s: not within %s", what, endWithin)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

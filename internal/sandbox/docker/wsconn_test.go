package docker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
)

// newWorkspace makes and starts a workspace container, removed at the end.
func newWorkspace(t *testing.T, rt *docker.Runtime) string {
	t.Helper()
	ctx := context.Background()
	refs, err := rt.CreateWorkspace(ctx, sandbox.WorkspaceSpec{Name: "wsconn", Image: images.Tag("base"),
		Limits: sandbox.Limits{MemoryBytes: 256 << 20, NanoCPUs: 1e9, Pids: 128, TmpBytes: 16 << 20, LogBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.RemoveWorkspace(context.Background(), refs) })
	if err := rt.StartWorkspace(ctx, refs.ContainerID); err != nil {
		t.Fatal(err)
	}
	return refs.ContainerID
}

// waitDone waits for a handle's end, failing after within (far above the promise).
func waitDone(t *testing.T, h sandbox.Handle, within time.Duration) sandbox.ExitStatus {
	t.Helper()
	select {
	case <-h.Done():
		return h.Status()
	case <-time.After(within):
		t.Fatalf("job in workspace did not end within %v", within)
		return sandbox.ExitStatus{}
	}
}

// Jobs in a workspace run as channels of one stream to its supervisor
// daemon: several at once, each with its own exit status, stdin and output.
func TestWorkspaceDaemonJobs(t *testing.T) {
	rt, _ := newTestRuntime(t)
	id := newWorkspace(t, rt)
	ctx := context.Background()

	spec := testSpec("read line; echo got:$line; echo oops >&2; exit 3")
	spec.OpenStdin = true
	out := newBuffer()
	h, err := rt.StartIn(ctx, id, spec, out)
	if err != nil {
		t.Fatal(err)
	}
	if cid, ok := sandbox.WorkspaceJob(h.ContainerID()); !ok || cid != id {
		t.Fatalf("ContainerID %q does not name workspace container %s and a job", h.ContainerID(), id)
	}
	other := testSpec("echo second")
	other.JobID += "-2"
	out2 := newBuffer()
	h2, err := rt.StartIn(ctx, id, other, out2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteStdin(ctx, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	st := waitDone(t, h, time.Minute)
	if st.ExitCode != 3 || out.Stdout() != "got:hello\n" || out.Stderr() != "oops\n" {
		t.Fatalf("first job: %+v stdout %q stderr %q", st, out.Stdout(), out.Stderr())
	}
	if st := waitDone(t, h2, time.Minute); st.ExitCode != 0 || out2.Stdout() != "second\n" {
		t.Fatalf("second job: %+v stdout %q", st, out2.Stdout())
	}
}

// A job outlives the runtime that started it: another runtime (a restarted
// server) re-attaches it by its ContainerID and gets the output it lacks,
// then can kill it.
func TestWorkspaceDaemonJobReattach(t *testing.T) {
	rt, instance := newTestRuntime(t)
	id := newWorkspace(t, rt)
	ctx := context.Background()

	first := newBuffer()
	h, err := rt.StartIn(ctx, id, testSpec("for i in 1 2 3 4 5 6; do echo line$i; sleep 0.5; done; exit 4"), first)
	if err != nil {
		t.Fatal(err)
	}
	sleeper, err := rt.StartIn(ctx, id, testSpec("sleep 1000"), newBuffer())
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(first.Stdout(), "line2\n") {
		select {
		case <-h.Done():
			t.Fatalf("job ended before the re-attach: %q", first.Stdout())
		case <-time.After(50 * time.Millisecond):
		}
	}
	had := first.Stdout()
	rt.Close() // the server goes; the jobs stay

	rt2, err := docker.New(instance, testProduct())
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	rest := newBuffer()
	h2, err := rt2.Adopt(ctx, h.ContainerID(), int64(len(had)), 0, rest)
	if err != nil {
		t.Fatal(err)
	}
	st := waitDone(t, h2, time.Minute)
	if got := had + rest.Stdout(); st.ExitCode != 4 || got != "line1\nline2\nline3\nline4\nline5\nline6\n" {
		t.Fatalf("re-attached job: %+v, output before %q + after %q", st, had, rest.Stdout())
	}
	s2, err := rt2.Adopt(ctx, sleeper.ContainerID(), 0, 0, newBuffer())
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if st := waitDone(t, s2, time.Minute); st.ExitCode != 128+9 {
		t.Fatalf("killed re-attached job: %+v", st)
	}
	if _, err := rt2.Adopt(ctx, id+"/no-such-job", 0, 0, newBuffer()); err != sandbox.ErrNotFound {
		t.Fatalf("Adopt of an unknown job: %v, want ErrNotFound", err)
	}
}

// When the stream's exec dies while the workspace runs, its jobs move to a
// new stream and lose no output.
func TestWorkspaceDaemonStreamResumes(t *testing.T) {
	rt, _ := newTestRuntime(t)
	id := newWorkspace(t, rt)
	ctx := context.Background()
	out := newBuffer()
	h, err := rt.StartIn(ctx, id, testSpec("for i in 1 2 3 4 5 6; do echo line$i; sleep 0.5; done; exit 5"), out)
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out.Stdout(), "line2\n") {
		select {
		case <-h.Done():
			t.Fatalf("job ended before the stream was cut: %q", out.Stdout())
		case <-time.After(50 * time.Millisecond):
		}
	}
	var killed strings.Builder
	code, err := rt.Exec(ctx, id, sandbox.ExecOptions{User: "0:0", Stdout: &killed, Env: []string{"PAT=sandboxer-supervisor connect"},
		Cmd: []string{"bash", "-c", `for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in *"$PAT"*) kill -9 ${p#/proc/} && echo killed;; esac; done`}})
	if err != nil || code != 0 || !strings.Contains(killed.String(), "killed") {
		t.Fatalf("killing the stream's exec: code %d, %v, %q", code, err, killed.String())
	}
	st := waitDone(t, h, time.Minute)
	if st.ExitCode != 5 || out.Stdout() != "line1\nline2\nline3\nline4\nline5\nline6\n" {
		t.Fatalf("job across a new stream: %+v, output %q", st, out.Stdout())
	}
	if h2, err := rt.StartIn(ctx, id, testSpec("echo next"), newBuffer()); err != nil {
		t.Fatal(err)
	} else if st := waitDone(t, h2, time.Minute); st.ExitCode != 0 {
		t.Fatalf("next job: %+v", st)
	}
}

// A workspace container made before the daemon (its main process idles)
// still runs jobs, as one exec of the supervisor each.
func TestWorkspaceWithoutDaemonRunsExecs(t *testing.T) {
	rt, _ := newTestRuntime(t)
	ctx := context.Background()
	init := true
	created, err := rt.Client().ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: images.Tag("base"), Cmd: []string{"sleep", "infinity"}, User: "1000:1000", WorkingDir: "/workspace"},
		HostConfig: &container.HostConfig{NetworkMode: "none", Init: &init, CapDrop: []string{"ALL"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Remove(context.Background(), created.ID) })
	if err := rt.StartWorkspace(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	out := newBuffer()
	h, err := rt.StartIn(ctx, created.ID, testSpec("echo old; exit 2"), out)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sandbox.WorkspaceJob(h.ContainerID()); ok {
		t.Errorf("an exec's job has ContainerID %q, which names a daemon's job", h.ContainerID())
	}
	if st := waitDone(t, h, time.Minute); st.ExitCode != 2 || out.Stdout() != "old\n" {
		t.Fatalf("exec job: %+v, stdout %q", st, out.Stdout())
	}
}

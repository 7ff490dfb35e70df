package job

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/uuid"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

// These tests drive the manager directly against the local Docker engine, one
// layer below the MCP end-to-end tests in test/e2e.

// waitLong bounds every wait for a job that should end on its own.
const waitLong = 30 * time.Second

// testEnv is one manager on its own state directory, store and runtime
// instance, so tests run in parallel and each sweeps only its own containers.
type testEnv struct {
	t        *testing.T
	dir      string // state directory: db and jobs/<id>
	instance string
	image    string
	rt       *docker.Runtime
	st       *store.Store
	pol      *policy.Policy
	m        *Manager
}

// newEnv builds a manager whose policy is policy.Default() changed by tune.
// Cleanup shuts it down and fails the test if any container of its instance
// is left.
func newEnv(t *testing.T, tune func(*policy.Policy)) *testEnv {
	t.Helper()
	testutil.RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	image := images.Tag("base")
	if image == "" {
		t.Fatal("images.Tag(\"base\") is empty")
	}
	dir := t.TempDir()
	instance := "jobtest-" + uuid.NewString()[:13]
	rt, err := docker.New(instance)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := rt.ImageExists(ctx, image); err != nil || !ok {
		rt.Close()
		t.Fatalf("image %s not available (err %v): run `make images`", image, err)
	}
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		rt.Close()
		t.Fatal(err)
	}
	pol := policy.Default()
	if tune != nil {
		tune(pol)
	}
	m, err := New(rt, st, pol, dir, zerolog.Nop())
	if err != nil {
		st.Close()
		rt.Close()
		t.Fatal(err)
	}
	e := &testEnv{t: t, dir: dir, instance: instance, image: image, rt: rt, st: st, pol: pol, m: m}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		_ = rt.Flush(ctx) // removals of ended sandboxes run after their results
		left, err := rt.List(ctx)
		if err != nil {
			t.Errorf("list containers after Shutdown: %v", err)
		}
		for _, c := range left {
			t.Errorf("container %.12s (job %s, running %v) left after Shutdown", c.ID, c.JobID, c.Running)
			_ = rt.Remove(ctx, c.ID)
		}
		st.Close()
		rt.Close()
	})
	return e
}

// req is a command request with the policy's default limits; opts adjust it.
func (e *testEnv) req(cmd string, opts ...func(*Request)) Request {
	e.t.Helper()
	lim, err := e.pol.Resolve(policy.Request{})
	if err != nil {
		e.t.Fatal(err)
	}
	r := Request{
		Kind: KindCommand, Command: cmd, Cmd: []string{"bash", "-c", cmd},
		Image: e.image, Cwd: "/workspace",
		Limits: lim, Network: policy.NetworkNone,
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func (e *testEnv) submit(cmd string, opts ...func(*Request)) *record.Job {
	e.t.Helper()
	j, err := e.m.Submit(context.Background(), e.req(cmd, opts...))
	if err != nil {
		e.t.Fatalf("Submit(%q): %v", cmd, err)
	}
	return j
}

// wait waits for a job that must finish within waitLong.
func (e *testEnv) wait(id string) *record.Job {
	e.t.Helper()
	j, err := e.m.Wait(context.Background(), id, waitLong)
	if err != nil {
		e.t.Fatalf("Wait(%s): %v", id, err)
	}
	if !record.Finished(j.Status) {
		e.t.Fatalf("job %s still %s after %s", id, j.Status, waitLong)
	}
	return j
}

func (e *testEnv) get(id string) *record.Job {
	e.t.Helper()
	j, err := e.m.Get(context.Background(), id)
	if err != nil {
		e.t.Fatalf("Get(%s): %v", id, err)
	}
	return j
}

// readAll reads a whole stream from byte 0 without moving the read cursor.
func (e *testEnv) readAll(id string, sel output.Selector) string {
	e.t.Helper()
	zero := int64(0)
	r, err := e.m.Read(context.Background(), id, ReadRequest{Stream: sel, Cursor: &zero, MaxBytes: 1 << 20, Peek: true})
	if err != nil {
		e.t.Fatalf("Read(%s, %v): %v", id, sel, err)
	}
	return string(r.Data)
}

func (e *testEnv) jobDir(id string) string { return filepath.Join(e.dir, "jobs", id) }

// bareContainer starts a sandbox labelled as instance's, for job jobID, as a
// crashed server would have left it: nothing of this process watches,
// attaches to or removes it.
func (e *testEnv) bareContainer(jobID, instance, cmd string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, err := docker.New(instance)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rt.Close()
	limits, _ := e.pol.Resolve(policy.Request{})
	id, err := rt.StartOrphan(ctx, sandbox.Spec{JobID: jobID, Kind: KindCommand, Image: e.image,
		Cmd: []string{"bash", "-c", cmd}, WorkDir: "/workspace", Network: "none", EngineLog: "local",
		Limits: SandboxLimits(limits, 1<<20)})
	if err != nil {
		e.t.Fatalf("start orphan: %v", err)
	}
	e.t.Cleanup(func() { // normally gone already; never leak one
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.rt.Remove(ctx, id)
	})
	return id
}

// containerState is the engine's state of a container; ok is false when it is gone.
func (e *testEnv) containerState(id string) (st *container.State, ok bool) {
	e.t.Helper()
	_ = e.rt.Flush(context.Background()) // removals of ended sandboxes run after their results
	info, err := e.rt.Client().ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, false
		}
		e.t.Fatalf("inspect %s: %v", id, err)
	}
	return info.Container.State, true
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// describe is a one-line summary of a record for failure messages.
func describe(j *record.Job) string {
	code := "<nil>"
	if j.ExitCode != nil {
		code = strconv.Itoa(*j.ExitCode)
	}
	return fmt.Sprintf("%s/%s exit=%s signal=%q error=%q container=%.12s", j.Status, j.Reason, code, j.Signal, j.Error, j.ContainerID)
}

// inlineStdout is the stdout part of InlineOutput.
func (e *testEnv) inlineStdout(id string, limit int) ([]byte, int64, error) {
	in, err := e.m.InlineOutput(context.Background(), id, limit)
	if err != nil {
		return nil, 0, err
	}
	return in.Stdout, in.StdoutOmitted.Len(), nil
}

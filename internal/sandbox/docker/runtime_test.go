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
	"github.com/sandboxer/sandboxer/internal/testutil"
)

func newBuffer() *sandbox.Buffer { return &sandbox.Buffer{Max: 1 << 20} }

func testSpec(cmd string) sandbox.Spec {
	return sandbox.Spec{
		JobID: "test-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", ""), Kind: "command",
		Image: images.Tag("base"), Cmd: []string{"bash", "-c", cmd}, WorkDir: "/workspace",
		Limits: sandbox.Limits{MemoryBytes: 128 << 20, NanoCPUs: 5e8, Pids: 64, OpenFiles: 256,
			FileSizeBytes: 16 << 20, TmpBytes: 16 << 20, WorkdirBytes: 16 << 20, LogBytes: 1 << 20},
	}
}

func newTestRuntime(t *testing.T) (*docker.Runtime, string) {
	t.Helper()
	testutil.RequireDocker(t)
	instance := "test-" + t.Name()
	rt, err := docker.New(instance)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs, _ := rt.List(context.Background())
		for _, c := range cs {
			_ = rt.Remove(context.Background(), c.ID)
		}
		rt.Close()
	})
	return rt, instance
}

// TestHardeningProfile inspects a sandbox: every default of the profile is set.
func TestHardeningProfile(t *testing.T) {
	rt, instance := newTestRuntime(t)
	ctx := context.Background()
	h, err := rt.Start(ctx, testSpec("sleep 30"), newBuffer())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy(ctx)
	info, err := rt.Client().ContainerInspect(ctx, h.ContainerID(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := info.Container.HostConfig
	cfg := info.Container.Config
	checks := []struct {
		what string
		ok   bool
	}{
		{"not privileged", !hc.Privileged},
		{"CapDrop ALL", len(hc.CapDrop) == 1 && hc.CapDrop[0] == "ALL" && len(hc.CapAdd) == 0},
		{"no-new-privileges", contains(hc.SecurityOpt, "no-new-privileges")},
		{"no unconfined seccomp/apparmor", !containsPrefix(hc.SecurityOpt, "seccomp=unconfined") && !containsPrefix(hc.SecurityOpt, "apparmor=unconfined")},
		{"read-only root", hc.ReadonlyRootfs},
		{"memory", hc.Memory == 128<<20},
		{"swap = memory", hc.MemorySwap == hc.Memory},
		{"cpu", hc.NanoCPUs == 5e8},
		{"pids", hc.PidsLimit != nil && *hc.PidsLimit == 64},
		{"network none", string(hc.NetworkMode) == "none"},
		{"no host mounts", len(hc.Binds) == 0 && len(hc.Mounts) == 0},
		{"no host namespaces", string(hc.PidMode) == "" && string(hc.IpcMode) == "private" && string(hc.UTSMode) == "" && string(hc.UsernsMode) == ""},
		{"private cgroup namespace", string(hc.CgroupnsMode) == "private"},
		{"init", hc.Init != nil && *hc.Init},
		{"log driver local, capped", hc.LogConfig.Type == "local" && hc.LogConfig.Config["max-size"] != ""},
		{"tmpfs /tmp and workdir", hc.Tmpfs["/tmp"] != "" && hc.Tmpfs["/workspace"] != ""},
		{"non-root user", cfg.User == "1000:1000"},
		{"labels", cfg.Labels[sandbox.LabelManaged] == "true" && cfg.Labels[sandbox.LabelInstance] == instance},
		{"core dumps off", hasUlimit(hc.Ulimits, "core", 0)},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("hardening: %s not set (HostConfig %+v)", c.what, hc)
		}
	}
	if err := h.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("handle not done after Destroy")
	}
	if err := h.Destroy(ctx); err != nil {
		t.Errorf("second Destroy not idempotent: %v", err)
	}
	if cs, _ := rt.List(ctx); len(cs) != 0 {
		t.Errorf("container left after Destroy: %v", cs)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func containsPrefix(list []string, p string) bool {
	for _, v := range list {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

func hasUlimit(us []*container.Ulimit, name string, v int64) bool {
	for _, u := range us {
		if u.Name == name && u.Soft == v && u.Hard == v {
			return true
		}
	}
	return false
}

// TestExitStatusAndStreams: exit code, separate streams, container removed after.
func TestExitStatusAndStreams(t *testing.T) {
	rt, _ := newTestRuntime(t)
	out := newBuffer()
	h, err := rt.Start(context.Background(), testSpec("echo out; echo err >&2; exit 3"), out)
	if err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	st := h.Status()
	if st.ExitCode != 3 || st.OOMKilled || st.Gone || st.Err != nil {
		t.Fatalf("status %+v", st)
	}
	if out.Stdout() != "out\n" || out.Stderr() != "err\n" {
		t.Fatalf("stdout %q stderr %q", out.Stdout(), out.Stderr())
	}
	_ = rt.Flush(context.Background()) // removal runs after the result
	if cs, _ := rt.List(context.Background()); len(cs) != 0 {
		t.Errorf("container left: %v", cs)
	}
}

// TestRemovedFromOutside: a container removed behind the server's back ends as Gone.
func TestRemovedFromOutside(t *testing.T) {
	rt, _ := newTestRuntime(t)
	h, err := rt.Start(context.Background(), testSpec("sleep 60"), newBuffer())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := docker.New("someone-else")
	defer other.Close()
	if err := other.Remove(context.Background(), h.ContainerID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("not done after outside removal")
	}
	if st := h.Status(); !st.Gone {
		t.Fatalf("want Gone, got %+v", st)
	}
}

// TestAdoptResumesOutput: a second runtime of the same instance adopts a
// container a crashed server left running and gets exactly the output not
// yet captured, and the job's end.
func TestAdoptResumesOutput(t *testing.T) {
	rt, instance := newTestRuntime(t)
	id, err := rt.StartOrphan(context.Background(), testSpec("for i in 1 2 3 4 5 6; do echo line$i; sleep 0.5; done; exit 4"))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	captured := "line1\nline2\n" // what the crashed server had stored
	rt2, err := docker.New(instance)
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	second := newBuffer()
	h2, err := rt2.Adopt(context.Background(), id, int64(len(captured)), 0, second)
	if err != nil {
		t.Fatal(err)
	}
	<-h2.Done()
	if st := h2.Status(); st.ExitCode != 4 || st.Usage.WallMS < 2500 {
		t.Fatalf("adopted status %+v", st)
	}
	all := captured + second.Stdout()
	want := "line1\nline2\nline3\nline4\nline5\nline6\n"
	if all != want {
		t.Fatalf("captured %q + resumed %q != %q", captured, second.Stdout(), want)
	}
}

package docker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
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
	rt, err := docker.New(instance, testProduct())
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
	engine, err := rt.EngineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The log driver as the engine names it (docs/engines.md): Podman's
	// k8s-file shows as json-file, and its compat inspect omits the options.
	logOK := hc.LogConfig.Type == "local" && hc.LogConfig.Config["max-size"] != ""
	if engine.Product == "Podman" {
		logOK = hc.LogConfig.Type == "json-file" || hc.LogConfig.Type == "k8s-file"
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"not privileged", !hc.Privileged},
		{"nothing added to CapDrop ALL", len(hc.CapAdd) == 0},
		{"no-new-privileges", contains(hc.SecurityOpt, "no-new-privileges")},
		{"no unconfined seccomp/apparmor", !containsPrefix(hc.SecurityOpt, "seccomp=unconfined") && !containsPrefix(hc.SecurityOpt, "apparmor=unconfined")},
		{"read-only root", hc.ReadonlyRootfs},
		{"memory", hc.Memory == 128<<20},
		{"swap = memory", hc.MemorySwap == hc.Memory},
		{"cpu", hc.NanoCPUs == 5e8},
		{"pids", hc.PidsLimit != nil && *hc.PidsLimit == 64},
		{"network none", string(hc.NetworkMode) == "none"},
		{"no host mounts", len(hc.Binds) == 0 && len(hc.Mounts) == 0},
		{"init", hc.Init != nil && *hc.Init},
		{"log driver " + hc.LogConfig.Type + ", capped", logOK},
		{"tmpfs /tmp and workdir", hc.Tmpfs["/tmp"] != "" && hc.Tmpfs["/workspace"] != ""},
		{"non-root user", cfg.User == "1000:1000"},
		{"labels", cfg.Labels[sandbox.LabelManaged] == "true" && cfg.Labels[sandbox.LabelInstance] == instance},
	}
	// What the engine reports differs between engines (Podman lists every
	// capability it drops, says "shareable" for a private IPC namespace, and
	// no cgroup namespace at all): read the truth from the kernel instead.
	if engine.Endpoint.Remote {
		t.Log("remote engine: namespaces, capabilities and rlimits are checked from inside by the e2e tests")
	} else {
		k := readKernelView(t, info.Container.State.Pid)
		checks = append(checks, []struct {
			what string
			ok   bool
		}{
			{"no capability (effective, bounding)", k.status["CapEff"] == "0000000000000000" && k.status["CapBnd"] == "0000000000000000"},
			{"no new privileges (kernel)", k.status["NoNewPrivs"] == "1"},
			{"seccomp filter", k.status["Seccomp"] == "2"},
			{"own pid, ipc, uts, net, mount namespaces", k.ownNS("pid", "ipc", "uts", "net", "mnt")},
			// Podman 4.3's Docker API keeps the host's cgroup namespace on
			// cgroup v1 whatever is asked (docs/engines.md).
			{"own cgroup namespace", k.ownNS("cgroup") || engine.Product == "Podman"},
			{"core dumps off", k.limits["Max core file size"] == "0"},
			{"open files", k.limits["Max open files"] == "256"},
		}...)
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

// kernelView is a process as the host's kernel sees it.
type kernelView struct {
	pid    int
	status map[string]string // /proc/PID/status fields
	limits map[string]string // soft limits by name, from /proc/PID/limits
}

func readKernelView(t *testing.T, pid int) kernelView {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("the engine reports no process for the sandbox (pid %d)", pid)
	}
	k := kernelView{pid: pid, status: map[string]string{}, limits: map[string]string{}}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if name, v, ok := strings.Cut(line, ":"); ok {
			k.status[name] = strings.TrimSpace(v)
		}
	}
	lim, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(lim), "\n")[1:] {
		if len(line) > 26 {
			if f := strings.Fields(line[26:]); len(f) > 0 {
				k.limits[strings.TrimSpace(line[:26])] = f[0]
			}
		}
	}
	return k
}

// ownNS: each named namespace of the process is not the test's own.
func (k kernelView) ownNS(names ...string) bool {
	for _, n := range names {
		theirs, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", k.pid, n))
		ours, err2 := os.Readlink("/proc/self/ns/" + n)
		if err1 != nil || err2 != nil || theirs == ours {
			return false
		}
	}
	return true
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
	rt2, err := docker.New(instance, testProduct())
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

// testProduct is the engine the tests run on: Podman under `make
// test-podman` (SANDBOXER_BACKEND=podman), else Docker.
func testProduct() docker.Option {
	if os.Getenv("SANDBOXER_BACKEND") == "podman" {
		return docker.WithProduct(docker.ProductPodman)
	}
	return docker.WithProduct(docker.ProductDocker)
}

// TestSandboxesRunOnThePatchedRuntime: where the engine has sandboxer-runc
// (make test's setup registers it on an engine whose runc has known
// escapes), a sandbox whose spec names no runtime runs on it, as the
// engine's record of the container says; one that names a runtime runs on
// that one. Under CI=true on the local engine the setup made, it must be
// there.
func TestSandboxesRunOnThePatchedRuntime(t *testing.T) {
	rt, _ := newTestRuntime(t)
	ctx := context.Background()
	engine, err := rt.EngineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(engine.Runtimes, docker.PatchedRuntime) {
		if os.Getenv("CI") == "true" && !engine.Endpoint.Remote && engine.Product == "Docker" && os.Getenv("DOCKER_HOST") == "" {
			t.Fatalf("CI: the engine lists no %s (runtimes %v, runc %s): scripts/runc.sh did not register it", docker.PatchedRuntime, engine.Runtimes, engine.RuncVersion)
		}
		t.Skipf("the engine has no %s (runtimes %v)", docker.PatchedRuntime, engine.Runtimes)
	}
	cases := []struct{ named, want string }{{"", docker.PatchedRuntime}, {"runc", "runc"}}
	if engine.Product == "Podman" {
		// Its Docker-compatible API ignores a container's runtime: the
		// service's own (scripts/podman.sh) is every sandbox's, and the
		// policy's runtime key is refused with backend podman.
		cases = cases[:1]
	}
	for _, c := range cases {
		spec := testSpec("sleep 30")
		spec.Runtime = c.named
		h, err := rt.Start(ctx, spec, newBuffer())
		if err != nil {
			t.Fatal(err)
		}
		info, err := rt.Client().ContainerInspect(ctx, h.ContainerID(), client.ContainerInspectOptions{})
		got := ""
		if err == nil {
			got = info.Container.HostConfig.Runtime
			if engine.Product == "Podman" {
				// Podman's Docker-compatible inspect says "oci"; its own
				// names the runtime.
				out, perr := exec.Command("podman", "inspect", "--format", "{{.OCIRuntime}}", h.ContainerID()).Output()
				got, err = strings.TrimSpace(string(out)), perr
			}
		}
		h.Destroy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("a spec naming runtime %q ran on %q, want %q", c.named, got, c.want)
		}
	}
}

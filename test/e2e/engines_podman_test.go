package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

// The server against Podman's Docker-compatible API: `make test-podman`
// starts the service (scripts/podman.sh), builds the images there through
// the same Engine API calls, and runs these with DOCKER_HOST naming it.

func requirePodman(t *testing.T) {
	t.Helper()
	if os.Getenv("SANDBOXER_TEST_PODMAN") != "1" {
		t.Skip("skipping: Podman tests run under `make test-podman` (SANDBOXER_TEST_PODMAN=1, DOCKER_HOST naming Podman's socket)")
	}
	testutil.RequireDocker(t)
}

// doctor recognises Podman and passes every check on it.
func TestPodmanDoctor(t *testing.T) {
	requirePodman(t)
	out, err := runBin(t, nil, "doctor", "--state-dir", t.TempDir())
	if err != nil || !strings.Contains(out, "Podman 4") || !strings.Contains(out, "all checks passed") {
		t.Fatalf("doctor on Podman: %v\n%s", err, out)
	}
}

func TestPodmanCore(t *testing.T) {
	requirePodman(t)
	engineCore(t)
}

func TestPodmanRestartAdoption(t *testing.T) {
	requirePodman(t)
	engineAdoption(t)
}

// Rootless Podman on cgroup v1 ignores memory, CPU and pids limits (it says
// so itself): doctor fails on it and no sandbox starts there.
func TestPodmanRootlessRefused(t *testing.T) {
	requirePodman(t)
	host := os.Getenv("SANDBOXER_PODMAN_ROOTLESS_HOST")
	if host == "" {
		t.Skip("skipping: SANDBOXER_PODMAN_ROOTLESS_HOST unset (make test-podman sets it)")
	}
	env := []string{"DOCKER_HOST=" + host}
	out, err := runBin(t, env, "doctor", "--state-dir", t.TempDir())
	if !strings.Contains(out, "cgroups                v1") && !strings.Contains(out, "limits") {
		t.Skipf("not cgroup v1: rootless is not refused there\n%s", out)
	}
	if err == nil || !strings.Contains(out, "FAIL limits") || !strings.Contains(out, "rootless on cgroup v1") {
		t.Fatalf("doctor on rootless Podman with cgroup v1 should fail on limits: %v\n%s", err, out)
	}
	s := startServer(t, env...)
	// A failed start is a job that failed to start, or a tool error: either way it says why.
	res := s.call("run_command", map[string]any{"command": "echo ran"})
	if txt := text(res); !strings.Contains(txt, "rootless on cgroup v1") || strings.Contains(txt, `"completed"`) {
		t.Fatalf("run_command on rootless Podman with cgroup v1 should be refused, naming why: %s", txt)
	}
}

// Templates on Podman: one built from a Dockerfile through Podman's
// Docker-compatible API runs its job as uid 1000 with its files; a
// workspace's snapshot starts fresh jobs with the workspace's files.
func TestPodmanTemplate(t *testing.T) {
	requirePodman(t)
	sfx := fmt.Sprint(time.Now().UnixNano() % 1_000_000)
	name, snap := "pod"+sfx, "podsnap"+sfx
	removeTemplateImages(t, name, snap)
	dir := templateDir(t, "FROM sandboxer/base:latest\nUSER root\nCOPY note.txt /opt/note.txt\nRUN echo built > /opt/built\n", map[string]string{"note.txt": "podman\n"})
	s := startServer(t, "SANDBOXER_TOOLSETS=all", policyEnv(t, fmt.Sprintf("templates:\n  %s: {context: %s}\n", name, dir)))
	r := s.ok("run_command", map[string]any{"language": name, "wait_s": 45, "command": "cat /opt/note.txt /opt/built; id -u"})
	if str(r, "stdout") != "podman\nbuilt\n1000\n" {
		t.Fatalf("a job on a template on Podman: %v", r)
	}
	ws := "pw" + sfx
	cleanupWorkspace(t, ws)
	s.ok("create_workspace", map[string]any{"name": ws})
	s.ok("write_file", map[string]any{"workspace": ws, "path": "kept.txt", "content": "kept\n"})
	s.ok("snapshot_workspace", map[string]any{"workspace": ws, "template": snap})
	if r := s.ok("run_command", map[string]any{"language": snap, "command": "cat kept.txt"}); str(r, "stdout") != "kept\n" {
		t.Fatalf("a fresh job from a snapshot on Podman: %v", r)
	}
	s.ok("delete_workspace", map[string]any{"name": ws})
}

// podmanPolicy keeps one warm bash sandbox, so the egress tests see a warm
// job take its tunnel too.
const podmanPolicy = `pool:
  size: {bash: 1, python: 0}
  max_total: 1
`

// engineSandboxes lists this server instance's containers on the engine
// DOCKER_HOST names; warm ones too when all.
func (s *server) engineSandboxes(all bool) []sandbox.Container {
	s.t.Helper()
	rt, err := docker.New((&config.Config{StateDir: s.stateDir}).Instance())
	if err != nil {
		s.t.Fatal(err)
	}
	defer rt.Close()
	return s.listOn(rt, all)
}

// Egress on Podman goes through the tunnel (its internal network has no
// gateway for the proxy): jobs fresh and warm, and workspaces, as on
// Kubernetes.
func TestPodmanEgress(t *testing.T) {
	requirePodman(t)
	egressThroughTunnel(t, func(extra string) []string { return []string{policyEnv(t, podmanPolicy+extra)} }, (*server).engineSandboxes)
}

// Secrets on Podman: the proxy behind the sandbox's tunnel swaps the
// placeholder for the value at the bound host only.
func TestPodmanSecrets(t *testing.T) {
	requirePodman(t)
	s := secretsThroughTunnel(t, podmanPolicy)
	s.waitNoneOn(s.engineSandboxes, false, 30*time.Second)
}

package e2e

import (
	"os"
	"strings"
	"testing"

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

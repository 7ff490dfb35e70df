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

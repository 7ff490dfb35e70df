package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	sbximages "github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

// TestBuildImagesAtStart: serve --build-images (what make run starts) with a
// sandbox image missing serves at once and builds it in the background. A
// job on it fails saying it is being built, never "run make images", until
// it runs; the server log says it was built. The untagged image is the
// solidity one's final layer (seconds to build again from its core). Serial:
// no other test runs while the tag is gone.
func TestBuildImagesAtStart(t *testing.T) {
	testutil.RequireDocker(t)
	tag := sbximages.Tag("solidity")
	if out, err := exec.Command("docker", "image", "inspect", tag).CombinedOutput(); err != nil {
		t.Fatalf("%s is not built (make images): %v %s", tag, err, out)
	}
	if out, err := exec.Command("docker", "image", "rm", tag).CombinedOutput(); err != nil {
		t.Fatalf("untag %s: %v %s", tag, err, out)
	}
	t.Cleanup(func() {
		// Whatever happened, the image is there again for the tests after this one.
		if exec.Command("docker", "image", "inspect", tag).Run() != nil {
			if out, err := runBin(t, nil, "images", "build"); err != nil {
				t.Errorf("images build after the test: %v\n%s", err, out)
			}
		}
	})

	s := startServerFlags(t, t.TempDir(), []string{"--build-images"})
	deadline := time.Now().Add(5 * time.Minute) // a bound, not a measurement: the build takes seconds
	building := 0
	for {
		res := s.call("run_command", map[string]any{"command": "echo ran", "language": "solidity"})
		out := text(res)
		if !res.IsError {
			if !strings.Contains(out, "ran") {
				t.Fatalf("the solidity job once its image is built: %s", out)
			}
			t.Logf("the job ran after %d answers that the image is being built", building)
			break
		}
		if !strings.Contains(out, "is being built") || strings.Contains(out, "make images") {
			t.Fatalf("a job on the image being built: %s\nstderr tail:\n%s", out, tail(s.stderr.String(), 3000))
		}
		building++
		if time.Now().After(deadline) {
			t.Fatalf("the image was not built within 5 minutes; last answer: %s\nstderr tail:\n%s", out, tail(s.stderr.String(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	langs := s.ok("list_languages", nil)
	for _, l := range langs["languages"].([]any) {
		if m := l.(map[string]any); m["name"] == "solidity" && (m["built"] != true || m["building"] == true) {
			t.Errorf("list_languages after the build: %v", m)
		}
	}
	if log := s.stderr.String(); !strings.Contains(log, "image build: built "+tag) {
		t.Errorf("the server log does not say %s was built:\n%s", tag, tail(log, 3000))
	}
}

// Package leftovers checks, after the whole suite has run, that no container
// carrying the server's label is left on the engine.
package leftovers

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

func TestNoLeftoverContainers(t *testing.T) {
	if os.Getenv("SANDBOXER_CHECK_LEFTOVERS") != "1" {
		t.Skip("run by `make test` after the suite (SANDBOXER_CHECK_LEFTOVERS=1)")
	}
	testutil.RequireDocker(t)
	rt, err := docker.New("") // no instance: every server's sandboxes
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	containers, err := rt.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, c := range containers {
		left = append(left, c.ID[:12]+" job "+c.JobID+" instance "+c.Instance)
	}
	if len(left) > 0 {
		t.Fatalf("%d sandbox containers left after the suite:\n%s", len(left), strings.Join(left, "\n"))
	}
}

// Package leftovers checks, after the whole suite has run, that no container
// carrying the server's label is left on the engine.
package leftovers

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

// TestNoLeftoverContainers fails on any sandbox container made since the suite
// began (SANDBOXER_SUITE_START, unix seconds, set by `make test`). Containers
// older than that were left by something else on this engine (a server killed
// by hand, an interrupted earlier run); they are listed, not counted, since
// this suite cannot have made them.
func TestNoLeftoverContainers(t *testing.T) {
	if os.Getenv("SANDBOXER_CHECK_LEFTOVERS") != "1" {
		t.Skip("run by `make test` after the suite (SANDBOXER_CHECK_LEFTOVERS=1)")
	}
	since, err := strconv.ParseInt(os.Getenv("SANDBOXER_SUITE_START"), 10, 64)
	if err != nil {
		t.Fatalf("SANDBOXER_SUITE_START must be the suite's start in unix seconds (make test sets it): %v", err)
	}
	testutil.RequireDocker(t)
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", sandbox.LabelManaged+"=true"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var left, earlier []string
	for _, c := range res.Items {
		line := fmt.Sprintf("%s kind %s job %q instance %s server %s, created %s, %s", c.ID[:12],
			c.Labels[sandbox.LabelKind], c.Labels[sandbox.LabelJobID], c.Labels[sandbox.LabelInstance],
			c.Labels[sandbox.LabelServer], time.Unix(c.Created, 0).UTC().Format(time.RFC3339), c.Status)
		if c.Created < since {
			earlier = append(earlier, line)
			continue
		}
		left = append(left, line)
	}
	if len(earlier) > 0 {
		t.Logf("%d sandbox containers older than this suite (not its own, not counted):\n%s", len(earlier), strings.Join(earlier, "\n"))
	}
	if len(left) > 0 {
		t.Fatalf("%d sandbox containers left after the suite:\n%s", len(left), strings.Join(left, "\n"))
	}
}

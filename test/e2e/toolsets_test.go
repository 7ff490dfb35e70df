package e2e

import (
	"context"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// --toolsets switches groups of tools off; an unknown toolset stops the server at start.
func TestToolsetsSelectTools(t *testing.T) {
	t.Parallel()
	s := startServer(t, "SANDBOXER_TOOLSETS=info")
	res, err := s.client.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "list_blocked_commands,list_commands,list_languages" {
		t.Fatalf("with toolsets=info the tools are %v, want only list_blocked_commands, list_commands and list_languages", names)
	}
	out, err := exec.Command(binPath, "serve", "--state-dir", t.TempDir(), "--toolsets", "exec,bogus").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `unknown toolset "bogus"`) {
		t.Fatalf("unknown toolset: err %v, output %s", err, out)
	}
}

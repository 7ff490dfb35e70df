package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// Granted mounts (policy key mounts): a job that names one sees the host
// directory read-only at /mnt/<name>, and cannot write it; a name that is not
// granted is a tool error naming the granted ones; a workspace created with a
// mount shows it to its jobs; the host directory is never written.
// THREATS (docs/threats.md) 56: a job cannot write to a mount.
func TestGrantedMountsAreReadOnly(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "README"), []byte("the user's project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, policyEnv(t, "mounts:\n  - {name: project, source: "+src+"}\n"))

	r := s.ok("run_command", map[string]any{"mounts": []any{"project"},
		"command": "cat /mnt/project/README; echo x > /mnt/project/new 2>/dev/null && echo WROTE; rm /mnt/project/README 2>/dev/null && echo REMOVED; grep ' /mnt/project ' /proc/self/mountinfo | grep -c ' ro,'"})
	if out := str(r, "stdout"); out != "the user's project\n1\n" {
		t.Fatalf("a job with the mount: %q (%v)", out, r)
	}
	if _, err := os.Stat(filepath.Join(src, "new")); err == nil {
		t.Fatal("a job wrote into the granted host directory")
	}
	if b, err := os.ReadFile(filepath.Join(src, "README")); err != nil || string(b) != "the user's project\n" {
		t.Fatalf("the host file changed: %q %v", b, err)
	}
	// Without mounts, nothing of the host is there.
	if out := str(s.ok("run_command", map[string]any{"command": "ls /mnt 2>&1 | wc -l"}), "stdout"); strings.TrimSpace(out) != "0" {
		t.Fatalf("a job without mounts sees /mnt: %q", out)
	}
	msg := s.toolErr("run_command", map[string]any{"command": "true", "mounts": []any{"secrets"}})
	if !strings.Contains(msg, "mounts") || !strings.Contains(msg, "project") {
		t.Fatalf("an ungranted mount: %q, want an error naming mounts and the granted names", msg)
	}
	// The schema tells the granted names.
	tools, err := s.client.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "run_command" && !strings.Contains(mustJSON(tool.InputSchema.Properties["mounts"]), `"project"`) {
			t.Fatalf("run_command's mounts schema does not name the granted mount: %s", mustJSON(tool.InputSchema.Properties["mounts"]))
		}
	}
	// A workspace created with the mount shows it to its jobs, read-only.
	s.createWS("e2e-mounted", map[string]any{"mounts": []any{"project"}})
	if out := s.wsOut("e2e-mounted", "cat /mnt/project/README; touch /mnt/project/x 2>/dev/null || echo refused"); out != "the user's project\nrefused\n" {
		t.Fatalf("a workspace job with the mount: %q", out)
	}
	if msg := s.toolErr("run_command", map[string]any{"command": "true", "workspace": "e2e-mounted", "mounts": []any{"project"}}); !strings.Contains(msg, "create_workspace") {
		t.Fatalf("mounts on a workspace job: %q", msg)
	}
}

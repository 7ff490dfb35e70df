package e2e

import (
	"slices"
	"strings"
	"testing"
)

func TestListCommands(t *testing.T) {
	t.Parallel()
	s := startServer(t, policyEnv(t, "pool:\n  enabled: false\n"))
	r := s.ok("list_commands", map[string]any{"language": "javascript"})
	cmds := r["commands"].([]any)
	if str(r, "language") != "javascript" || !slices.Contains(cmds, any("node")) || !slices.Contains(cmds, any("bash")) || r["command_count"].(float64) < 50 {
		t.Fatalf("list_commands javascript: %d commands, %v", len(cmds), r["versions"])
	}
	if v := r["versions"].(map[string]any); !strings.HasPrefix(v["node"].(string), "v") {
		t.Fatalf("node version: %v", v)
	}
	managers := map[string]map[string]any{}
	for _, p := range r["packages"].([]any) {
		m := p.(map[string]any)
		managers[str(m, "manager")] = m
	}
	if managers["apt"]["count"].(float64) < 50 || managers["npm-global"] == nil {
		t.Fatalf("packages of the javascript image: %v", r["packages"])
	}

	name := "e2e-cmds"
	s.createWS(name, nil)
	s.ok("write_file", map[string]any{"workspace": name, "path": "bin/x", "content": "#!/bin/sh\n"})
	r = s.ok("list_commands", map[string]any{"workspace": name})
	if str(r, "workspace") != name || !slices.Contains(r["commands"].([]any), any("bash")) || r["versions"].(map[string]any)["bash"] == nil {
		t.Fatalf("list_commands in a workspace: %v", r["versions"])
	}
	if msg := s.toolErr("list_commands", map[string]any{"workspace": name, "language": "python"}); !strings.Contains(msg, "does not match") {
		t.Fatalf("workspace with another language: %s", msg)
	}
	if msg := s.toolErr("list_commands", map[string]any{"language": "cobol"}); !strings.Contains(msg, "language") {
		t.Fatalf("unknown language: %s", msg)
	}
}

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

func TestFoundationBadInputCreatesNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	cases := []struct {
		name string
		args map[string]any
		want []string // every one must appear in the error text
	}{
		{"unknown language", map[string]any{"command": "echo hi", "language": "cobol"},
			[]string{"unknown language", `"cobol"`, "python"}},
		{"injected language", map[string]any{"command": "echo hi", "language": "python; rm -rf /"},
			[]string{"unknown language", `"python; rm -rf /"`}},
		{"negative timeout", map[string]any{"command": "echo hi", "timeout_s": -1},
			[]string{"timeout_s", "> 0"}},
		{"huge timeout", map[string]any{"command": "echo hi", "timeout_s": 1e12},
			[]string{"timeout_s", "ceiling", "3600"}},
		{"huge memory", map[string]any{"command": "echo hi", "memory_mb": 99999999},
			[]string{"memory_mb", "ceiling", "4096"}},
		{"NUL in command", map[string]any{"command": "echo a\u0000b"},
			[]string{"command", "NUL"}},
		{"env key with =", map[string]any{"command": "echo hi", "env": map[string]any{"A=B": "x"}},
			[]string{"env key", `"A=B"`}},
		{"empty env key", map[string]any{"command": "echo hi", "env": map[string]any{"": "x"}},
			[]string{"env key", `""`}},
		{"LD_PRELOAD", map[string]any{"command": "echo hi", "env": map[string]any{"LD_PRELOAD": "/tmp/evil.so"}},
			[]string{"LD_PRELOAD", "not allowed"}},
		{"cwd ../..", map[string]any{"command": "echo hi", "cwd": "../.."},
			[]string{"cwd", "..", "/workspace"}},
		{"cwd /proc/self/fd/7", map[string]any{"command": "echo hi", "cwd": "/proc/self/fd/7"},
			[]string{"cwd", "/proc/self/fd/7", "outside /workspace"}},
		{"cwd /etc", map[string]any{"command": "echo hi", "cwd": "/etc"},
			[]string{"cwd", "/etc", "outside /workspace"}},
		{"unknown argument", map[string]any{"command": "echo hi", "bogus": 1},
			[]string{"bogus"}},
		{"mistyped argument", map[string]any{"command": "echo hi", "timeout_s": "abc"},
			[]string{"timeout_s"}},
		{"missing command", map[string]any{"language": "bash"},
			[]string{"command"}},
	}
	for _, tc := range cases {
		msg := s.toolErr("run_command", tc.args)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q does not mention %q", tc.name, msg, w)
			}
		}
	}
	fNoContainers(t, s, "after bad requests")
	if jobs := fJobs(t, s); len(jobs) != 0 {
		t.Errorf("bad requests created %d job(s): %v", len(jobs), jobs)
	}
	// The server is still fine.
	if r := fRun(s, map[string]any{"command": "echo fine"}); str(r, "stdout") != "fine\n" {
		t.Errorf("a good request after the bad ones: want 'fine', got %v", r)
	}
}

func TestFoundationEngineUnreachable(t *testing.T) {
	t.Parallel()
	const sock = "unix:///tmp/does-not-exist.sock"
	s := startServer(t, "DOCKER_HOST="+sock)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lt, err := s.client.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list with the engine down: %v\nstderr:\n%s", err, tail(s.stderr.String(), 2000))
	}
	have := map[string]bool{}
	for _, tool := range lt.Tools {
		have[tool.Name] = true
	}
	for _, name := range []string{"run_command", "list_languages"} {
		if !have[name] {
			t.Errorf("tools/list with the engine down lacks %s; got %v", name, have)
		}
	}

	start := time.Now()
	msg := s.toolErr("run_command", map[string]any{"command": "echo hi"})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("run_command took %s to report the engine down", took)
	}
	for _, w := range []string{"unreachable", "/tmp/does-not-exist.sock", "DOCKER_HOST"} {
		if !strings.Contains(msg, w) {
			t.Errorf("engine-down error %q does not mention %q", msg, w)
		}
	}

	r := s.ok("list_languages", map[string]any{})
	if str(r, "engine") == "ok" {
		t.Errorf("list_languages says engine ok with the engine down: %v", r)
	}
}

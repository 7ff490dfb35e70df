package tools

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// egressDeps allow two hosts through the proxy; the policy's network is none.
func egressDeps() Deps {
	pol := policy.Default()
	pol.Egress.Allow = []string{"mirror.test:8080", "*.example.com"}
	return Deps{Policy: pol, Languages: lang.NewRegistry(pol.Image, nil)}
}

// The egress argument narrows the policy's egress.allow: absent keeps the
// policy's network, [] is no network, a list within the policy's is the
// job's own on the egress network, whatever the policy's network.
func TestEgressArgument(t *testing.T) {
	d := egressDeps()
	for _, c := range []struct {
		name         string
		in           []string
		network      string
		allow        []string
		errHas, also string
	}{
		{"absent", nil, policy.NetworkNone, nil, "", ""},
		{"empty", []string{}, policy.NetworkNone, nil, "", ""},
		{"within", []string{"Mirror.test:8080", "api.example.com"}, sandbox.NetworkEgress, []string{"mirror.test:8080", "api.example.com"}, "", ""},
		{"wildcard within", []string{"*.api.example.com:443"}, sandbox.NetworkEgress, []string{"*.api.example.com:443"}, "", ""},
		{"other host", []string{"mirror.test:8080", "evil.test"}, "", nil, `egress: "evil.test" is not within the policy's egress.allow`, "mirror.test:8080, *.example.com"},
		{"other port", []string{"mirror.test:22"}, "", nil, `"mirror.test:22" is not within`, ""},
		{"broader wildcard", []string{"*.com"}, "", nil, `"*.com" is not within`, ""},
		{"bad entry", []string{"http://x"}, "", nil, `egress: allowlist entry "http://x"`, ""},
	} {
		network, allow, problem := d.egressFor(c.in)
		if c.errHas != "" {
			if problem == nil || !problem.IsError || !strings.Contains(resultText(problem), c.errHas) || !strings.Contains(resultText(problem), c.also) {
				t.Errorf("%s: got %v, want an error with %q and %q", c.name, problem, c.errHas, c.also)
			}
			continue
		}
		if problem != nil || network != c.network || !reflect.DeepEqual(allow, c.allow) {
			t.Errorf("%s: got %q %v %v, want %q %v", c.name, network, allow, problem, c.network, c.allow)
		}
	}

	// With an empty egress.allow the argument is refused, naming the key.
	_, _, problem := refusalDeps().egressFor([]string{"mirror.test"})
	if problem == nil || !strings.Contains(resultText(problem), "egress.allow is empty") {
		t.Errorf("egress under a policy that allows none: %v", problem)
	}
	if _, _, problem := refusalDeps().egressFor([]string{}); problem != nil {
		t.Errorf("egress [] under a policy that allows none: %v", resultText(problem))
	}
}

// The job tools refuse egress outside the policy, and with a workspace
// (create_workspace's refusal is in the e2e tests: it needs workspaces).
func TestEgressArgumentRefusals(t *testing.T) {
	for _, c := range []struct {
		tool   string
		args   map[string]any
		errHas string
	}{
		{"run_command", map[string]any{"command": "true", "egress": []any{"evil.test"}}, `egress: "evil.test" is not within`},
		{"run_script", map[string]any{"code": "print(1)", "language": "python", "egress": []any{"evil.test"}}, `egress: "evil.test" is not within`},
		{"start_session", map[string]any{"egress": []any{"evil.test"}}, `egress: "evil.test" is not within`},
	} {
		d := egressDeps()
		res := call(t, toolByName(t, d, c.tool), c.args)
		if !res.IsError || !strings.Contains(resultText(res), c.errHas) {
			t.Errorf("%s(%v): %s", c.tool, c.args, resultText(res))
		}
	}
	if problem := noWorkspaceEgress([]string{}, "w"); problem == nil || !strings.Contains(resultText(problem), "create_workspace's egress") {
		t.Errorf("egress with a workspace: %v", problem)
	}
	if problem := noWorkspaceEgress(nil, "w"); problem != nil {
		t.Errorf("no egress with a workspace: %v", resultText(problem))
	}
}

// An empty list stays empty (not absent) through argument binding.
func TestEgressEmptyListBinds(t *testing.T) {
	tool := toolByName(t, egressDeps(), "run_command")
	var req mcp.CallToolRequest
	req.Params.Arguments = map[string]any{"command": "true", "egress": []any{}}
	var args RunCommandArgs
	if err := tool.args.bind(req, &args); err != nil {
		t.Fatal(err)
	}
	if args.Egress == nil {
		t.Fatal("egress [] bound as absent")
	}
}

package tools

import (
	"context"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

func secretsDeps() Deps {
	pol := policy.Default()
	pol.Egress.Allow = []string{"api.example.com"}
	pol.Secrets = map[string]policy.Secret{
		"API_KEY":  {Env: "X", Hosts: []string{"api.example.com"}},
		"BOB_ONLY": {Env: "Y", Hosts: []string{"api.example.com"}, Tenants: []string{"bob"}},
	}
	return Deps{Policy: pol, Languages: lang.NewRegistry(pol.Image, nil)}
}

// Without secrets in the policy the argument is not in the schema, and
// given anyway it is refused with a sentence naming the policy key.
func TestSecretsArgumentAbsentWithoutPolicySecrets(t *testing.T) {
	d := egressDeps()
	for _, name := range []string{"run_command", "run_script", "start_session", "create_workspace"} {
		tool := toolByName(t, d, name)
		if strings.Contains(string(tool.args.raw), `"secrets"`) {
			t.Errorf("%s: secrets is in the schema of a policy without secrets", name)
		}
		res := call(t, tool, map[string]any{"command": "true", "code": "1", "name": "w", "secrets": []any{"A"}})
		if !res.IsError || !strings.Contains(resultText(res), "secrets: the policy names no secrets (policy key secrets)") {
			t.Errorf("%s: %s", name, resultText(res))
		}
	}
	d = secretsDeps()
	for _, name := range []string{"run_command", "run_script", "start_session", "create_workspace"} {
		if raw := string(toolByName(t, d, name).args.raw); !strings.Contains(raw, `"secrets"`) || !strings.Contains(raw, `"API_KEY"`) {
			t.Errorf("%s: secrets missing from the schema: %s", name, raw)
		}
	}
}

func TestSecretsArgumentRefusals(t *testing.T) {
	d := secretsDeps()
	alice := tenant.With(context.Background(), tenant.Tenant{Name: "alice"})
	uses, problem := d.secretsFor(alice, []string{"API_KEY"}, nil)
	if problem != nil || len(uses) != 1 || uses[0].Name != "API_KEY" || uses[0].Placeholder != "" {
		t.Fatalf("API_KEY for alice: %v %v", uses, problem)
	}
	for _, c := range []struct {
		names []string
		env   map[string]string
		want  string
	}{
		{[]string{"NOPE"}, nil, `secrets: "NOPE" is not a secret of the policy; known: API_KEY, BOB_ONLY`},
		{[]string{"BOB_ONLY"}, nil, `secrets: BOB_ONLY is not for tenant "alice" (policy key secrets.BOB_ONLY.tenants)`},
		{[]string{"API_KEY", "API_KEY"}, nil, "secrets: API_KEY is named twice"},
		{[]string{"API_KEY"}, map[string]string{"API_KEY": "x"}, "secrets: API_KEY is also set by env"},
	} {
		_, problem := d.secretsFor(alice, c.names, c.env)
		if problem == nil || !strings.Contains(resultText(problem), c.want) {
			t.Errorf("%v: got %v, want %q", c.names, problem, c.want)
		}
	}
	bob := tenant.With(context.Background(), tenant.Tenant{Name: "bob"})
	if _, problem := d.secretsFor(bob, []string{"BOB_ONLY"}, nil); problem != nil {
		t.Errorf("BOB_ONLY for bob: %s", resultText(problem))
	}
	if problem := noWorkspaceSecrets([]string{"API_KEY"}, "w"); problem == nil || !strings.Contains(resultText(problem), "create_workspace's secrets") {
		t.Errorf("secrets with a workspace: %v", problem)
	}
	// Through the tool: the refusal reaches the agent before any job.
	res := call(t, toolByName(t, d, "run_command"), map[string]any{"command": "true", "secrets": []any{"NOPE"}})
	if !res.IsError || !strings.Contains(resultText(res), `"NOPE" is not a secret of the policy`) {
		t.Errorf("run_command: %s", resultText(res))
	}
}

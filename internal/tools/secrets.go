package tools

import (
	"context"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// maxSecretsPerJob bounds the secrets argument.
const maxSecretsPerJob = 16

// secretsParam describes the secrets argument of the tools that start jobs
// or workspaces. Without secrets in the policy it is left out of the
// schema: there is nothing to name, and the tool list's tokens are dear.
func (d Deps) secretsParam() param {
	names := d.policyOrDefault().SecretNames()
	if len(names) == 0 {
		return absentBecause("the policy names no secrets (policy key secrets)")
	}
	return oneOf(names...).checkedByHandler().describe("env vars of placeholders; values added at the proxy")
}

// secretsFor checks the secrets argument: each a secret of the policy that
// the caller's tenant may use, named once, and not also set by env. The
// placeholders are made where the job starts (internal/egress).
func (d Deps) secretsFor(ctx context.Context, names []string, env map[string]string) ([]sandbox.SecretUse, *mcp.CallToolResult) {
	if len(names) == 0 {
		return nil, nil
	}
	known := d.Policy.SecretNames()
	if len(known) == 0 {
		return nil, errorResult("secrets: the policy names no secrets (policy key secrets)")
	}
	if len(names) > maxSecretsPerJob {
		return nil, errorResult("secrets: %d names; at most %d", len(names), maxSecretsPerJob)
	}
	owner := tenant.Owner(ctx)
	uses := make([]sandbox.SecretUse, 0, len(names))
	for i, n := range names {
		s, ok := d.Policy.Secrets[n]
		switch {
		case !ok:
			return nil, errorResult("secrets: %q is not a secret of the policy; known: %s", truncate(n, 64), strings.Join(known, ", "))
		case !s.MayUse(owner):
			return nil, errorResult("secrets: %s is not for tenant %q (policy key secrets.%s.tenants)", n, owner, n)
		case slices.Contains(names[:i], n):
			return nil, errorResult("secrets: %s is named twice", n)
		}
		if _, ok := env[n]; ok {
			return nil, errorResult("secrets: %s is also set by env: leave it out of env (the secret's placeholder is the variable's value)", n)
		}
		uses = append(uses, sandbox.SecretUse{Name: n})
	}
	return uses, nil
}

// noWorkspaceSecrets refuses secrets for a job in a workspace: it has the
// workspace's.
func noWorkspaceSecrets(names []string, workspace string) *mcp.CallToolResult {
	if len(names) > 0 && workspace != "" {
		return errorResult("secrets: a job in workspace %q uses the secrets the workspace was created with (create_workspace's secrets); leave secrets out", workspace)
	}
	return nil
}

// secretNames names uses, for records and results.
func secretNames(uses []sandbox.SecretUse) []string {
	out := make([]string, len(uses))
	for i, u := range uses {
		out[i] = u.Name
	}
	return out
}

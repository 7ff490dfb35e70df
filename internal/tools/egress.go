package tools

import (
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// egressParam describes the egress argument of the tools that start jobs
// or workspaces.
func (d Deps) egressParam() param {
	if len(d.policyOrDefault().Egress.Allow) == 0 {
		return param{desc: "hosts via proxy (none allowed)"}
	}
	return param{desc: "hosts via proxy (egress.allow)"}
}

// egressFor turns the egress argument into a job's network and its own
// allowlist: absent (nil) keeps the policy's network; empty is no network;
// entries within the policy's egress.allow are reached through the proxy,
// and nothing else is, whatever the policy's network.
func (d Deps) egressFor(entries []string) (network string, allow []string, problem *mcp.CallToolResult) {
	switch {
	case entries == nil:
		return d.Policy.Network, nil, nil
	case len(entries) == 0:
		return policy.NetworkNone, nil, nil
	}
	allow, problem = d.checkEgress(entries)
	return sandbox.NetworkEgress, allow, problem
}

// noWorkspaceEgress refuses egress for a job in a workspace: it has the
// workspace's network.
func noWorkspaceEgress(entries []string, workspace string) *mcp.CallToolResult {
	if entries != nil && workspace != "" {
		return errorResult("egress: a job in workspace %q reaches the hosts the workspace was created with (create_workspace's egress); leave egress out", workspace)
	}
	return nil
}

// checkEgress checks egress entries against the policy and returns them as
// the policy writes them.
func (d Deps) checkEgress(entries []string) ([]string, *mcp.CallToolResult) {
	if len(d.Policy.Egress.Allow) == 0 {
		return nil, errorResult("egress: the policy allows no host (policy key egress.allow is empty): leave egress out")
	}
	ceiling, err := egress.ParseList(d.Policy.Egress.Allow)
	if err != nil {
		return nil, failure(err) // the policy was validated: not reached
	}
	l, err := egress.Narrow(ceiling, entries)
	if err != nil {
		return nil, errorResult("egress: %v", err)
	}
	out := make([]string, len(l))
	for i, r := range l {
		out[i] = r.String()
	}
	return out, nil
}

package tools

import (
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// mountsParam describes a mounts argument: the granted names are its enum,
// so an agent learns them from the schema without guessing.
func (d Deps) mountsParam() param {
	names := d.policyOrDefault().MountNames()
	if len(names) == 0 {
		return param{desc: "read-only host dirs at /mnt/NAME (none granted)"}
	}
	return oneOf(names...).checkedByHandler().describe("granted host dirs, read-only at /mnt/NAME")
}

// mountsFor resolves granted mount names into the sandbox's mounts. Nothing
// of the host but what the operator granted is ever mounted.
func (d Deps) mountsFor(names []string) ([]sandbox.Mount, *mcp.CallToolResult) {
	return d.grantedMounts("mounts", names)
}

// grantedMounts resolves names given in the argument field.
func (d Deps) grantedMounts(field string, names []string) ([]sandbox.Mount, *mcp.CallToolResult) {
	if len(names) == 0 {
		return nil, nil
	}
	granted := d.Policy.MountNames()
	if len(granted) == 0 {
		return nil, errorResult("%s: the policy grants no host directory (policy key mounts); leave %s out", field, field)
	}
	var out []sandbox.Mount
	seen := map[string]bool{}
	for _, n := range names {
		i := slices.Index(granted, n)
		if i < 0 {
			return nil, errorResult("%s: %q is not granted; the granted mounts are %s", field, truncate(n, 64), strings.Join(granted, ", "))
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		// Resolved again now, through every link: a link swapped since the
		// policy loaded is caught, and what is mounted is what was checked.
		source, err := d.Policy.ResolveMount(granted[i])
		if err != nil {
			return nil, errorResult("%s: %q cannot be mounted: %v; the operator must fix the policy", field, n, err)
		}
		out = append(out, sandbox.Mount{Source: source, Target: policy.MountTarget(n), ReadOnly: true})
	}
	return out, nil
}

// noWorkspaceMounts refuses mounts on a job in a workspace: they are the
// workspace's, set when it is created.
func noWorkspaceMounts(names []string, workspace string) *mcp.CallToolResult {
	if len(names) > 0 && workspace != "" {
		return errorResult("mounts: a job in workspace %q sees the mounts the workspace was created with (create_workspace's mounts); leave mounts out", workspace)
	}
	return nil
}

// importParam describes create_workspace's import: one granted name.
func (d Deps) importParam() param {
	names := d.policyOrDefault().MountNames()
	if len(names) == 0 {
		return param{desc: "granted mount to copy into /workspace (none granted)"}
	}
	return oneOf(names...).checkedByHandler().describe("granted mount to copy into /workspace")
}

// importFor resolves create_workspace's import argument.
func (d Deps) importFor(name string) (*workspace.Import, *mcp.CallToolResult) {
	if name == "" {
		return nil, nil
	}
	ms, problem := d.grantedMounts("import", []string{name})
	if problem != nil {
		return nil, problem
	}
	return &workspace.Import{Name: name, Mount: ms[0]}, nil
}

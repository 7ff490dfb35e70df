package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// ToolsetWorkspaces holds the workspace tools (named, persistent sandboxes and their files).
const ToolsetWorkspaces = "workspaces"

const workspaceNameDesc = "workspace name"

// WorkspaceInfo is one workspace as the tools show it.
type WorkspaceInfo struct {
	Name       string               `json:"name" jsonschema:"the workspace's name"`
	Language   string               `json:"language" jsonschema:"the language whose image it runs"`
	Image      string               `json:"image" jsonschema:"the image its container was made from"`
	State      string               `json:"state" jsonschema:"running, paused (idle: frozen with its processes; the next call thaws it), hibernated (idle: its processes and memory saved to disk; the next call restores them), stopped (idle: the next job starts it again, files and packages intact) or creating"`
	CreatedAt  string               `json:"created_at" jsonschema:"when it was made (RFC 3339, UTC)"`
	LastUsedAt string               `json:"last_used_at,omitempty" jsonschema:"when a job last ran in it (RFC 3339, UTC)"`
	MemoryMB   int64                `json:"memory_mb" jsonschema:"memory limit of its container in MiB, shared by its jobs"`
	CPUs       float64              `json:"cpus" jsonschema:"CPU quota of its container, shared by its jobs"`
	Pids       int64                `json:"pids" jsonschema:"most processes and threads in its container at once"`
	DiskMB     int64                `json:"disk_mb" jsonschema:"the most its /workspace may hold, in MiB (checked by polling while jobs run)"`
	Ports      []workspace.PortInfo `json:"ports,omitempty" jsonschema:"ports open with expose_port"`
	Egress     []string             `json:"egress,omitempty" jsonschema:"hosts its jobs reach through the proxy (create_workspace's egress); none: no network"`
	Secrets    []string             `json:"secrets,omitempty" jsonschema:"secrets its jobs use"`
	Lost       string               `json:"lost_processes,omitempty" jsonschema:"why its last restore failed (it restarted with its files)"`
}

// workspaceInfo shows w to ctx's caller: another tenant's workspace (only
// an admin sees one) is named TENANT/NAME, as the admin names it back.
func workspaceInfo(ctx context.Context, ws *workspace.Manager, w *record.Workspace) WorkspaceInfo {
	info := WorkspaceInfo{Ports: ws.Ports(w.ID),
		Name: workspaceRef(ctx, w), Language: w.Language, Image: w.Image, State: w.State,
		CreatedAt: stamp(w.CreatedAt), LastUsedAt: stamp(w.LastUsedAt),
		MemoryMB: w.Limits.MemoryBytes >> 20, CPUs: float64(w.Limits.NanoCPUs) / 1e9, Pids: w.Limits.Pids,
		DiskMB: w.Limits.DiskBytes >> 20, Egress: w.Details.Egress, Lost: w.Details.LostProcesses,
	}
	for _, u := range w.Details.Secrets {
		info.Secrets = append(info.Secrets, u.Name)
	}
	return info
}

// workspaceRef is how ctx's caller names w: its name, or TENANT/NAME for
// another tenant's.
func workspaceRef(ctx context.Context, w *record.Workspace) string {
	if w.Tenant != "" && w.Tenant != tenant.Owner(ctx) {
		return w.Tenant + "/" + w.Name
	}
	return w.Name
}

// workspaces returns the manager, or a tool error when workspaces are off.
func (d Deps) workspaces() (*workspace.Manager, *mcp.CallToolResult) {
	if d.Workspaces == nil {
		return nil, errorResult("%s", d.lacks("workspaces"))
	}
	if !d.Workspaces.Enabled() {
		return nil, errorResult("%v", workspace.ErrDisabled)
	}
	return d.Workspaces, nil
}

// workspaceFailure turns a workspace error into a tool error.
func workspaceFailure(err error) *mcp.CallToolResult {
	if msg := cleanMessage(err.Error()); errors.Is(err, record.ErrWorkspaceNotFound) && !strings.Contains(msg, "list_workspaces") {
		return errorResult("%s: list_workspaces shows those that exist", msg) // the store's, which names it but says no more
	}
	return failure(err)
}

// CreateWorkspaceArgs are create_workspace's arguments.
type CreateWorkspaceArgs struct {
	Name     string   `json:"name"`
	Language string   `json:"language,omitempty"`
	MemoryMB *int64   `json:"memory_mb,omitempty"`
	CPUs     *float64 `json:"cpus,omitempty"`
	Pids     *int64   `json:"pids,omitempty"`
	Mounts   []string `json:"mounts,omitempty"`
	Import   string   `json:"import,omitempty"`
	From     string   `json:"from,omitempty"`
	// WithProcesses and Count shape a fork (from).
	WithProcesses bool     `json:"with_processes,omitempty"`
	Count         *int     `json:"count,omitempty"`
	Egress        []string `json:"egress,omitempty"`
	Secrets       []string `json:"secrets,omitempty"`
}

// WorkspaceResult is create_workspace's result.
type WorkspaceResult struct {
	Workspace WorkspaceInfo     `json:"workspace" jsonschema:"the workspace"`
	Origin    *workspace.Origin `json:"origin,omitempty" jsonschema:"what its files came from (import or from)"`
	Copies    []WorkspaceInfo   `json:"copies,omitempty" jsonschema:"a fork's copies, with count"`
}

func CreateWorkspace(d Deps) Tool {
	pol := d.policyOrDefault()
	l := pol.Limits
	in := inputSchema[CreateWorkspaceArgs](map[string]param{
		"name": {desc: workspaceNameDesc},
		"language": oneOf(d.languageNames()...).checkedByHandler().describe(
			"default %s", lang.DefaultLanguage),
		"memory_mb": between(minMemoryMB, float64(l.MemoryMB.Max)).checkedByHandler().describe(
			"memory MiB, shared; default %d", l.MemoryMB.Default),
		"cpus": between(minCPUs, l.CPUs.Max).checkedByHandler().describe(
			"CPU cores, shared; default %s", num(l.CPUs.Default)),
		"pids": between(minPids, float64(l.Pids.Max)).checkedByHandler().describe(
			"process limit, shared; default %d", l.Pids.Default),
		"mounts":         d.mountsParam(),
		"import":         d.importParam(),
		"from":           {desc: "workspace to fork: copy its files"},
		"with_processes": {desc: "also its processes and memory (runsc)"},
		"count":          between(1, workspace.MaxCopies).describe("copies NAME-1…; default 1"),
		"egress":         d.egressParam(),
		"secrets":        d.secretsParam(),
	})
	def := mcp.NewTool("create_workspace",
		mcp.WithDescription("A named persistent sandbox: jobs naming it share its /workspace volume and packages."),
		mcp.WithToolTitle("Create a workspace"),
		annotations("Create a workspace", false, false, false, false),
		withInput(in),
		withOutput[WorkspaceResult](),
	)
	return Tool{Toolset: ToolsetWorkspaces, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args CreateWorkspaceArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		ws, problem := d.workspaces()
		if problem != nil {
			return problem, nil
		}
		if err := workspace.CheckName(args.Name); err != nil {
			return errorResult("name: %v", err), nil
		}
		if args.Import != "" && args.From != "" {
			return errorResult("import and from: give one; a fork keeps its source's import baseline"), nil
		}
		if args.From == "" && (args.WithProcesses || args.Count != nil) {
			return errorResult("with_processes and count: they shape a fork: give from"), nil
		}
		var src *record.Workspace
		if args.From != "" {
			var problem *mcp.CallToolResult
			if src, problem = d.workspaceFor(ctx, args.From, args.Language); problem != nil {
				return problem, nil
			}
			args.Language = src.Language
		}
		name := args.Language
		if name == "" {
			name = lang.DefaultLanguage
		}
		ctx, stop := d.withBuildProgress(ctx, req)
		language, image, problem := d.resolveLanguage(ctx, name)
		stop()
		if problem != nil {
			return problem, nil
		}
		template, runtime := "", language.Runtime
		if language.Name != language.Base {
			template = language.Name
		}
		if src != nil { // a fork runs on its source's image and runtime, template or not
			image, template, runtime = src.Image, src.Details.Template, src.Details.Runtime
		}
		limits, err := d.Policy.Resolve(policy.Request{MemoryMB: args.MemoryMB, CPUs: args.CPUs, Pids: args.Pids})
		if err != nil {
			return failure(err), nil
		}
		if problem := d.checkImage(ctx, image); problem != nil {
			return problem, nil
		}
		mounts, problem := d.mountsFor(args.Mounts)
		if problem != nil {
			return problem, nil
		}
		imp, problem := d.importFor(args.Import)
		if problem != nil {
			return problem, nil
		}
		var allow []string
		if len(args.Egress) > 0 { // empty: no network, as without it
			if allow, problem = d.checkEgress(args.Egress); problem != nil {
				return problem, nil
			}
		}
		secrets, problem := d.secretsFor(ctx, args.Secrets, nil)
		if problem != nil {
			return problem, nil
		}
		cr := workspace.CreateRequest{Name: args.Name, Language: language.Base, Template: template, Image: image, Runtime: runtime, Limits: limits,
			Mounts: mounts, Import: imp, From: args.From, WithProcesses: args.WithProcesses, Egress: allow, Secrets: secretNames(secrets)}
		var copies []*record.Workspace
		var origin *workspace.Origin
		if args.From != "" {
			count := 1
			if args.Count != nil {
				count = *args.Count
			}
			copies, origin, err = ws.Copies(ctx, cr, count)
		} else {
			var w *record.Workspace
			w, origin, err = ws.Create(ctx, cr)
			copies = []*record.Workspace{w}
		}
		if err != nil {
			return workspaceFailure(err), nil
		}
		if origin != nil && origin.Processes && d.Jobs != nil {
			// The source's jobs are in each copy: each becomes a job there.
			for _, c := range copies {
				jobs, err := d.Jobs.AdoptCopies(ctx, src.Name, src.ContainerID, c.Name, c.ContainerID)
				if err != nil {
					return failure(err), nil
				}
				origin.Jobs = append(origin.Jobs, jobs...)
			}
		}
		w := copies[0]
		info := workspaceInfo(ctx, ws, w)
		text := fmt.Sprintf("workspace %s created (%s, %s)", info.Name, info.Language, info.State)
		switch {
		case origin != nil && origin.Import != "":
			text += fmt.Sprintf("; imported %d files (%d KiB) from mount %s", origin.Files, origin.Bytes>>10, origin.Import)
			if origin.SkippedCount > 0 {
				text += fmt.Sprintf(", skipped %d sockets, FIFOs or devices", origin.SkippedCount)
			}
		case origin != nil:
			text += "; forked from " + origin.From
			if origin.Processes {
				text += " with its processes"
			} else if origin.ProcessesNote != "" {
				text += " (" + origin.ProcessesNote + ")"
			}
		}
		result := WorkspaceResult{Workspace: info, Origin: origin}
		if len(copies) > 1 {
			for _, c := range copies {
				result.Copies = append(result.Copies, workspaceInfo(ctx, ws, c))
			}
			text += fmt.Sprintf("; %d copies, %s to %s", len(copies), copies[0].Name, copies[len(copies)-1].Name)
		}
		return structured(result, text), nil
	}}
}

// ListWorkspacesArgs are list_workspaces' arguments (none).
type ListWorkspacesArgs struct{}

// ListWorkspacesResult is list_workspaces' result.
type ListWorkspacesResult struct {
	Workspaces []WorkspaceInfo `json:"workspaces" jsonschema:"every workspace, by name"`
	Max        int             `json:"max" jsonschema:"how many may exist at once (policy workspaces.max)"`
}

func ListWorkspaces(d Deps) Tool {
	in := inputSchema[ListWorkspacesArgs](nil)
	def := mcp.NewTool("list_workspaces",
		mcp.WithDescription("List workspaces: state, language, last use, limits."),
		mcp.WithToolTitle("List workspaces"),
		annotations("List workspaces", true, false, true, false),
		withInput(in),
		withOutput[ListWorkspacesResult](),
	)
	return Tool{Toolset: ToolsetWorkspaces, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListWorkspacesArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		ws, problem := d.workspaces()
		if problem != nil {
			return problem, nil
		}
		list, err := ws.List(ctx)
		if err != nil {
			return failure(err), nil
		}
		res := ListWorkspacesResult{Workspaces: []WorkspaceInfo{}, Max: ws.Policy().Workspaces.Max}
		var b strings.Builder
		fmt.Fprintf(&b, "%d workspaces (at most %d)", len(list), res.Max)
		for _, w := range list {
			info := workspaceInfo(ctx, ws, w)
			res.Workspaces = append(res.Workspaces, info)
			fmt.Fprintf(&b, "\n%s %s %s", info.Name, w.Language, w.State)
		}
		return structured(res, b.String()), nil
	}}
}

// DeleteWorkspaceArgs are delete_workspace's arguments.
type DeleteWorkspaceArgs struct {
	Name string `json:"name"`
}

// DeleteWorkspaceResult is delete_workspace's result.
type DeleteWorkspaceResult struct {
	Deleted string `json:"deleted" jsonschema:"the name of the workspace removed"`
}

func DeleteWorkspace(d Deps) Tool {
	in := inputSchema[DeleteWorkspaceArgs](map[string]param{"name": {desc: workspaceNameDesc}})
	def := mcp.NewTool("delete_workspace",
		mcp.WithDescription("Delete a workspace, its files and packages; its jobs end."),
		mcp.WithToolTitle("Delete a workspace"),
		annotations("Delete a workspace", false, true, true, false),
		withInput(in),
		withOutput[DeleteWorkspaceResult](),
	)
	return Tool{Toolset: ToolsetWorkspaces, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args DeleteWorkspaceArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		ws, problem := d.workspaces()
		if problem != nil {
			return problem, nil
		}
		if err := ws.Delete(ctx, args.Name); err != nil {
			return workspaceFailure(err), nil
		}
		return structured(DeleteWorkspaceResult{Deleted: args.Name}, "workspace "+args.Name+" deleted"), nil
	}}
}

// workspaceFor checks a job's workspace argument: the workspace must exist,
// and a language given with it must be the workspace's. Every tool that runs
// a job takes a workspace this way and puts the name in job.Request.Workspace.
func (d Deps) workspaceFor(ctx context.Context, name, language string) (*record.Workspace, *mcp.CallToolResult) {
	ws, problem := d.workspaces()
	if problem != nil {
		return nil, problem
	}
	if err := workspace.CheckRef(name); err != nil {
		return nil, errorResult("workspace: %v", err)
	}
	w, err := ws.Get(ctx, name)
	if err != nil {
		return nil, workspaceFailure(err)
	}
	if language != "" {
		if language != w.Language && language != w.Details.Template {
			return nil, errorResult("language %q does not match workspace %q, which runs %s: omit language", truncate(language, 32), name, w.Language)
		}
	}
	return w, nil
}

package tools

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

const defaultDiffPage = 64 << 10

// changesPagesKept bounds the patches kept for paging (the oldest go).
const changesPagesKept = 32

// pageCache keeps the last values put, at most max, by key.
type pageCache[V any] struct {
	mu    sync.Mutex
	max   int
	order []string
	vals  map[string]V
}

func newPageCache[V any](max int) *pageCache[V] {
	return &pageCache[V]{max: max, vals: map[string]V{}}
}

func (c *pageCache[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.vals[key]
	return v, ok
}

func (c *pageCache[V]) put(key string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.vals[key]; !ok {
		c.order = append(c.order, key)
	}
	c.vals[key] = v
	for len(c.order) > c.max {
		delete(c.vals, c.order[0])
		c.order = c.order[1:]
	}
}

// WorkspaceChangesArgs are workspace_changes' arguments.
type WorkspaceChangesArgs struct {
	Workspace string `json:"workspace"`
	Cursor    int64  `json:"cursor,omitempty"`
	MaxBytes  int    `json:"max_bytes,omitempty"`
}

// WorkspaceChangesResult is workspace_changes' result.
type WorkspaceChangesResult struct {
	Workspace  string                    `json:"workspace"`
	Baseline   string                    `json:"baseline"`
	Changes    []workspace.ChangeSummary `json:"changes"`
	Diff       string                    `json:"diff"`
	Cursor     int64                     `json:"cursor"`
	NextCursor int64                     `json:"next_cursor"`
	HasMore    bool                      `json:"has_more"`
	DiffBytes  int64                     `json:"diff_bytes"`
}

func WorkspaceChanges(d Deps) Tool {
	in := inputSchema[WorkspaceChangesArgs](map[string]param{
		"workspace": {desc: workspaceNameDesc},
		"cursor":    between(0, 1<<40).describe("next_cursor of the last page"),
		"max_bytes": between(1, maxReadBytes).describe("page size; default %d", defaultDiffPage),
	})
	def := mcp.NewTool("workspace_changes",
		mcp.WithDescription("A workspace's changes since its import: paths and a patch for `git apply`."),
		mcp.WithToolTitle("Workspace changes"),
		annotations("Workspace changes", true, false, true, false),
		withInput(in),
		withOutput[WorkspaceChangesResult](),
	)
	// Pages after the first come from the diff the first page made, so a
	// patch read in pages is one consistent patch. They are kept by tenant
	// and by the workspace's identity, never its reusable name: a new
	// workspace under an old name starts clean.
	last := newPageCache[*workspace.Changes](changesPagesKept)
	return Tool{Toolset: ToolsetWorkspaces, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args WorkspaceChangesArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		w, problem := d.workspaceFor(ctx, args.Workspace, "")
		if problem != nil {
			return problem, nil
		}
		if args.Cursor < 0 {
			return errorResult("cursor must be >= 0, got %d", args.Cursor), nil
		}
		max := args.MaxBytes
		if max == 0 {
			max = defaultDiffPage
		}
		if max < 1 || max > maxReadBytes {
			return errorResult("max_bytes must be between 1 and %d, got %d", maxReadBytes, args.MaxBytes), nil
		}
		key := tenant.Owner(ctx) + "\x00" + w.ID
		ch, ok := last.get(key)
		if args.Cursor == 0 || !ok {
			var err error
			if ch, err = d.Workspaces.Changes(ctx, args.Workspace); err != nil {
				return workspaceFailure(err), nil
			}
			last.put(key, ch)
		}
		total := int64(len(ch.Diff))
		if args.Cursor > total {
			return errorResult("cursor %d is past the diff's end (%d bytes); start again with cursor 0", args.Cursor, total), nil
		}
		end := min(args.Cursor+int64(max), total)
		if end < total {
			// Pages end at a line's end where one is in reach.
			if nl := strings.LastIndexByte(ch.Diff[args.Cursor:end], '\n'); nl >= 0 {
				end = args.Cursor + int64(nl) + 1
			}
		}
		res := WorkspaceChangesResult{Workspace: args.Workspace, Baseline: ch.Baseline, Changes: ch.Changes,
			Diff: ch.Diff[args.Cursor:end], Cursor: args.Cursor, NextCursor: end, HasMore: end < total, DiffBytes: total}
		if res.Changes == nil {
			res.Changes = []workspace.ChangeSummary{}
		}
		text := fmt.Sprintf("%d changed paths since %s; diff bytes %d-%d of %d", len(res.Changes), ch.Baseline, args.Cursor, end, total)
		if res.HasMore {
			text += fmt.Sprintf(" (more: cursor %d)", end)
		}
		return structured(res, text+"\n"+res.Diff), nil
	}}
}

// ExposePortArgs are expose_port's arguments.
type ExposePortArgs struct {
	Workspace string `json:"workspace"`
	Port      int    `json:"port"`
	Close     bool   `json:"close,omitempty"`
}

// ExposePortResult is expose_port's result.
type ExposePortResult struct {
	Workspace string               `json:"workspace"`
	Port      int                  `json:"port"`
	URL       string               `json:"url,omitempty"`
	Listening bool                 `json:"listening"`
	Closed    bool                 `json:"closed,omitempty"`
	Ports     []workspace.PortInfo `json:"ports"`
}

func ExposePort(d Deps) Tool {
	in := inputSchema[ExposePortArgs](map[string]param{
		"workspace": {desc: workspaceNameDesc},
		"port":      between(1, 65535).describe("TCP port inside the workspace"),
		"close":     {desc: "close the port instead"},
	})
	def := mcp.NewTool("expose_port",
		mcp.WithDescription("A loopback URL relayed to a TCP port in a workspace, which gains no network."),
		mcp.WithToolTitle("Expose a workspace port"),
		annotations("Expose a workspace port", false, false, true, false),
		withInput(in),
		withOutput[ExposePortResult](),
	)
	return Tool{Toolset: ToolsetWorkspaces, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ExposePortArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		w, problem := d.workspaceFor(ctx, args.Workspace, "")
		if problem != nil {
			return problem, nil
		}
		if args.Port < 1 || args.Port > 65535 {
			return errorResult("port must be between 1 and 65535, got %d", args.Port), nil
		}
		ws := d.Workspaces
		res := ExposePortResult{Workspace: args.Workspace, Port: args.Port}
		var text string
		if args.Close {
			closed, err := ws.ClosePort(ctx, args.Workspace, args.Port)
			if err != nil {
				return workspaceFailure(err), nil
			}
			if !closed {
				return errorResult("port: %d of workspace %q is not open (its workspace's ports list says which are)", args.Port, args.Workspace), nil
			}
			res.Closed, text = true, fmt.Sprintf("port %d of %s closed", args.Port, args.Workspace)
		} else {
			info, listening, err := ws.ExposePort(ctx, args.Workspace, args.Port)
			if err != nil {
				return workspaceFailure(err), nil
			}
			res.URL, res.Listening = info.URL, listening
			text = fmt.Sprintf("%s -> port %d of %s", info.URL, args.Port, args.Workspace)
			if !listening {
				text += " (nothing listens there yet: connections are refused until a job serves the port)"
			}
		}
		res.Ports = ws.Ports(w.ID)
		if res.Ports == nil {
			res.Ports = []workspace.PortInfo{}
		}
		return structured(res, text), nil
	}}
}

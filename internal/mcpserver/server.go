// Package mcpserver wires the tools and resources into an MCP server (mcp-go)
// and serves it over stdio or Streamable HTTP. It is the only place that
// knows the transports.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"slices"
	"sort"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/memtrim"
	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// Name and Version identify the server to clients.
const Name = "sandboxer"

var Version = "0.1.0-dev"

const (
	// workerPoolSize is how many tool calls run at once over stdio; waiting
	// calls (run_command, read_output with wait_s) each hold one.
	workerPoolSize = 64
	// maxMessageBytes is the largest JSON-RPC message accepted on stdin.
	maxMessageBytes = 16 << 20
	// resourceOutputBytes caps the job://{id}/output resource.
	resourceOutputBytes = 1 << 20
)

// Toolsets lists the toolsets that exist.
var Toolsets = []string{tools.ToolsetExec, tools.ToolsetJobs, tools.ToolsetInfo, tools.ToolsetWorkspaces, tools.ToolsetAdmin, tools.ToolsetTemplates}

// OffByDefault are the toolsets on only when named (or with preset all).
var OffByDefault = tools.OffByDefault

// Preset is a named choice of tools for --toolsets: whole toolsets, and
// single tools. An operator trims what every agent pays for in its context.
type Preset struct {
	Sets  []string
	Tools []string
}

// Presets are the named presets --toolsets takes besides the single sets.
var Presets = map[string]Preset{
	"all":       {Sets: Toolsets},
	"core":      {Sets: []string{tools.ToolsetExec, tools.ToolsetJobs}},
	"workspace": {Sets: []string{tools.ToolsetExec, tools.ToolsetJobs, tools.ToolsetWorkspaces}},
	"minimal":   {Tools: []string{"run_command", "run_script", "start_session", "get_job", "read_output", "send_input", "kill_job"}},
}

// PresetNames are the presets' names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// selection is what --toolsets enables: nothing named means everything.
type selection struct{ sets, tools map[string]bool }

// selectTools resolves toolset and preset names.
func selectTools(names []string) (selection, error) {
	sel := selection{sets: map[string]bool{}, tools: map[string]bool{}}
	for _, n := range names {
		if p, ok := Presets[n]; ok {
			for _, set := range p.Sets {
				sel.sets[set] = true
			}
			for _, t := range p.Tools {
				sel.tools[t] = true
			}
			continue
		}
		if !slices.Contains(Toolsets, n) {
			return sel, fmt.Errorf("unknown toolset %q (toolsets: %s; presets: %s)", n, strings.Join(Toolsets, ", "), strings.Join(PresetNames(), ", "))
		}
		sel.sets[n] = true
	}
	return sel, nil
}

func (sel selection) enabled(t tools.Tool) bool {
	if len(sel.sets) == 0 && len(sel.tools) == 0 {
		return !slices.Contains(OffByDefault, t.Toolset)
	}
	return sel.sets[t.Toolset] || sel.tools[t.Def.Name]
}

// Instructions tell an agent the whole story at initialize, briefly.
const Instructions = "sandboxer runs your code in hardened Docker sandboxes (no network, non-root). " +
	"run_command runs shell, run_script runs source in a language. Each call waits up to wait_s; " +
	"a job still running then comes back as a job_id with its output so far and goes on: follow it with " +
	"read_output (wait_s, until), get_job, send_input, kill_job. start_session runs a REPL or shell you drive " +
	"with send_input. Workspaces (create_workspace) keep files and packages between jobs. " +
	"Docs: sandboxer://docs/{tool}."

// Server is a configured MCP server.
type Server struct {
	mcp      *server.MCPServer
	deps     tools.Deps
	notifier *notifier
	wire     *wire
	audit    *audit.Log
	observer observe.Observer // nil: none
	trim     *memtrim.Trimmer
	serverID string
	readOnly map[string]bool // tools annotated read-only: not audited
	tools    map[string]tools.Tool
	logf     func(format string, args ...any)
	running  running // MCP tasks this server runs itself (tasks.go)
	listens  listens // open subscriptions/listen streams, by tenant (listen.go)
	// approvals holds the calls the policy's approvals name (approvals.go);
	// nil: none do.
	approvals *approvals
}

// New builds the server with the tools of the enabled toolsets (all when
// empty). The admin toolset (block_command, unblock_command) exists only when
// the operator allows agents to edit the block list; then it is on unless the
// toolsets named leave it out.
func New(deps tools.Deps, toolsets []string, opts ...Option) (*Server, error) {
	sel, err := selectTools(toolsets)
	if err != nil {
		return nil, err
	}
	w := newWire()
	hooks := &server.Hooks{}
	s := &Server{wire: w, readOnly: map[string]bool{}, tools: map[string]tools.Tool{}}
	if deps.Policy != nil && deps.Policy.Approvals.Any() {
		s.approvals = newApprovals(deps.Policy.Approvals)
	}
	for _, o := range opts {
		o(s)
	}
	srv := server.NewMCPServer(Name, Version,
		server.WithHooks(hooks),
		server.WithToolHandlerMiddleware(w.toolMiddleware),
		server.WithToolHandlerMiddleware(s.auditMiddleware),
		server.WithToolHandlerMiddleware(s.metricsMiddleware),
		server.WithToolHandlerMiddleware(s.roleMiddleware),
		server.WithToolHandlerMiddleware(s.approvalMiddleware),
		server.WithToolHandlerMiddleware(s.trimMiddleware),
		server.WithToolCapabilities(false),
		server.WithResourceCapabilities(false, false),
		// Tasks are answered in front of mcp-go (tasks.go); this announces them.
		server.WithTaskCapabilities(true, true, true),
		// … and the 2026-07-28 revision's tasks extension (exttasks.go).
		server.WithExtensions(map[string]any{TasksExtension: map[string]any{}}),
		// No server.WithInputSchemaValidation: each tool checks its arguments
		// against its own input schema (tools' bind), after taking a single
		// value for a list, with messages written for agents.
		server.WithRecovery(),
		server.WithInstructions(Instructions),
	)
	s.mcp, s.notifier = srv, &notifier{srv: srv}
	deps.Notifier = s.notifier
	s.deps = deps
	for _, t := range tools.All(deps) {
		if !sel.enabled(t) {
			continue
		}
		if t.Toolset == tools.ToolsetAdmin && !deps.Blocklist.EditsAllowed() {
			continue // agents may not edit the block list: the tools do not exist
		}
		s.readOnly[t.Def.Name] = readOnly(t.Def)
		s.tools[t.Def.Name] = t
		srv.AddTool(t.Def, t.Handler)
	}
	s.addResources(hooks)
	// The 2026-07-28 revision's clients find tasks under extensions only
	// (exttasks.go): the 2025-11-25 slot is for initialize's answer.
	hooks.AddAfterDiscover(func(_ context.Context, _ any, _ *mcp.DiscoverRequest, res *mcp.DiscoverResult) {
		res.Capabilities.Tasks = nil
	})
	return s, nil
}

func readOnly(t mcp.Tool) bool {
	return t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint
}

// CallTool runs a tool as ctx's tenant through the whole tools/call path
// (audit, roles, approvals, metrics), as a client's call would: what the
// E2B API (internal/e2b) translates its calls into. A JSON-RPC error comes
// back as an error result.
func (s *Server) CallTool(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
	msg, err := toolCallMessage(map[string]any{"name": name, "arguments": args})
	if err != nil {
		return nil, err
	}
	res, _ := callResult(s.mcp.HandleMessage(ctx, msg))
	return res, nil
}

// HasTool says whether the server's toolsets serve the tool name.
func (s *Server) HasTool(name string) bool { return s.mcp.GetTool(name) != nil }

// MCP exposes the underlying server (for in-process tests).
func (s *Server) MCP() *server.MCPServer { return s.mcp }

// ServeStdio serves one client over stdin/stdout until stdin ends or ctx is
// cancelled. Nothing but MCP messages is ever written to stdout.
func (s *Server) ServeStdio(ctx context.Context, stdin io.Reader, stdout io.Writer, errLog *log.Logger) error {
	// Progress notifications are counted as they reach stdout (see
	// progressWriter); below that, wire restores ids and undoes HTML escaping.
	s.wire.out = stdout
	s.notifier.w = newProgressWriter(s.wire)
	stdio := server.NewStdioServer(s.mcp)
	server.WithWorkerPoolSize(workerPoolSize)(stdio)
	server.WithQueueSize(256)(stdio)
	server.WithErrorLogger(errLog)(stdio)
	if errLog != nil {
		s.logf = errLog.Printf
	}
	// stdio's client is the tenant "local" (internal/tenant).
	ctx = tenant.With(ctx, tenant.Tenant{Name: tenant.Local})
	s.wire.tasks = func(method string, params json.RawMessage, notify notifyFunc) (any, *rpcError) {
		return s.handleTask(ctx, method, params, notify)
	}
	s.wire.isTask = s.isTaskRequest
	s.wire.listen = func(lctx context.Context, id, params json.RawMessage, send sendFunc) *rpcError {
		lctx, cancel := context.WithCancel(lctx)
		defer cancel()
		stop := context.AfterFunc(ctx, cancel) // the server's end ends every listen
		defer stop()
		return s.listen(tenant.With(lctx, tenant.Tenant{Name: tenant.Local}), id, params, send)
	}
	err := stdio.Listen(ctx, s.wire.reader(stdin, maxMessageBytes), s.notifier.w)
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

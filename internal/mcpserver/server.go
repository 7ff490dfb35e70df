// Package mcpserver wires the tools and resources into an MCP server (mcp-go)
// and serves it over stdio. It is the only place that knows the transport.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/audit"
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
var Toolsets = []string{tools.ToolsetExec, tools.ToolsetJobs, tools.ToolsetInfo, tools.ToolsetWorkspaces, tools.ToolsetAdmin}

// Server is a configured MCP server.
type Server struct {
	mcp      *server.MCPServer
	deps     tools.Deps
	notifier *notifier
	wire     *wire
	audit    *audit.Log
	serverID string
	readOnly map[string]bool // tools annotated read-only: not audited
	logf     func(format string, args ...any)
}

// New builds the server with the tools of the enabled toolsets (all when
// empty). The admin toolset (block_command, unblock_command) exists only when
// the operator allows agents to edit the block list; then it is on unless the
// toolsets named leave it out.
func New(deps tools.Deps, toolsets []string, opts ...Option) (*Server, error) {
	enabled := map[string]bool{}
	for _, t := range toolsets {
		known := false
		for _, k := range Toolsets {
			known = known || k == t
		}
		if !known {
			return nil, fmt.Errorf("unknown toolset %q (known: %s)", t, strings.Join(Toolsets, ", "))
		}
		enabled[t] = true
	}
	w := newWire()
	hooks := &server.Hooks{}
	s := &Server{wire: w, readOnly: map[string]bool{}}
	for _, o := range opts {
		o(s)
	}
	srv := server.NewMCPServer(Name, Version,
		server.WithHooks(hooks),
		server.WithToolHandlerMiddleware(w.toolMiddleware),
		server.WithToolHandlerMiddleware(s.auditMiddleware),
		server.WithToolCapabilities(false),
		server.WithResourceCapabilities(false, false),
		// No server.WithInputSchemaValidation: each tool checks its arguments
		// against its own input schema (tools' bind), after taking a single
		// value for a list, with messages written for agents.
		server.WithRecovery(),
		server.WithInstructions("sandboxer runs commands in hardened, disposable Docker sandboxes. "+
			"Use run_command; long commands return a job_id with the output so far — continue with read_output, get_job, send_input or kill_job."),
	)
	s.mcp, s.notifier = srv, &notifier{srv: srv}
	deps.Notifier = s.notifier
	s.deps = deps
	for _, t := range tools.All(deps) {
		if len(enabled) > 0 && !enabled[t.Toolset] {
			continue
		}
		if t.Toolset == tools.ToolsetAdmin && !deps.Blocklist.EditsAllowed() {
			continue // agents may not edit the block list: the tools do not exist
		}
		s.readOnly[t.Def.Name] = readOnly(t.Def)
		srv.AddTool(t.Def, t.Handler)
	}
	s.addResources(hooks)
	return s, nil
}

func readOnly(t mcp.Tool) bool {
	return t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint
}

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
	err := stdio.Listen(ctx, s.wire.reader(stdin, maxMessageBytes), s.notifier.w)
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

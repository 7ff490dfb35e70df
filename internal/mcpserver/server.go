// Package mcpserver wires the tools and resources into an MCP server (mcp-go)
// and serves it over stdio. It is the only place that knows the transport.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/output"
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
var Toolsets = []string{tools.ToolsetExec, tools.ToolsetJobs, tools.ToolsetInfo}

// Server is a configured MCP server.
type Server struct {
	mcp      *server.MCPServer
	deps     tools.Deps
	notifier *notifier
}

// New builds the server with the tools of the enabled toolsets (all when empty).
func New(deps tools.Deps, toolsets []string) (*Server, error) {
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
	srv := server.NewMCPServer(Name, Version,
		server.WithToolCapabilities(false),
		server.WithResourceCapabilities(false, false),
		// No server.WithInputSchemaValidation: each tool checks its arguments
		// against its own input schema (tools' bind), after taking a single
		// value for a list, with messages written for agents.
		server.WithRecovery(),
		server.WithInstructions("sandboxer runs commands in hardened, disposable Docker sandboxes. "+
			"Use run_command; long commands return a job_id with the output so far — continue with read_output, get_job, send_input or kill_job."),
	)
	s := &Server{mcp: srv, notifier: &notifier{srv: srv}}
	deps.Notifier = s.notifier
	s.deps = deps
	for _, t := range tools.All(deps) {
		if len(enabled) > 0 && !enabled[t.Toolset] {
			continue
		}
		srv.AddTool(t.Def, t.Handler)
	}
	s.addResources()
	return s, nil
}

// MCP exposes the underlying server (for in-process tests).
func (s *Server) MCP() *server.MCPServer { return s.mcp }

// ServeStdio serves one client over stdin/stdout until stdin ends or ctx is
// cancelled. Nothing but MCP messages is ever written to stdout.
func (s *Server) ServeStdio(ctx context.Context, stdin io.Reader, stdout io.Writer, errLog *log.Logger) error {
	// Progress notifications are counted as they reach stdout (see progressWriter).
	s.notifier.w = newProgressWriter(stdout)
	stdio := server.NewStdioServer(s.mcp)
	server.WithWorkerPoolSize(workerPoolSize)(stdio)
	server.WithQueueSize(256)(stdio)
	server.WithErrorLogger(errLog)(stdio)
	err := stdio.Listen(ctx, newLineLimiter(stdin, maxMessageBytes), s.notifier.w)
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (s *Server) addResources() {
	recordTmpl := mcp.NewResourceTemplate("job://{job_id}", "job",
		mcp.WithTemplateDescription("A job's record as JSON"), mcp.WithTemplateMIMEType("application/json"))
	s.mcp.AddResourceTemplate(recordTmpl, func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		id, ok := strings.CutPrefix(req.Params.URI, "job://")
		if !ok || strings.Contains(id, "/") {
			return nil, fmt.Errorf("not a job record URI: %s", req.Params.URI)
		}
		rec, err := s.deps.Jobs.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		data, err := json.MarshalIndent(tools.RecordOf(rec), "", "  ")
		if err != nil {
			return nil, err
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json", Text: string(data)}}, nil
	})
	outputTmpl := mcp.NewResourceTemplate("job://{job_id}/output", "job output",
		mcp.WithTemplateDescription("A job's captured output (both streams, interleaved), as text; the first 1 MiB"),
		mcp.WithTemplateMIMEType("text/plain"))
	s.mcp.AddResourceTemplate(outputTmpl, func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		rest, _ := strings.CutPrefix(req.Params.URI, "job://")
		id, ok := strings.CutSuffix(rest, "/output")
		if !ok {
			return nil, fmt.Errorf("not a job output URI: %s", req.Params.URI)
		}
		zero := int64(0)
		r, err := s.deps.Jobs.Read(ctx, id, job.ReadRequest{Stream: output.Both, Cursor: &zero, MaxBytes: resourceOutputBytes, StripANSI: true, Peek: true})
		if err != nil {
			return nil, err
		}
		text, _ := output.ToText(r.Data)
		if r.HasMore {
			text += "\n... [more output: read_output with cursor " + fmt.Sprint(r.NextCursor) + "]\n"
		}
		return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "text/plain", Text: text}}, nil
	})
}

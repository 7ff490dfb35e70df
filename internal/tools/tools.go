// Package tools holds one constructor per MCP tool: each returns the tool's
// definition (name, title, annotations, input and output schemas) and its
// handler, which turns arguments into a job-manager call and its result.
//
// Error rule: anything the caller can act on — a bad argument, an unknown job,
// a limit exceeded, the engine down, an image missing — is a tool result with
// isError set and a message saying what was wrong and what to do. A Go error is
// returned only for a fault of the server itself. A non-zero exit code is a
// result, not an error.
package tools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/blocklist"
	"github.com/sandboxer/sandboxer/internal/deps"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/pool"
	"github.com/sandboxer/sandboxer/internal/template"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// Toolsets an operator can switch on and off.
const (
	ToolsetExec = "exec" // running things
	ToolsetJobs = "jobs" // inspecting and steering jobs
	ToolsetInfo = "info" // read-only facts
)

// Notifier delivers progress notifications. Flush returns once every
// notification sent for a token has been written, so none can follow the result.
type Notifier interface {
	Progress(ctx context.Context, token mcp.ProgressToken, progress float64, message string) bool
	Flush(ctx context.Context, token mcp.ProgressToken)
}

// Deps is what the tools need.
type Deps struct {
	Jobs      *job.Manager
	Policy    *policy.Policy
	Languages *lang.Registry
	Runtime   sandbox.Runtime
	Pool      *pool.Pool // nil when the policy turns the warm pool off
	Notifier  Notifier
	// Workspaces manages named, persistent sandboxes; nil = none.
	Workspaces *workspace.Manager
	// Dependencies installs and caches run_script's dependencies; nil = none.
	Dependencies *deps.Manager
	// Blocklist is the command block list every entry point that runs shell
	// checks (checkBlocked); nil allows everything.
	Blocklist *blocklist.List
	// Processes lists and signals processes inside sandboxes (the engine,
	// never the warm pool in front of it); nil when the runtime cannot.
	Processes sandbox.ProcessInspector
	// Templates builds and finds templates; nil = none.
	Templates *template.Manager
}

// Tool is a definition with its handler and toolset.
type Tool struct {
	Toolset string
	Def     mcp.Tool
	Handler server.ToolHandlerFunc
	// TaskResult, for a tool that may run as an MCP task, builds the result
	// the plain call would have returned from the finished job it started.
	TaskResult func(ctx context.Context, rec *record.Job) *mcp.CallToolResult
	// args is the input schema the handler binds arguments with.
	args *argSchema
}

// All returns every tool, in the order they are listed.
func All(d Deps) []Tool {
	tools := []Tool{
		RunCommand(d),
		GetJob(d),
		ListJobs(d),
		ReadOutput(d),
		SendInput(d),
		KillJob(d),
		StartSession(d),
		ResizeTerminal(d),
		PruneJobs(d),
		ListLanguages(d),
		RunScript(d),
		BenchmarkScript(d),
		CreateWorkspace(d),
		ListWorkspaces(d),
		DeleteWorkspace(d),
		WorkspaceChanges(d),
		ExposePort(d),
		ListDependencyCaches(d),
		PruneDependencyCaches(d),
		WriteFile(d),
		ReadFile(d),
		ListFiles(d),
		InstallPackages(d),
		ListProcesses(d),
		KillProcess(d),
		ListBlockedCommands(d),
		BlockCommand(d),
		UnblockCommand(d),
		ListCommands(d),
		SnapshotWorkspace(d),
	}
	// Each description ends with its docs resource, the URI alone (it says
	// what it is: a "Docs:" before it cost 30 tools 45 tokens).
	for i := range tools {
		tools[i].Def.Description += " " + DocURIPrefix + tools[i].Def.Name
	}
	return tools
}

// annotations sets all four hints explicitly, as the tool contract requires.
func annotations(title string, readOnly, destructive, idempotent, openWorld bool) mcp.ToolOption {
	_ = title // the tool's own title (WithToolTitle) says it once: annotations.title would repeat it in tools/list
	return mcp.WithToolAnnotation(mcp.ToolAnnotation{
		ReadOnlyHint:    mcp.ToBoolPtr(readOnly),
		DestructiveHint: mcp.ToBoolPtr(destructive),
		IdempotentHint:  mcp.ToBoolPtr(idempotent),
		OpenWorldHint:   mcp.ToBoolPtr(openWorld),
	})
}

// errorResult is a tool error the caller can act on.
func errorResult(format string, args ...any) *mcp.CallToolResult {
	return mcp.NewToolResultError(fmt.Sprintf(format, args...))
}

// failure turns an error from below into a tool error. The errors of the
// layers below already say what was wrong and what to do (engine unreachable,
// image missing, unknown job, queue full, limit over its ceiling); a limit
// error is shown by its message alone, a bad list cursor is explained, and
// the packages' own prefixes ("store: ", "output: ", "json: ") are dropped.
func failure(err error) *mcp.CallToolResult {
	var limitErr *policy.LimitError
	if errors.As(err, &limitErr) {
		return errorResult("%s", limitErr.Message)
	}
	if errors.Is(err, record.ErrBadCursor) {
		return errorResult("cursor is not one list_jobs gave: pass next_cursor of the previous page unchanged, or omit cursor for the first page")
	}
	msg := cleanMessage(err.Error())
	if errors.Is(err, record.ErrJobNotFound) && !strings.Contains(msg, "list_jobs") {
		return errorResult("%s: list_jobs shows the known ones", msg) // the store's, which names it but says no more
	}
	return errorResult("%s", msg)
}

// internalPrefix matches the package prefixes of errors from below, at the
// start of the message or of a wrapped part.
var internalPrefix = regexp.MustCompile(`(^|: |\()(?:store|output|json|sqlite): `)

// cleanMessage drops internal package prefixes from an error message.
func cleanMessage(msg string) string {
	return internalPrefix.ReplaceAllString(msg, "$1")
}

// structured returns structuredContent plus a short text for clients that
// read only text.
func structured(v any, text string) *mcp.CallToolResult {
	return mcp.NewToolResultStructured(v, text)
}

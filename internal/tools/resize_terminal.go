package tools

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/terminal"
)

// ResizeTerminalArgs are resize_terminal's arguments.
type ResizeTerminalArgs struct {
	JobID string `json:"job_id" jsonschema:"session job id"`
	Rows  int    `json:"rows"`
	Cols  int    `json:"cols"`
}

// ResizeTerminalResult is resize_terminal's result.
type ResizeTerminalResult struct {
	JobID  string `json:"job_id" jsonschema:"the session's job id"`
	Rows   int    `json:"rows" jsonschema:"terminal rows now"`
	Cols   int    `json:"cols" jsonschema:"terminal columns now"`
	Status string `json:"status" jsonschema:"the session's status"`
}

func ResizeTerminal(d Deps) Tool {
	in := inputSchema[ResizeTerminalArgs](map[string]param{
		"rows": between(terminal.MinRows, terminal.MaxRows).describe("terminal rows"),
		"cols": between(terminal.MinCols, terminal.MaxCols).describe("terminal columns"),
	})
	def := mcp.NewTool("resize_terminal",
		mcp.WithDescription("Change a pty session's terminal size."),
		mcp.WithToolTitle("Resize a session's terminal"),
		annotations("Resize a session's terminal", false, false, true, false),
		withInput(in),
		withOutput[ResizeTerminalResult](),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ResizeTerminalArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if err := validateJobID(args.JobID); err != nil {
			return errorResult("%v", err), nil
		}
		rec, err := d.Jobs.Resize(ctx, args.JobID, args.Rows, args.Cols)
		if err != nil {
			return failure(err), nil
		}
		res := ResizeTerminalResult{JobID: rec.ID, Rows: args.Rows, Cols: args.Cols, Status: rec.Status}
		return structured(res, fmt.Sprintf("session %s: terminal now %d rows x %d cols", rec.ID, args.Rows, args.Cols)), nil
	}}
}

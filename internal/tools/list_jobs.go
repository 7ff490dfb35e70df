package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/store"
)

// ListJobsArgs are list_jobs' arguments.
type ListJobsArgs struct {
	Status    []string `json:"status,omitempty" jsonschema:"only jobs with one of these statuses"`
	Kind      string   `json:"kind,omitempty" jsonschema:"only jobs of this kind: command, script or session"`
	Workspace string   `json:"workspace,omitempty" jsonschema:"only jobs in this workspace"`
	Limit     int      `json:"limit,omitempty" jsonschema:"page size, 1 to 500 (default 50)"`
	Cursor    string   `json:"cursor,omitempty" jsonschema:"next_cursor of the previous page"`
}

// JobSummary is one line of list_jobs.
type JobSummary struct {
	JobID      string `json:"job_id"`
	Kind       string `json:"kind"`
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Command    string `json:"command" jsonschema:"first 200 bytes of the command"`
	Language   string `json:"language"`
	Workspace  string `json:"workspace,omitempty"`
	CreatedAt  string `json:"created_at"`
	DurationMS int64  `json:"duration_ms"`
}

// ListJobsResult is list_jobs' result.
type ListJobsResult struct {
	Jobs       []JobSummary `json:"jobs"`
	NextCursor string       `json:"next_cursor,omitempty" jsonschema:"pass as cursor for the next page; empty when this is the last"`
}

var knownStatuses = []string{"queued", "running", "completed", "failed", "timed_out", "killed"}

func checkStatuses(statuses []string) error {
	for _, s := range statuses {
		known := false
		for _, k := range knownStatuses {
			known = known || s == k
		}
		if !known {
			return fmt.Errorf("status %q is not one of %s", truncate(s, 32), strings.Join(knownStatuses, ", "))
		}
	}
	return nil
}

func ListJobs(d Deps) Tool {
	def := mcp.NewTool("list_jobs",
		mcp.WithDescription("List jobs, newest first, optionally filtered by status, kind and workspace; paginated with limit and cursor."),
		mcp.WithToolTitle("List jobs"),
		annotations("List jobs", true, false, true, false),
		mcp.WithInputSchema[ListJobsArgs](),
		mcp.WithOutputSchema[ListJobsResult](),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListJobsArgs
		if err := bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if err := checkStatuses(args.Status); err != nil {
			return errorResult("%v", err), nil
		}
		switch args.Kind {
		case "", "command", "script", "session":
		default:
			return errorResult("kind %q is not one of command, script, session", truncate(args.Kind, 32)), nil
		}
		if args.Limit < 0 || args.Limit > 500 {
			return errorResult("limit %d is out of range: give 1 to 500", args.Limit), nil
		}
		jobs, next, err := d.Jobs.List(ctx, store.ListFilter{
			Status: args.Status, Kind: args.Kind, Workspace: args.Workspace, Limit: args.Limit, Cursor: args.Cursor,
		})
		if err != nil {
			return failure(err), nil
		}
		res := ListJobsResult{Jobs: []JobSummary{}, NextCursor: next}
		var b strings.Builder
		fmt.Fprintf(&b, "%d jobs", len(jobs))
		for _, j := range jobs {
			res.Jobs = append(res.Jobs, JobSummary{
				JobID: j.ID, Kind: j.Kind, Status: j.Status, Reason: j.Reason, ExitCode: j.ExitCode,
				Command: truncate(j.Command, 200), Language: j.Language, Workspace: j.Workspace,
				CreatedAt: stamp(j.CreatedAt), DurationMS: durationOf(j),
			})
			fmt.Fprintf(&b, "\n%s %-9s %s", j.ID, j.Status, truncate(strings.ReplaceAll(j.Command, "\n", " "), 80))
		}
		if next != "" {
			b.WriteString("\n(more: pass next_cursor as cursor)")
		}
		return structured(res, b.String()), nil
	}}
}

package tools

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/workspace"
)

// ListJobsArgs are list_jobs' arguments.
type ListJobsArgs struct {
	Status []string `json:"status,omitempty"`
	Kind   string   `json:"kind,omitempty"`
	// Workspace filters by workspace name.
	Workspace string `json:"workspace,omitempty" jsonschema:"only jobs of this workspace"`
	Limit     int    `json:"limit,omitempty"`
	Cursor    string `json:"cursor,omitempty" jsonschema:"next_cursor of the previous page"`
}

// JobSummary is one line of list_jobs.
type JobSummary struct {
	JobID      string   `json:"job_id" jsonschema:"the job's id"`
	Kind       string   `json:"kind" jsonschema:"command, script or session"`
	Status     string   `json:"status" jsonschema:"queued, running, completed, failed, timed_out or killed"`
	Reason     string   `json:"reason,omitempty" jsonschema:"why it ended"`
	ExitCode   *int     `json:"exit_code,omitempty" jsonschema:"exit code, once it ended"`
	Command    string   `json:"command" jsonschema:"first 200 bytes of the command"`
	Language   string   `json:"language" jsonschema:"the language it ran in"`
	Workspace  string   `json:"workspace,omitempty" jsonschema:"the workspace it ran in, if any"`
	CreatedAt  string   `json:"created_at" jsonschema:"when it was submitted (RFC 3339, UTC)"`
	DurationMS int64    `json:"duration_ms" jsonschema:"run time so far, or in all, in milliseconds"`
	Usage      *Usage   `json:"usage,omitempty" jsonschema:"what its whole process tree used, once it ended"`
	Session    *Session `json:"session,omitempty" jsonschema:"a session's mode, terminal size, name and idle deadline (sessions only)"`
}

// ListJobsResult is list_jobs' result.
type ListJobsResult struct {
	Jobs       []JobSummary `json:"jobs" jsonschema:"jobs, newest first"`
	NextCursor string       `json:"next_cursor,omitempty" jsonschema:"pass as cursor for the next page; empty when this is the last"`
}

var knownStatuses = []string{record.StatusQueued, record.StatusRunning, record.StatusCompleted, record.StatusFailed, record.StatusTimedOut, record.StatusKilled}

// knownKinds are the kinds a job record can have: run_command's jobs are
// command, start_session's session; the record field already holds script.
var knownKinds = []string{job.KindCommand, job.KindScript, job.KindSession}

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
	in := inputSchema[ListJobsArgs](map[string]param{
		"status": oneOf(knownStatuses...).describe("only these statuses"),
		"kind":   oneOf(knownKinds...).describe("only this kind"),
		"limit": between(1, record.MaxListLimit).describe(
			"page size; default %d", record.DefaultListLimit),
	})
	def := mcp.NewTool("list_jobs",
		mcp.WithDescription("Jobs, newest first, filtered by status, kind or workspace; paginated."),
		mcp.WithToolTitle("List jobs"),
		annotations("List jobs", true, false, true, false),
		withInput(in),
		withOutput[ListJobsResult](),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListJobsArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if err := checkStatuses(args.Status); err != nil {
			return errorResult("%v", err), nil
		}
		if args.Kind != "" && !slices.Contains(knownKinds, args.Kind) {
			return errorResult("kind %q is not one of %s", truncate(args.Kind, 32), strings.Join(knownKinds, ", ")), nil
		}
		if args.Workspace != "" {
			if err := workspace.CheckRef(args.Workspace); err != nil {
				return errorResult("workspace: %v", err), nil
			}
		}
		if args.Limit < 0 || args.Limit > record.MaxListLimit {
			return errorResult("limit %d is out of range: 1 to %d", args.Limit, record.MaxListLimit), nil
		}
		jobs, next, err := d.Jobs.List(ctx, record.ListFilter{
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
				CreatedAt: stamp(j.CreatedAt), DurationMS: durationOf(j), Usage: usageOf(j), Session: sessionOf(j),
			})
			fmt.Fprintf(&b, "\n%s %-9s %s", j.ID, j.Status, truncate(strings.ReplaceAll(j.Command, "\n", " "), 80))
		}
		if next != "" {
			b.WriteString("\n(more: pass next_cursor as cursor)")
		}
		return structured(res, b.String()), nil
	}}
}

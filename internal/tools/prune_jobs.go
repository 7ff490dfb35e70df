package tools

import (
	"context"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// PruneJobsArgs are prune_jobs' arguments.
type PruneJobsArgs struct {
	OlderThanS *float64 `json:"older_than_s,omitempty" jsonschema:"only jobs that ended at least this many seconds ago (default 0: any finished job)"`
	Status     []string `json:"status,omitempty" jsonschema:"only finished jobs with one of these statuses"`
}

// PruneJobsResult is prune_jobs' result.
type PruneJobsResult struct {
	Removed    int      `json:"removed"`
	RemovedIDs []string `json:"removed_ids"`
	Remaining  int      `json:"remaining"`
}

func PruneJobs(d Deps) Tool {
	def := mcp.NewTool("prune_jobs",
		mcp.WithDescription("Delete finished jobs' records and stored output. Queued and running jobs are never touched."),
		mcp.WithToolTitle("Prune finished jobs"),
		annotations("Prune finished jobs", false, true, true, false),
		mcp.WithInputSchema[PruneJobsArgs](),
		mcp.WithOutputSchema[PruneJobsResult](),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args PruneJobsArgs
		if err := bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		older := 0.0
		if args.OlderThanS != nil {
			older = *args.OlderThanS
		}
		if !(older >= 0 && older <= 10*365*86400) {
			return errorResult("older_than_s must be between 0 and ten years, got %v", older), nil
		}
		if err := checkStatuses(args.Status); err != nil {
			return errorResult("%v", err), nil
		}
		for _, s := range args.Status {
			if s == "queued" || s == "running" {
				return errorResult("status %q: only finished jobs can be pruned (kill_job first)", s), nil
			}
		}
		ids, remaining, err := d.Jobs.Prune(ctx, time.Duration(older*float64(time.Second)), args.Status)
		if err != nil {
			return failure(err), nil
		}
		if ids == nil {
			ids = []string{}
		}
		res := PruneJobsResult{Removed: len(ids), RemovedIDs: ids, Remaining: remaining}
		return structured(res, fmt.Sprintf("removed %d finished jobs; %d remain", len(ids), remaining)), nil
	}}
}

package tools

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sandboxer/sandboxer/internal/record"
)

// PruneJobsArgs are prune_jobs' arguments.
type PruneJobsArgs struct {
	OlderThanS *float64 `json:"older_than_s,omitempty"`
	Status     []string `json:"status,omitempty"`
}

// PruneJobsResult is prune_jobs' result.
type PruneJobsResult struct {
	Removed    int      `json:"removed" jsonschema:"how many jobs were deleted"`
	RemovedIDs []string `json:"removed_ids" jsonschema:"the ids of the deleted jobs"`
	Remaining  int      `json:"remaining" jsonschema:"how many jobs are left"`
}

// finishedStatuses are the statuses prune_jobs can delete.
var finishedStatuses = []string{record.StatusCompleted, record.StatusFailed, record.StatusTimedOut, record.StatusKilled}

// maxOlderThanS is ten years.
const maxOlderThanS = 10 * 365 * 86400

func PruneJobs(d Deps) Tool {
	in := inputSchema[PruneJobsArgs](map[string]param{
		"older_than_s": between(0, maxOlderThanS).describe(
			"only jobs ended this many seconds ago or more; default 0"),
		// The handler says what to do about queued and running.
		"status": oneOf(finishedStatuses...).checkedByHandler().describe(
			"only these statuses"),
	})
	def := mcp.NewTool("prune_jobs",
		mcp.WithDescription("Delete finished jobs' records and stored output."),
		mcp.WithToolTitle("Prune finished jobs"),
		annotations("Prune finished jobs", false, true, true, false),
		withInput(in),
		withOutput[PruneJobsResult](),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args PruneJobsArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		older := 0.0
		if args.OlderThanS != nil {
			older = *args.OlderThanS
		}
		if !(older >= 0 && older <= maxOlderThanS) {
			return errorResult("older_than_s %s is out of range: 0 to %d (ten years)", num(older), maxOlderThanS), nil
		}
		for _, s := range args.Status {
			if s == record.StatusQueued || s == record.StatusRunning {
				return errorResult("status %q: only finished jobs can be pruned (kill_job first)", s), nil
			}
			if !slices.Contains(finishedStatuses, s) {
				return errorResult("status %q is not one of %s", truncate(s, 32), strings.Join(finishedStatuses, ", ")), nil
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

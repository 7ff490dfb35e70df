package tools

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
)

// GetJobArgs are get_job's arguments.
type GetJobArgs struct {
	JobID string   `json:"job_id" jsonschema:"job id"`
	WaitS *float64 `json:"wait_s,omitempty"`
}

func GetJob(d Deps) Tool {
	in := inputSchema[GetJobArgs](map[string]param{
		"wait_s": waitParam(d.policyOrDefault(), "seconds to wait", 0),
	})
	def := mcp.NewTool("get_job",
		mcp.WithDescription("A job's record: status, reason, exit code, command, limits, timings, usage; wait_s waits for its end first."),
		mcp.WithToolTitle("Get a job"),
		annotations("Get a job", true, false, true, false),
		withInput(in),
		withDescribedOutput[JobRecord]("status", "reason", "kind"),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args GetJobArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if err := validateJobID(args.JobID); err != nil {
			return errorResult("%v", err), nil
		}
		wait, err := d.Policy.ResolveWait(orZero(args.WaitS))
		if err != nil {
			return failure(err), nil
		}
		stop := d.startProgress(ctx, req, args.JobID)
		rec, err := d.Jobs.Wait(ctx, args.JobID, wait)
		stop()
		if err != nil {
			return failure(err), nil
		}
		return structured(RecordOf(rec), statusLine(rec)), nil
	}}
}

func orZero(v *float64) *float64 {
	if v == nil {
		zero := 0.0
		return &zero
	}
	return v
}

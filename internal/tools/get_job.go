package tools

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
)

// GetJobArgs are get_job's arguments.
type GetJobArgs struct {
	JobID string   `json:"job_id" jsonschema:"the job's id (a uuid from run_command or list_jobs)"`
	WaitS *float64 `json:"wait_s,omitempty"`
}

func GetJob(d Deps) Tool {
	in := inputSchema[GetJobArgs](map[string]param{
		"wait_s": waitParam(d.policyOrDefault(), "wait up to this many seconds for the job to finish, returning as soon as it does", 0),
	})
	def := mcp.NewTool("get_job",
		mcp.WithDescription("A job's full record: status, reason, exit code, command, language, limits, timings and output sizes. With wait_s, waits for the job to finish first (returning early if it does)."),
		mcp.WithToolTitle("Get a job"),
		annotations("Get a job", true, false, true, false),
		withInput(in),
		withOutput[JobRecord](),
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

package tools

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/record"
)

// TaskCall marks a tools/call a client made as an MCP task (params.task):
// the tool submits its job in the background and returns at once; the task's
// id is the job's. The MCP layer (internal/mcpserver) puts it in the context
// and reads JobID back.
type TaskCall struct {
	TTLMS int64  // the task's time to live, already clamped
	JobID string // set by the tool once its job is submitted
	// Deferred: the server decides (the 2026-07-28 tasks extension). The call
	// waits for its job as a plain call does (wait_s) and becomes a task only
	// if the job still runs then; JobID stays empty for a job that ended.
	Deferred bool
}

type taskCallKey struct{}

// WithTask marks ctx's call as the task t.
func WithTask(ctx context.Context, t *TaskCall) context.Context {
	return context.WithValue(ctx, taskCallKey{}, t)
}

func taskCallOf(ctx context.Context) *TaskCall {
	t, _ := ctx.Value(taskCallKey{}).(*TaskCall)
	return t
}

// asTask, for a call that may become a task, records in jr what TaskResult
// needs to rebuild the call's result later (render, the tool's own shape),
// and returns the call's task mark (nil for a plain call).
func asTask(ctx context.Context, req mcp.CallToolRequest, jr *job.Request, render any) (*TaskCall, error) {
	t := taskCallOf(ctx)
	if t == nil {
		return nil, nil
	}
	raw, err := json.Marshal(render)
	if err != nil {
		return nil, err
	}
	jr.Details.Task = &record.TaskDetails{Tool: req.Params.Name, TTLMS: t.TTLMS, Render: raw}
	return t, nil
}

// now says whether the call becomes a task at once, without waiting.
func (t *TaskCall) now() bool { return t != nil && !t.Deferred }

// becomes says whether the call, its job waited for, answers as a task:
// always when the client asked for one, and while the job still runs when
// the server decides.
func (t *TaskCall) becomes(rec *record.Job) bool {
	return t != nil && (!t.Deferred || !record.Finished(rec.Status))
}

// taskStarted hands the submitted job to the MCP layer, which answers the
// call with a CreateTaskResult; this result is not sent.
func taskStarted(ctx context.Context, rec *record.Job) *mcp.CallToolResult {
	taskCallOf(ctx).JobID = rec.ID
	// job_id and status are what the audit line takes from a result.
	return structured(map[string]string{"job_id": rec.ID, "status": rec.Status}, fmt.Sprintf("task: job %s submitted", rec.ID))
}

// taskResult makes a Tool's TaskResult from the function that builds the
// call's result from its job and its render R (what asTask recorded).
func taskResult[R any](build func(context.Context, *record.Job, R) *mcp.CallToolResult) func(context.Context, *record.Job) *mcp.CallToolResult {
	return func(ctx context.Context, rec *record.Job) *mcp.CallToolResult {
		var r R
		if rec.Details.Task == nil {
			return errorResult("job %s was not started as a task", rec.ID)
		}
		if err := json.Unmarshal(rec.Details.Task.Render, &r); err != nil {
			return failure(fmt.Errorf("task of job %s: %w", rec.ID, err))
		}
		return build(ctx, rec, r)
	}
}

// StatusLine is the one-line account of a job that results start with.
func StatusLine(rec *record.Job) string { return statusLine(rec) }

package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// The tasks extension of the 2026-07-28 revision (io.modelcontextprotocol/
// tasks, SEP-2663), beside the 2025-11-25 tasks of tasks.go that older
// clients use. A request of the stateless revision says in its _meta which
// revision it speaks and whether its client declared the extension; the
// era decides which of the two answers it.
//
// The server decides what becomes a task: a run_command or run_script call
// from a client that declared the extension waits for its job as a plain
// call does (wait_s), and answers with a CreateTaskResult only if the job
// still runs then; a quick job answers as a plain call. The task is the
// job's (its id is the job's id), kept in the store as the 2025 tasks are:
// the tenant's, across a restart. tasks/get answers the detailed task, with
// the tool's result inlined once it ended; tasks/cancel kills the job and
// acknowledges; tasks/update acknowledges input responses (approvals);
// tasks/list and tasks/result are gone in this revision (-32601). A client
// that did not declare the extension gets -32021 from tasks/*.

// TasksExtension is the extension's identifier.
const TasksExtension = "io.modelcontextprotocol/tasks"

// methodTasksUpdate is the extension's method for input responses.
const methodTasksUpdate = "tasks/update"

// requestEra is what a request's _meta says about its client.
type requestEra struct {
	modern   bool // the stateless 2026-07-28 revision, or a later one
	tasksExt bool // it declared the tasks extension in its capabilities
}

// eraOf reads a request's era from its params.
func eraOf(params []byte) requestEra {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if len(params) == 0 || json.Unmarshal(params, &p) != nil || p.Meta == nil {
		return requestEra{}
	}
	var version string
	_ = json.Unmarshal(p.Meta[mcp.MetaKeyProtocolVersion], &version)
	era := requestEra{modern: mcp.IsModernProtocol(version)}
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if era.modern && json.Unmarshal(p.Meta[mcp.MetaKeyClientCapabilities], &caps) == nil {
		v, ok := caps.Extensions[TasksExtension]
		era.tasksExt = ok && string(v) != "null"
	}
	return era
}

// missingTasksExtension is -32021 for a request that needs the extension.
func missingTasksExtension(method string) *rpcError {
	return &rpcError{code: mcp.MISSING_REQUIRED_CLIENT_CAPABILITY,
		msg: fmt.Sprintf("%s needs the tasks extension: declare %q in params._meta[%q].extensions", method, TasksExtension, mcp.MetaKeyClientCapabilities),
		data: map[string]any{"requiredCapabilities": map[string]any{
			"extensions": map[string]any{TasksExtension: map[string]any{}}}}}
}

// extTask is a task as the extension states it: CreateTaskResult (resultType
// "task"), tasks/get's detailed task (resultType "complete") and
// notifications/tasks (no resultType).
type extTask struct {
	ResultType     string                   `json:"resultType,omitempty"`
	TaskID         string                   `json:"taskId"`
	Status         mcp.TaskStatus           `json:"status"`
	StatusMessage  string                   `json:"statusMessage,omitempty"`
	CreatedAt      string                   `json:"createdAt"`
	LastUpdatedAt  string                   `json:"lastUpdatedAt"`
	TTLMS          *int64                   `json:"ttlMs"` // null: unlimited
	PollIntervalMS int64                    `json:"pollIntervalMs"`
	Result         any                      `json:"result,omitempty"`
	Error          *mcp.JSONRPCErrorDetails `json:"error,omitempty"`
	InputRequests  map[string]any           `json:"inputRequests,omitempty"`
}

// ack is the empty acknowledgement of tasks/update and tasks/cancel.
var ack = map[string]string{"resultType": string(mcp.ResultTypeComplete)}

// handleExtTask answers a request of the 2026-07-28 era that the task layer
// took (isTaskRequest).
func (s *Server) handleExtTask(ctx context.Context, method string, params json.RawMessage, era requestEra) (any, *rpcError) {
	switch method {
	case string(mcp.MethodToolsCall):
		return s.callMayBecomeTask(ctx, params)
	case string(mcp.MethodTasksList), string(mcp.MethodTasksResult):
		return nil, &rpcError{code: mcp.METHOD_NOT_FOUND, msg: fmt.Sprintf(
			"%s is not part of the 2026-07-28 revision: poll tasks/get, whose answer carries the result once the task has ended", method)}
	}
	if !era.tasksExt {
		return nil, missingTasksExtension(method)
	}
	t, rerr := s.namedTask(ctx, method, params)
	if rerr != nil {
		return nil, rerr
	}
	if t, rerr = s.expireHeld(ctx, t); rerr != nil {
		return nil, rerr
	}
	switch method {
	case string(mcp.MethodTasksGet):
		return s.detailedTask(ctx, t, mcp.ResultTypeComplete), nil
	case methodTasksUpdate:
		var p struct {
			InputResponses map[string]json.RawMessage `json:"inputResponses"`
		}
		var responses mcp.InputResponses
		if json.Unmarshal(params, &p) != nil || p.InputResponses == nil {
			return nil, invalidParams("tasks/update: params.inputResponses is required (an object of responses by inputRequests key)")
		}
		// The one request a task of this server asks is its approval
		// (approvals.go); any other key is one not outstanding, which the
		// extension says to ignore.
		if raw, ok := p.InputResponses[approvalKey]; ok && t.Status == record.TaskInputRequired {
			var r mcp.InputResponse
			if err := json.Unmarshal(raw, &r); err != nil {
				return nil, invalidParams("tasks/update: params.inputResponses.%s: %v", approvalKey, err)
			}
			responses = mcp.InputResponses{approvalKey: r}
			if rerr := s.answerHeldTask(ctx, t, approved(responses)); rerr != nil {
				return nil, rerr
			}
		}
		return ack, nil
	}
	if !s.taskOf(ctx, t).Status.IsTerminal() {
		if err := s.stopTask(ctx, t); err != nil {
			return nil, internalError(err)
		}
	}
	return ack, nil
}

// callMayBecomeTask runs a tools/call of a client that declared the
// extension: a job tool's call becomes a task if its job still runs after
// wait_s; any other call, and a job that ended, answers as it is.
func (s *Server) callMayBecomeTask(ctx context.Context, params json.RawMessage) (any, *rpcError) {
	var p struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("tools/call: params: %v", err)
	}
	msg, err := toolCallMessage(params)
	if err != nil {
		return nil, internalError(err)
	}
	if task, held := s.holdAsTask(ctx, p.Name, params); held != nil || task != nil {
		if held != nil {
			return nil, held
		}
		created := s.extTaskOf(s.taskOf(ctx, task))
		created.ResultType = "task"
		return created, nil
	}
	t, ok := s.tools[p.Name]
	if !ok || !taskTool(t) {
		return answerOf(s.mcp.HandleMessage(ctx, msg))
	}
	if t.TaskResult == nil {
		return s.callOrTask(ctx, p.Name, msg)
	}
	ttl, _ := s.taskTTL(nil)
	call := &tools.TaskCall{TTLMS: ttl.Milliseconds(), Deferred: true}
	resp := s.mcp.HandleMessage(tools.WithTask(ctx, call), msg)
	if call.JobID == "" {
		return answerOf(resp)
	}
	task := &record.Task{ID: call.JobID, JobID: call.JobID, Tool: p.Name, TTLMS: call.TTLMS}
	if err := s.deps.Jobs.CreateTask(ctx, task); err != nil {
		return nil, internalError(err)
	}
	created := s.extTaskOf(s.taskOf(ctx, task))
	created.ResultType = "task"
	return created, nil
}

// callOrTask runs a call of several jobs or none (benchmark_script,
// install_packages) in this server: it answers as a plain call if it ends
// within the policy's default wait (jobs.default_wait_s), and hands a task
// otherwise, which keeps the call's result when it ends.
func (s *Server) callOrTask(ctx context.Context, tool string, msg []byte) (any, *rpcError) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	answered := make(chan mcp.JSONRPCMessage, 1)
	go func() { answered <- s.mcp.HandleMessage(runCtx, msg) }()
	wait := time.NewTimer(time.Duration(s.deps.Policy.Jobs.DefaultWaitS) * time.Second)
	defer wait.Stop()
	select {
	case resp := <-answered:
		cancel()
		return answerOf(resp)
	case <-wait.C:
	case <-ctx.Done(): // the caller left: the call goes on as a task nobody polls
	}
	ttl, _ := s.taskTTL(nil)
	task := &record.Task{ID: uuid.NewString(), Tool: tool, TTLMS: ttl.Milliseconds()}
	if err := s.deps.Jobs.CreateTask(ctx, task); err != nil {
		cancel()
		return nil, internalError(err)
	}
	s.endInServer(runCtx, cancel, task, answered, nil)
	created := s.extTaskOf(s.taskOf(ctx, task))
	created.ResultType = "task"
	return created, nil
}

// answerOf is what mcp-go answered, as the task layer answers it.
func answerOf(resp mcp.JSONRPCMessage) (any, *rpcError) {
	switch r := resp.(type) {
	case mcp.JSONRPCResponse:
		return r.Result, nil
	case mcp.JSONRPCError:
		return nil, &rpcError{code: r.Error.Code, msg: r.Error.Message, data: r.Error.Data}
	}
	return nil, &rpcError{code: mcp.INTERNAL_ERROR, msg: "the call gave no answer"}
}

// extTaskOf states a task in the extension's shape, without its payload.
func (s *Server) extTaskOf(task mcp.Task) *extTask {
	e := &extTask{TaskID: task.TaskId, Status: task.Status, StatusMessage: task.StatusMessage,
		CreatedAt: task.CreatedAt, LastUpdatedAt: task.LastUpdatedAt, TTLMS: task.TTL,
		PollIntervalMS: TaskPollInterval.Milliseconds()}
	if e.TTLMS != nil && *e.TTLMS <= 0 {
		e.TTLMS = nil
	}
	return e
}

// detailedTask is the task with its payload: the call's result once it
// completed, the error once it failed.
func (s *Server) detailedTask(ctx context.Context, t *record.Task, resultType mcp.ResultType) *extTask {
	e := s.extTaskOf(s.taskOf(ctx, t))
	e.ResultType = string(resultType)
	if t.JobID == "" && e.Status == mcp.TaskStatusFailed && len(t.Result) > 0 {
		// A call this server ran that ended with isError: the revision's
		// tasks call that completed (failed is for JSON-RPC errors).
		e.Status = mcp.TaskStatusCompleted
	}
	switch e.Status {
	case mcp.TaskStatusInputRequired:
		e.InputRequests = map[string]any{approvalKey: approvalRequest(t.Message)}
	case mcp.TaskStatusCompleted:
		res, rerr := s.endedResult(ctx, t)
		if rerr == nil {
			e.Result = res
			break
		}
		e.Status, e.StatusMessage = mcp.TaskStatusFailed, rerr.msg
		fallthrough
	case mcp.TaskStatusFailed:
		d := mcp.NewJSONRPCErrorDetails(mcp.INTERNAL_ERROR, e.StatusMessage, nil)
		e.Error = &d
	}
	return e
}

// endedResult is an ended task's result, as the plain call would have
// answered it.
func (s *Server) endedResult(ctx context.Context, t *record.Task) (any, *rpcError) {
	if t.JobID == "" {
		var res map[string]any
		if err := json.Unmarshal(t.Result, &res); err != nil || res == nil {
			return nil, &rpcError{code: mcp.INTERNAL_ERROR, msg: fmt.Sprintf("task %s %s without a result: %s", t.ID, t.Status, t.Message)}
		}
		return res, nil
	}
	rec, err := s.deps.Jobs.Get(ctx, t.JobID)
	if err != nil {
		return nil, internalError(err)
	}
	res, rerr := s.rebuiltResult(ctx, t, rec)
	if rerr != nil {
		return nil, rerr
	}
	res.ResultType = mcp.ResultTypeComplete
	return res, nil
}

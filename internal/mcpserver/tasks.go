package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// MCP tasks (the 2025-11-25 revision): a client marks a tools/call as a task
// (params.task) and gets a CreateTaskResult at once; it then polls tasks/get,
// fetches tasks/result, lists with tasks/list and cancels with tasks/cancel.
//
// Tasks are records in the store (record.Task), the tenant's like its jobs,
// so they survive a restart. A tool that runs one job (run_command,
// run_script: tools.Tool.TaskResult) makes a task whose id is the job's and
// whose state is the job's; the result is rebuilt from the job. A tool that
// runs several jobs or none (benchmark_script, install_packages) runs in
// this server and its task keeps its status and result; a server that stops
// first leaves it failed. mcp-go (v1.2.1) keeps tasks in a map of its own
// under ids it makes, so these requests are answered here, in front of it
// (wire for stdio, frontHTTP for Streamable HTTP); the tool call itself
// still goes through mcp-go and every middleware (audit, role, metrics).

// TaskPollInterval is the pollInterval every task states.
const TaskPollInterval = time.Second

// taskWaitSlice is how long one wait on a job lasts inside tasks/result and
// the status watcher (they loop until the job ends or the caller leaves).
const taskWaitSlice = 30 * time.Second

// rpcError is a JSON-RPC error a task request is answered with.
type rpcError struct {
	code int
	msg  string
	data any // the error's data member; nil: none
}

func invalidParams(format string, args ...any) *rpcError {
	return &rpcError{code: mcp.INVALID_PARAMS, msg: fmt.Sprintf(format, args...)}
}

func internalError(err error) *rpcError { return &rpcError{code: mcp.INTERNAL_ERROR, msg: err.Error()} }

// notifyFunc sends one notification to the client that made a request (nil:
// the transport has no way to).
type notifyFunc func(method string, params any)

var taskSeq atomic.Uint64

// toolCallMessage is a tools/call request of the server's own (an id of
// its own) with these params, for mcp-go to handle.
func toolCallMessage(params any) ([]byte, error) {
	return json.Marshal(map[string]any{
		"jsonrpc": mcp.JSONRPC_VERSION, "id": fmt.Sprintf("task~%d", taskSeq.Add(1)),
		"method": mcp.MethodToolsCall, "params": params,
	})
}

// running are the tasks this server runs itself, by id.
type running struct {
	mu    sync.Mutex
	calls map[string]*runningCall
}

type runningCall struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *running) get(id string) *runningCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[id]
}

func (r *running) put(id string, c *runningCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]*runningCall{}
	}
	r.calls[id] = c
}

func (r *running) drop(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.calls, id)
}

// isTaskRequest says whether the task layer answers a request: a tasks/*
// method; a tools/call whose params carry task (2025-11-25); a job tool's
// tools/call from a client that declared the tasks extension (exttasks.go).
func (s *Server) isTaskRequest(method string, params []byte) bool {
	switch method {
	case string(mcp.MethodTasksGet), string(mcp.MethodTasksList), string(mcp.MethodTasksResult), string(mcp.MethodTasksCancel), methodTasksUpdate:
		return true
	case string(mcp.MethodToolsCall):
		m, ok := members(params)
		if !ok {
			return false
		}
		if t, ok := m["task"]; ok && string(t.of(params)) != "null" {
			return true
		}
		if !bytes.Contains(params, []byte(TasksExtension)) || !eraOf(params).tasksExt {
			return false
		}
		var name string
		n, ok := m["name"]
		if !ok || json.Unmarshal(n.of(params), &name) != nil {
			return false
		}
		t, ok := s.tools[name]
		return ok && taskTool(t)
	}
	return false
}

// handleTask answers one request isTaskRequest accepted. ctx carries the
// caller's tenant.
func (s *Server) handleTask(ctx context.Context, method string, params json.RawMessage, notify notifyFunc) (any, *rpcError) {
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	if era := eraOf(params); era.modern {
		return s.handleExtTask(ctx, method, params, era)
	}
	switch method {
	case methodTasksUpdate:
		return nil, &rpcError{code: mcp.METHOD_NOT_FOUND, msg: "tasks/update belongs to the 2026-07-28 revision's tasks extension; this request speaks an earlier revision"}
	}
	switch mcp.MCPMethod(method) {
	case mcp.MethodToolsCall:
		return s.callAsTask(ctx, params, notify)
	case mcp.MethodTasksList:
		return s.listTasks(ctx, params)
	}
	t, rerr := s.namedTask(ctx, method, params)
	if rerr != nil {
		return nil, rerr
	}
	switch mcp.MCPMethod(method) {
	case mcp.MethodTasksGet:
		return mcp.NewGetTaskResult(s.taskOf(ctx, t)), nil
	case mcp.MethodTasksResult:
		return s.taskResult(ctx, t)
	default:
		return s.cancelTask(ctx, t)
	}
}

// namedTask is the caller's task a tasks/* request's params.taskId names.
func (s *Server) namedTask(ctx context.Context, method string, params json.RawMessage) (*record.Task, *rpcError) {
	var p struct {
		TaskID string `json:"taskId"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("%s: params must be an object with taskId (a string): %v", method, err)
	}
	if p.TaskID == "" {
		return nil, invalidParams("%s: params.taskId is required", method)
	}
	return s.task(ctx, p.TaskID)
}

// taskTool says whether a tool may run as a task: it declares taskSupport.
func taskTool(t tools.Tool) bool {
	return t.Def.Execution != nil && t.Def.Execution.TaskSupport != "" && t.Def.Execution.TaskSupport != mcp.TaskSupportForbidden
}

// callAsTask runs a task-augmented tools/call and answers with its task.
func (s *Server) callAsTask(ctx context.Context, params json.RawMessage, notify notifyFunc) (any, *rpcError) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Task      struct {
			TTL *int64 `json:"ttl"`
		} `json:"task"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("tools/call: params: %v", err)
	}
	t, ok := s.tools[p.Name]
	if !ok {
		return nil, invalidParams("tools/call: tool %q is not known", p.Name)
	}
	if !taskTool(t) {
		return nil, &rpcError{code: mcp.METHOD_NOT_FOUND, msg: fmt.Sprintf(
			"tools/call: %s cannot run as a task (its execution.taskSupport is forbidden); call it without params.task", p.Name)}
	}
	ttl, rerr := s.taskTTL(p.Task.TTL)
	if rerr != nil {
		return nil, rerr
	}
	inner := map[string]any{"name": p.Name}
	if len(p.Arguments) > 0 {
		inner["arguments"] = p.Arguments
	}
	msg, err := toolCallMessage(inner)
	if err != nil {
		return nil, internalError(err)
	}
	task := &record.Task{Tool: p.Name, TTLMS: ttl.Milliseconds()}
	if t.TaskResult == nil {
		return s.runTask(ctx, task, msg, notify)
	}
	// One job: the tool submits it and returns; the task is the job.
	call := &tools.TaskCall{TTLMS: task.TTLMS}
	resp := s.mcp.HandleMessage(tools.WithTask(ctx, call), msg)
	if call.JobID == "" {
		return nil, invalidParams("%s", toolCallProblem(p.Name, resp))
	}
	task.ID, task.JobID = call.JobID, call.JobID
	if err := s.deps.Jobs.CreateTask(ctx, task); err != nil {
		return nil, internalError(err)
	}
	if notify != nil {
		go s.watchJobTask(context.WithoutCancel(ctx), task, notify)
	}
	return mcp.NewCreateTaskResult(s.taskOf(ctx, task)), nil
}

// runTask runs a call in this server as a task: the answer comes at once,
// the call's result is kept with the task when it ends.
func (s *Server) runTask(ctx context.Context, task *record.Task, msg []byte, notify notifyFunc) (any, *rpcError) {
	task.ID = uuid.NewString()
	if err := s.deps.Jobs.CreateTask(ctx, task); err != nil {
		return nil, internalError(err)
	}
	s.runInServer(ctx, task, msg, notify)
	return mcp.NewCreateTaskResult(s.taskOf(ctx, task)), nil
}

// runInServer runs a task's call in this server, on its own: its result
// is kept with the task when it ends (notify, when set, hears the end).
func (s *Server) runInServer(ctx context.Context, task *record.Task, msg []byte, notify notifyFunc) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	answered := make(chan mcp.JSONRPCMessage, 1)
	go func() { answered <- s.mcp.HandleMessage(runCtx, msg) }()
	s.endInServer(runCtx, cancel, task, answered, notify)
}

// endInServer keeps a running call's answer with its task when it comes:
// tasks/cancel cancels runCtx meanwhile.
func (s *Server) endInServer(runCtx context.Context, cancel context.CancelFunc, task *record.Task, answered <-chan mcp.JSONRPCMessage, notify notifyFunc) {
	call := &runningCall{cancel: cancel, done: make(chan struct{})}
	s.running.put(task.ID, call)
	go func() {
		defer func() {
			s.running.drop(task.ID)
			close(call.done)
			cancel()
		}()
		res, _ := callResult(<-answered)
		status := record.TaskCompleted
		switch {
		case runCtx.Err() != nil:
			status = record.TaskCancelled
		case res.IsError:
			status = record.TaskFailed
		}
		line, _, _ := strings.Cut(tools.ResultText(res), "\n")
		data, _ := json.Marshal(res)
		endCtx := context.WithoutCancel(runCtx)
		if _, err := s.deps.Jobs.EndTask(endCtx, task.ID, status, truncate(line, 200), data); err != nil && s.logf != nil {
			s.logf("task %s: %v", task.ID, err)
		}
		if notify != nil {
			if t, err := s.deps.Jobs.Task(endCtx, task.ID); err == nil {
				notify(string(mcp.MethodNotificationTasksStatus), s.taskOf(endCtx, t))
			}
		}
	}()
}

// callResult is the CallToolResult of a tools/call's answer (an error
// answer becomes an error result); false when the answer carries neither.
func callResult(resp mcp.JSONRPCMessage) (*mcp.CallToolResult, bool) {
	switch r := resp.(type) {
	case mcp.JSONRPCResponse:
		if res, ok := r.Result.(*mcp.CallToolResult); ok {
			return res, true
		}
	case mcp.JSONRPCError:
		return mcp.NewToolResultError(r.Error.Message), true
	}
	return mcp.NewToolResultError("the call gave no result"), false
}

// toolCallProblem is the sentence of a tools/call that did not start a job.
func toolCallProblem(tool string, resp mcp.JSONRPCMessage) string {
	if res, ok := callResult(resp); ok {
		if text := tools.ResultText(res); text != "" {
			return text
		}
	}
	return tool + " did not start a job"
}

// taskTTL clamps a requested ttl (ms) to the jobs' retention, its default.
func (s *Server) taskTTL(requested *int64) (time.Duration, *rpcError) {
	max := s.deps.Policy.Jobs.Retention()
	if requested == nil {
		return max, nil
	}
	if *requested < 0 {
		return 0, invalidParams("tools/call: params.task.ttl %d is out of range: 0 or more milliseconds (at most %d, the jobs' retention)", *requested, max.Milliseconds())
	}
	ttl := time.Duration(*requested) * time.Millisecond
	if ttl <= 0 || ttl > max {
		ttl = max
	}
	return ttl, nil
}

// task is the caller's task; another tenant's, an unknown or an expired one
// is "not found".
func (s *Server) task(ctx context.Context, id string) (*record.Task, *rpcError) {
	t, err := s.deps.Jobs.Task(ctx, id)
	if errors.Is(err, record.ErrTaskNotFound) {
		return nil, invalidParams("task %q not found: no task of yours has that id (it may have been pruned)", truncate(id, 64))
	}
	if err != nil {
		return nil, internalError(err)
	}
	if s.expired(ctx, t) {
		return nil, invalidParams("task %q expired (its ttl of %d ms has passed)", id, t.TTLMS)
	}
	return t, nil
}

// expired: the task ended and its ttl has passed since it was created.
func (s *Server) expired(ctx context.Context, t *record.Task) bool {
	if t.TTLMS <= 0 || time.Since(t.CreatedAt) <= time.Duration(t.TTLMS)*time.Millisecond {
		return false
	}
	if t.JobID == "" {
		return t.Status != record.TaskWorking
	}
	rec, err := s.deps.Jobs.Get(ctx, t.JobID)
	return err != nil || record.Finished(rec.Status)
}

// taskOf is a task as MCP states it. A job's: its status mapped, with the
// job's last line of output (or its status line, once it ended) as the
// status message.
func (s *Server) taskOf(ctx context.Context, t *record.Task) mcp.Task {
	status, msg, updated := mcp.TaskStatus(t.Status), t.Message, t.UpdatedAt
	if t.JobID != "" {
		if rec, err := s.deps.Jobs.Get(ctx, t.JobID); err != nil {
			status, msg = mcp.TaskStatusFailed, "its job is gone (pruned)"
		} else {
			status, msg, updated = s.jobTaskStatus(ctx, rec)
		}
	} else if status == mcp.TaskStatusWorking {
		msg = t.Tool + " running"
	}
	task := mcp.NewTask(t.ID,
		mcp.WithTaskStatus(status), mcp.WithTaskStatusMessage(truncate(msg, 200)),
		mcp.WithTaskTTL(t.TTLMS), mcp.WithTaskPollInterval(TaskPollInterval.Milliseconds()),
		mcp.WithTaskCreatedAt(t.CreatedAt.UTC().Format(time.RFC3339Nano)))
	task.LastUpdatedAt = updated.UTC().Format(time.RFC3339Nano)
	return task
}

// jobTaskStatus maps a job to its task's status.
func (s *Server) jobTaskStatus(ctx context.Context, rec *record.Job) (mcp.TaskStatus, string, time.Time) {
	updated := rec.CreatedAt
	for _, t := range []time.Time{rec.StartedAt, rec.EndedAt} {
		if t.After(updated) {
			updated = t
		}
	}
	switch {
	case !record.Finished(rec.Status):
		msg := ""
		if tail, err := s.deps.Jobs.Tail(ctx, rec.ID, 1, 200); err == nil {
			msg = strings.TrimSpace(string(tail))
		}
		if msg == "" {
			msg = "job " + rec.ID + " " + rec.Status
		}
		return mcp.TaskStatusWorking, msg, updated
	case rec.Reason == record.ReasonCancelled:
		return mcp.TaskStatusCancelled, tools.StatusLine(rec), updated
	case rec.Reason == record.ReasonStartError || rec.Reason == record.ReasonLost || rec.Reason == record.ReasonShutdown:
		return mcp.TaskStatusFailed, tools.StatusLine(rec), updated
	}
	// A non-zero exit, a timeout, a compile error: the call completed with
	// a result that says so, as the plain call would.
	return mcp.TaskStatusCompleted, tools.StatusLine(rec), updated
}

// taskResult waits for the task to end and answers with the result the
// plain call would have returned.
func (s *Server) taskResult(ctx context.Context, t *record.Task) (any, *rpcError) {
	if t.JobID != "" {
		return s.jobTaskResult(ctx, t)
	}
	interrupted := &rpcError{code: mcp.REQUEST_INTERRUPTED, msg: "tasks/result: the request was cancelled before task " + t.ID + " ended"}
	for t.Status == record.TaskWorking {
		ended := time.After(TaskPollInterval) // another server runs it: look again
		if c := s.running.get(t.ID); c != nil {
			ended = nil
			select {
			case <-c.done:
			case <-ctx.Done():
				return nil, interrupted
			}
		}
		if ended != nil {
			select {
			case <-ended:
			case <-ctx.Done():
				return nil, interrupted
			}
		}
		next, err := s.deps.Jobs.Task(ctx, t.ID)
		if err != nil {
			return nil, internalError(err)
		}
		t = next
	}
	if len(t.Result) == 0 {
		return nil, &rpcError{code: mcp.INTERNAL_ERROR, msg: fmt.Sprintf("task %s %s: %s", t.ID, t.Status, t.Message)}
	}
	var res map[string]any
	if err := json.Unmarshal(t.Result, &res); err != nil {
		return nil, internalError(err)
	}
	res["_meta"] = map[string]any{mcp.RelatedTaskMetaKey: mcp.RelatedTaskMeta(t.ID)}
	return res, nil
}

// jobTaskResult waits for a job task's job and rebuilds the call's result.
func (s *Server) jobTaskResult(ctx context.Context, t *record.Task) (any, *rpcError) {
	rec, err := s.deps.Jobs.Get(ctx, t.JobID)
	for err == nil && !record.Finished(rec.Status) {
		rec, err = s.deps.Jobs.Wait(ctx, t.JobID, taskWaitSlice)
		if err == nil && ctx.Err() != nil {
			return nil, &rpcError{code: mcp.REQUEST_INTERRUPTED, msg: "tasks/result: the request was cancelled before task " + t.ID + " ended"}
		}
	}
	if err != nil {
		return nil, internalError(err)
	}
	res, rerr := s.rebuiltResult(ctx, t, rec)
	if rerr != nil {
		return nil, rerr
	}
	res.Meta = mcp.WithRelatedTask(t.ID)
	return res, nil
}

// rebuiltResult is a job task's call result, rebuilt from its ended job.
func (s *Server) rebuiltResult(ctx context.Context, t *record.Task, rec *record.Job) (*mcp.CallToolResult, *rpcError) {
	tool, ok := s.tools[t.Tool]
	if !ok || tool.TaskResult == nil {
		return nil, internalError(fmt.Errorf("task %s: tool %s is not served by this server (toolsets)", t.ID, t.Tool))
	}
	return tool.TaskResult(ctx, rec), nil
}

// cancelTask ends a working task and answers with it (2025-11-25).
func (s *Server) cancelTask(ctx context.Context, t *record.Task) (any, *rpcError) {
	current := s.taskOf(ctx, t)
	if current.Status.IsTerminal() {
		return nil, invalidParams("task %s already ended (%s): only a working task can be cancelled", t.ID, current.Status)
	}
	if err := s.stopTask(ctx, t); err != nil {
		return nil, internalError(err)
	}
	after, err := s.deps.Jobs.Task(ctx, t.ID)
	if err != nil {
		return nil, internalError(err)
	}
	task := s.taskOf(ctx, after)
	if !task.Status.IsTerminal() {
		task.Status = mcp.TaskStatusCancelled // the kill is under way
	}
	return mcp.NewCancelTaskResult(task), nil
}

// stopTask ends a working task: kills its job (reason cancelled), or
// cancels the call this server runs; the audit log records it.
func (s *Server) stopTask(ctx context.Context, t *record.Task) error {
	var err error
	if t.Status == record.TaskInputRequired {
		_, err = s.deps.Jobs.EndTask(ctx, t.ID, record.TaskCancelled, "cancelled before a person answered", nil)
	} else if t.JobID != "" {
		_, err = s.deps.Jobs.Kill(ctx, t.JobID, "KILL", 0, record.ReasonCancelled)
	} else if c := s.running.get(t.ID); c != nil {
		c.cancel()
		select {
		case <-c.done:
		case <-time.After(taskWaitSlice):
			err = fmt.Errorf("task %s did not end within %s of its cancel", t.ID, taskWaitSlice)
		}
	} else {
		return fmt.Errorf("task %s runs in another server process (%s): cancel it through that server's client", t.ID, t.ServerID)
	}
	if s.audit != nil {
		e := audit.Entry{Time: time.Now(), Client: tools.ClientName(ctx), Tenant: tenant.Owner(ctx), Server: s.serverID,
			Tool: string(mcp.MethodTasksCancel), JobID: t.JobID, Outcome: "ok", Decision: audit.Allowed}
		if err != nil {
			e.Outcome, e.Error = "error", truncateUTF8(err.Error(), 1000)
		}
		if werr := s.audit.Write(e); werr != nil && s.logf != nil {
			s.logf("audit log: %v", werr)
		}
	}
	return err
}

// listTasks lists the caller's tasks, newest first, a page at a time.
func (s *Server) listTasks(ctx context.Context, params json.RawMessage) (any, *rpcError) {
	var p struct {
		Cursor string `json:"cursor"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("tasks/list: params: %v", err)
	}
	tasks, next, err := s.deps.Jobs.ListTasks(ctx, p.Cursor)
	if errors.Is(err, record.ErrBadCursor) {
		return nil, invalidParams("tasks/list: params.cursor is not one tasks/list returned")
	}
	if err != nil {
		return nil, internalError(err)
	}
	res := mcp.ListTasksResult{Tasks: []mcp.Task{}}
	for _, t := range tasks {
		if !s.expired(ctx, t) {
			res.Tasks = append(res.Tasks, s.taskOf(ctx, t))
		}
	}
	res.NextCursor = mcp.Cursor(next)
	return res, nil
}

// watchJobTask sends notifications/tasks/status when a job task's job ends.
func (s *Server) watchJobTask(ctx context.Context, t *record.Task, notify notifyFunc) {
	for {
		rec, err := s.deps.Jobs.Wait(ctx, t.JobID, taskWaitSlice)
		if err != nil || ctx.Err() != nil {
			return
		}
		if record.Finished(rec.Status) {
			notify(string(mcp.MethodNotificationTasksStatus), s.taskOf(ctx, t))
			return
		}
	}
}

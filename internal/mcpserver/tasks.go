package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// MCP tasks (the 2025-11-25 revision): a client marks a tools/call as a task
// (params.task) and gets a CreateTaskResult at once; it then polls tasks/get,
// fetches tasks/result, lists with tasks/list and cancels with tasks/cancel.
//
// A task here is a job: its taskId is the job's id, its state is the job's
// record in the store, so tasks survive a restart and are the tenant's own as
// jobs are. mcp-go (v1.2.1) keeps tasks in a map of its own under ids it
// makes, so these requests are answered here, in front of it (wire for stdio,
// tasksHTTP for Streamable HTTP); the tool call itself still goes through
// mcp-go and every middleware (audit, role, metrics).

// TaskPollInterval is the pollInterval every task states.
const TaskPollInterval = time.Second

// taskWaitSlice is how long one wait on a job lasts inside tasks/result and
// the status watcher (they loop until the job ends or the caller leaves).
const taskWaitSlice = 30 * time.Second

// rpcError is a JSON-RPC error a task request is answered with.
type rpcError struct {
	code int
	msg  string
}

func invalidParams(format string, args ...any) *rpcError {
	return &rpcError{mcp.INVALID_PARAMS, fmt.Sprintf(format, args...)}
}

// notifyFunc sends one notification to the client that made a request (nil:
// the transport has no way to).
type notifyFunc func(method string, params any)

var taskSeq atomic.Uint64

// isTaskRequest says whether the task layer answers a request: a tasks/*
// method, or a tools/call whose params carry task.
func isTaskRequest(method string, params []byte) bool {
	switch mcp.MCPMethod(method) {
	case mcp.MethodTasksGet, mcp.MethodTasksList, mcp.MethodTasksResult, mcp.MethodTasksCancel:
		return true
	case mcp.MethodToolsCall:
		m, ok := members(params)
		if !ok {
			return false
		}
		t, ok := m["task"]
		return ok && string(t.of(params)) != "null"
	}
	return false
}

// handleTask answers one request isTaskRequest accepted. ctx carries the
// caller's tenant.
func (s *Server) handleTask(ctx context.Context, method string, params json.RawMessage, notify notifyFunc) (any, *rpcError) {
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	switch mcp.MCPMethod(method) {
	case mcp.MethodToolsCall:
		return s.callAsTask(ctx, params, notify)
	case mcp.MethodTasksList:
		return s.listTasks(ctx, params)
	}
	var p struct {
		TaskID string `json:"taskId"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("%s: params must be an object with taskId (a string): %v", method, err)
	}
	if p.TaskID == "" {
		return nil, invalidParams("%s: params.taskId is required", method)
	}
	rec, rerr := s.taskJob(ctx, p.TaskID)
	if rerr != nil {
		return nil, rerr
	}
	switch mcp.MCPMethod(method) {
	case mcp.MethodTasksGet:
		return mcp.NewGetTaskResult(s.taskOf(ctx, rec)), nil
	case mcp.MethodTasksResult:
		return s.taskResult(ctx, rec)
	default:
		return s.cancelTask(ctx, rec)
	}
}

// callAsTask runs a task-augmented tools/call: the tool submits its job and
// returns, and the answer is the job as a task.
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
	if t.TaskResult == nil {
		return nil, &rpcError{mcp.METHOD_NOT_FOUND, fmt.Sprintf(
			"tools/call: %s cannot run as a task (its execution.taskSupport is forbidden); call it without params.task", p.Name)}
	}
	ttl, rerr := s.taskTTL(p.Task.TTL)
	if rerr != nil {
		return nil, rerr
	}
	call := &tools.TaskCall{TTLMS: ttl.Milliseconds()}
	inner := map[string]any{"name": p.Name}
	if len(p.Arguments) > 0 {
		inner["arguments"] = p.Arguments
	}
	msg, err := json.Marshal(map[string]any{
		"jsonrpc": mcp.JSONRPC_VERSION, "id": fmt.Sprintf("task~%d", taskSeq.Add(1)),
		"method": mcp.MethodToolsCall, "params": inner,
	})
	if err != nil {
		return nil, &rpcError{mcp.INTERNAL_ERROR, err.Error()}
	}
	resp := s.mcp.HandleMessage(tools.WithTask(ctx, call), msg)
	if call.JobID == "" {
		return nil, invalidParams("%s", toolCallProblem(p.Name, resp))
	}
	rec, err := s.deps.Jobs.Get(ctx, call.JobID)
	if err != nil {
		return nil, &rpcError{mcp.INTERNAL_ERROR, err.Error()}
	}
	if notify != nil {
		go s.watchTask(context.WithoutCancel(ctx), rec.ID, notify)
	}
	return mcp.NewCreateTaskResult(s.taskOf(ctx, rec)), nil
}

// toolCallProblem is the sentence of a tools/call that did not start a job.
func toolCallProblem(tool string, resp mcp.JSONRPCMessage) string {
	switch r := resp.(type) {
	case mcp.JSONRPCError:
		return r.Error.Message
	case *mcp.JSONRPCError:
		return r.Error.Message
	case mcp.JSONRPCResponse:
		if res, ok := r.Result.(*mcp.CallToolResult); ok {
			if text := resultText(res); text != "" {
				return text
			}
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

// taskJob is the caller's job behind a task id; another tenant's, an unknown
// or an expired one is "not found".
func (s *Server) taskJob(ctx context.Context, id string) (*record.Job, *rpcError) {
	rec, err := s.deps.Jobs.Get(ctx, id)
	if err != nil || rec.Details.Task == nil {
		return nil, invalidParams("task %q not found: tasks/list shows the known ones", truncate(id, 64))
	}
	if expired(rec) {
		return nil, invalidParams("task %q expired (its ttl of %d ms has passed)", id, rec.Details.Task.TTLMS)
	}
	return rec, nil
}

func expired(rec *record.Job) bool {
	t := rec.Details.Task
	return record.Finished(rec.Status) && t.TTLMS > 0 && time.Since(rec.CreatedAt) > time.Duration(t.TTLMS)*time.Millisecond
}

// taskOf is a job as a task: its status mapped, with the job's last line of
// output (or its status line, once it ended) as the status message.
func (s *Server) taskOf(ctx context.Context, rec *record.Job) mcp.Task {
	status, msg := mcp.TaskStatusWorking, ""
	switch {
	case !record.Finished(rec.Status):
		if tail, err := s.deps.Jobs.Tail(ctx, rec.ID, 1, 200); err == nil {
			msg = strings.TrimSpace(string(tail))
		}
		if msg == "" {
			msg = "job " + rec.ID + " " + rec.Status
		}
	case rec.Reason == record.ReasonCancelled:
		status, msg = mcp.TaskStatusCancelled, tools.StatusLine(rec)
	case rec.Reason == record.ReasonStartError || rec.Reason == record.ReasonLost || rec.Reason == record.ReasonShutdown:
		status, msg = mcp.TaskStatusFailed, tools.StatusLine(rec)
	default:
		// A non-zero exit, a timeout, a compile error: the call completed
		// with a result that says so, as the plain call would.
		status, msg = mcp.TaskStatusCompleted, tools.StatusLine(rec)
	}
	updated := rec.CreatedAt
	for _, t := range []time.Time{rec.StartedAt, rec.EndedAt} {
		if t.After(updated) {
			updated = t
		}
	}
	task := mcp.NewTask(rec.ID,
		mcp.WithTaskStatus(status), mcp.WithTaskStatusMessage(truncate(msg, 200)),
		mcp.WithTaskTTL(rec.Details.Task.TTLMS), mcp.WithTaskPollInterval(TaskPollInterval.Milliseconds()),
		mcp.WithTaskCreatedAt(rec.CreatedAt.UTC().Format(time.RFC3339Nano)))
	task.LastUpdatedAt = updated.UTC().Format(time.RFC3339Nano)
	return task
}

// taskResult waits for the job to end and answers with the result the plain
// call would have returned.
func (s *Server) taskResult(ctx context.Context, rec *record.Job) (any, *rpcError) {
	for !record.Finished(rec.Status) {
		next, err := s.deps.Jobs.Wait(ctx, rec.ID, taskWaitSlice)
		if err != nil {
			return nil, &rpcError{mcp.INTERNAL_ERROR, err.Error()}
		}
		if ctx.Err() != nil {
			return nil, &rpcError{mcp.REQUEST_INTERRUPTED, "tasks/result: the request was cancelled before task " + rec.ID + " ended"}
		}
		rec = next
	}
	t, ok := s.tools[rec.Details.Task.Tool]
	if !ok || t.TaskResult == nil {
		return nil, &rpcError{mcp.INTERNAL_ERROR, fmt.Sprintf("task %s: tool %s is not served by this server (toolsets)", rec.ID, rec.Details.Task.Tool)}
	}
	res := t.TaskResult(ctx, rec)
	res.Meta = mcp.WithRelatedTask(rec.ID)
	return res, nil
}

// cancelTask kills a working task's job (reason cancelled).
func (s *Server) cancelTask(ctx context.Context, rec *record.Job) (any, *rpcError) {
	if record.Finished(rec.Status) {
		return nil, invalidParams("task %s already ended (%s): only a working task can be cancelled", rec.ID, rec.Status)
	}
	killed, err := s.deps.Jobs.Kill(ctx, rec.ID, "KILL", 0, record.ReasonCancelled)
	if s.audit != nil {
		e := audit.Entry{Time: time.Now(), Client: tools.ClientName(ctx), Tenant: tenant.Owner(ctx), Server: s.serverID,
			Tool: string(mcp.MethodTasksCancel), JobID: rec.ID, Outcome: "ok", Decision: audit.Allowed}
		if err != nil {
			e.Outcome, e.Error = "error", truncateUTF8(err.Error(), 1000)
		}
		if werr := s.audit.Write(e); werr != nil && s.logf != nil {
			s.logf("audit log: %v", werr)
		}
	}
	if err != nil {
		return nil, &rpcError{mcp.INTERNAL_ERROR, err.Error()}
	}
	if !record.Finished(killed.Status) {
		// The kill is under way: the task is cancelled as of now.
		killed.Status, killed.Reason = record.StatusKilled, record.ReasonCancelled
	}
	return mcp.NewCancelTaskResult(s.taskOf(ctx, killed)), nil
}

// listTasks lists the caller's tasks, newest first, a page at a time.
func (s *Server) listTasks(ctx context.Context, params json.RawMessage) (any, *rpcError) {
	var p struct {
		Cursor string `json:"cursor"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, invalidParams("tasks/list: params: %v", err)
	}
	jobs, next, err := s.deps.Jobs.List(ctx, record.ListFilter{Tasks: true, Cursor: p.Cursor})
	if err != nil {
		if errors.Is(err, record.ErrBadCursor) {
			return nil, invalidParams("tasks/list: params.cursor is not one tasks/list returned")
		}
		return nil, &rpcError{mcp.INTERNAL_ERROR, err.Error()}
	}
	res := mcp.ListTasksResult{Tasks: []mcp.Task{}}
	for _, rec := range jobs {
		if !expired(rec) {
			res.Tasks = append(res.Tasks, s.taskOf(ctx, rec))
		}
	}
	res.NextCursor = mcp.Cursor(next)
	return res, nil
}

// watchTask sends notifications/tasks/status when the task's job ends.
func (s *Server) watchTask(ctx context.Context, id string, notify notifyFunc) {
	for {
		rec, err := s.deps.Jobs.Wait(ctx, id, taskWaitSlice)
		if err != nil || ctx.Err() != nil {
			return
		}
		if record.Finished(rec.Status) {
			notify(string(mcp.MethodNotificationTasksStatus), s.taskOf(ctx, rec))
			return
		}
	}
}

// frontHTTP answers, in front of mcp-go's Streamable HTTP server, what it
// cannot answer as it should: task requests, and resources/read (whose "not
// found" mcp-go reports as -32603). guard has named the tenant.
func (s *Server) frontHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxHTTPBody+1))
		r.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil || len(body) > MaxHTTPBody {
			next.ServeHTTP(w, r) // it refuses what it cannot read
			return
		}
		m, ok := members(body)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		var method string
		idSpan, hasID := m["id"]
		methodSpan, hasMethod := m["method"]
		params, hasParams := m["params"]
		if !hasID || !hasMethod || json.Unmarshal(methodSpan.of(body), &method) != nil ||
			!isTaskRequest(method, paramsOf(body, params, hasParams)) && method != string(mcp.MethodResourcesRead) {
			next.ServeHTTP(w, r)
			return
		}
		id := json.RawMessage(idSpan.of(body))
		if kind := idKind(id); kind != "string" && kind != "number" {
			next.ServeHTTP(w, r) // mcp-go answers the invalid request
			return
		}
		ctx := tools.WithKeepOnCancel(r.Context())
		if t, ok := r.Context().Value(requestTenant{}).(tenant.Tenant); ok {
			ctx = tenant.With(ctx, t)
		}
		if method == string(mcp.MethodResourcesRead) {
			s.readResourceHTTP(ctx, w, body)
			return
		}
		var notify notifyFunc
		if sid := r.Header.Get(server.HeaderKeySessionID); sid != "" {
			notify = func(method string, params any) {
				var m map[string]any
				if b, err := json.Marshal(params); err == nil && json.Unmarshal(b, &m) == nil {
					_ = s.mcp.SendNotificationToSpecificClient(sid, method, m)
				}
			}
		}
		res, rerr := s.handleTask(ctx, method, append(json.RawMessage(nil), paramsOf(body, params, hasParams)...), notify)
		var reply any
		if rerr != nil {
			reply = struct {
				JSONRPC string                  `json:"jsonrpc"`
				ID      json.RawMessage         `json:"id"`
				Error   mcp.JSONRPCErrorDetails `json:"error"`
			}{mcp.JSONRPC_VERSION, id, mcp.NewJSONRPCErrorDetails(rerr.code, rerr.msg, nil)}
		} else {
			reply = struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Result  any             `json:"result"`
			}{mcp.JSONRPC_VERSION, id, res}
		}
		writeJSON(w, reply)
	})
}

// writeJSON writes one JSON-RPC answer as an application/json response.
func writeJSON(w http.ResponseWriter, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(unescapeHTML(data))
}

// readResourceHTTP has mcp-go answer a resources/read, with the error an
// OnError hook chose (resources.go) in place of its -32603.
func (s *Server) readResourceHTTP(ctx context.Context, w http.ResponseWriter, body []byte) {
	slot := &overrideSlot{}
	ctx = context.WithValue(ctx, overrideKey{}, slot)
	resp := s.mcp.HandleMessage(ctx, body)
	if e, ok := resp.(mcp.JSONRPCError); ok && slot.set {
		e.Error.Code, e.Error.Message = slot.code, slot.msg
		resp = e
	}
	writeJSON(w, resp)
}

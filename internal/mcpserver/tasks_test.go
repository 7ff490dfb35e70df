package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
)

type taskReply struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	TTL           *int64 `json:"ttl"`
	PollInterval  *int64 `json:"pollInterval"`
	CreatedAt     string `json:"createdAt"`
}

// TestTasksOverStdio drives MCP tasks through the stdio wire: a task-augmented
// run_command answers with the job as a task at once; tasks/get, tasks/list,
// tasks/cancel and tasks/result answer from the job's record; the end of the
// task is notified; what cannot be a task is refused with a sentence.
func TestTasksOverStdio(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{output: "first line\nworking on it\n"})
	ts.initialize()

	init := decodeReply(t, ts.call(`"init2"`, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}`))
	if !strings.Contains(string(init.Result), `"tasks":{`) {
		t.Errorf("initialize does not announce tasks: %s", init.Result)
	}
	list := decodeReply(t, ts.call(`"tl"`, "tools/list", `{}`))
	if !strings.Contains(string(list.Result), `"execution":{"taskSupport":"optional"}`) {
		t.Errorf("no tool declares taskSupport optional: %.300s", list.Result)
	}

	r := decodeReply(t, ts.call(`7`, "tools/call", `{"name":"run_command","arguments":{"command":"echo hi"},"task":{"ttl":60000}}`))
	if r.Error != nil {
		t.Fatalf("task call: %+v", r.Error)
	}
	var created struct {
		Task taskReply `json:"task"`
	}
	if err := json.Unmarshal(r.Result, &created); err != nil {
		t.Fatal(err)
	}
	id := created.Task.TaskID
	rec, err := ts.jobs.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("the task id %q is not a job: %v", id, err)
	}
	if rec.Details.Task == nil || rec.Details.Task.Tool != "run_command" || rec.Details.Task.TTLMS != 60000 {
		t.Errorf("job's task details: %+v", rec.Details.Task)
	}
	if created.Task.Status != "working" || created.Task.PollInterval == nil || created.Task.TTL == nil || *created.Task.TTL != 60000 {
		t.Errorf("created task: %+v", created.Task)
	}

	waitStatus(t, ts.jobs, id, record.StatusRunning)
	var got taskReply
	for deadline := time.Now().Add(10 * time.Second); ; {
		g := decodeReply(t, ts.call(`"g"`, "tasks/get", `{"taskId":"`+id+`"}`))
		if g.Error != nil {
			t.Fatalf("tasks/get: %+v", g.Error)
		}
		_ = json.Unmarshal(g.Result, &got)
		if got.StatusMessage == "working on it" || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.Status != "working" || got.StatusMessage != "working on it" {
		t.Errorf("tasks/get of a running task: %+v (want working, with the last line of output)", got)
	}

	plain := decodeReply(t, ts.call(`"p"`, "tools/call", `{"name":"run_command","arguments":{"command":"echo plain","background":true}}`))
	var plainJob struct {
		Structured struct {
			JobID string `json:"job_id"`
		} `json:"structuredContent"`
	}
	if err := json.Unmarshal(plain.Result, &plainJob); err != nil || plainJob.Structured.JobID == "" {
		t.Fatalf("plain call: %s %v", plain.Result, err)
	}
	l := decodeReply(t, ts.call(`"l"`, "tasks/list", `{}`))
	if !strings.Contains(string(l.Result), id) || strings.Contains(string(l.Result), plainJob.Structured.JobID) {
		t.Errorf("tasks/list: %s; want task %s and not the plain call's job %s", l.Result, id, plainJob.Structured.JobID)
	}

	// The cancel is answered, and the end of the task notified (in either order).
	ts.send(`{"jsonrpc":"2.0","id":"c","method":"tasks/cancel","params":{"taskId":"` + id + `"}}`)
	var cancelLine, note string
	for deadline := time.Now().Add(10 * time.Second); (cancelLine == "" || note == "") && time.Now().Before(deadline); {
		line := ts.next(time.Until(deadline))
		switch {
		case strings.Contains(line, `"method":"notifications/tasks/status"`):
			note = line
		case strings.Contains(line, `"id":"c"`):
			cancelLine = line
		}
	}
	c := decodeReply(t, cancelLine)
	if c.Error != nil || !strings.Contains(string(c.Result), `"status":"cancelled"`) {
		t.Fatalf("tasks/cancel: %s %+v", c.Result, c.Error)
	}
	if !strings.Contains(note, id) || !strings.Contains(note, `"status":"cancelled"`) {
		t.Errorf("status notification: %q", note)
	}
	killed := waitStatus(t, ts.jobs, id, record.StatusKilled)
	if killed.Reason != record.ReasonCancelled {
		t.Errorf("cancelled task's job: %s %s", killed.Status, killed.Reason)
	}

	// The result is the plain call's, with the job id and the related task.
	result := ts.call(`"res"`, "tasks/result", `{"taskId":"`+id+`"}`)
	res := decodeReply(t, result)
	if res.Error != nil {
		t.Fatalf("tasks/result: %+v", res.Error)
	}
	var call struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		Structured struct {
			JobID  string `json:"job_id"`
			Status string `json:"status"`
			Stdout string `json:"stdout"`
		} `json:"structuredContent"`
		IsError bool `json:"isError"`
		Meta    map[string]struct {
			TaskID string `json:"taskId"`
		} `json:"_meta"`
	}
	if err := json.Unmarshal(res.Result, &call); err != nil {
		t.Fatal(err)
	}
	if call.Structured.JobID != id || call.Structured.Status != "killed" || call.Structured.Stdout != "first line\nworking on it\n" || call.IsError {
		t.Errorf("tasks/result: %s", res.Result)
	}
	if call.Meta["io.modelcontextprotocol/related-task"].TaskID != id {
		t.Errorf("tasks/result has no related-task: %s", res.Result)
	}
	g := decodeReply(t, ts.call(`"g2"`, "tasks/get", `{"taskId":"`+id+`"}`))
	if !strings.Contains(string(g.Result), `"status":"cancelled"`) {
		t.Errorf("tasks/get after cancel: %s", g.Result)
	}
	c2 := decodeReply(t, ts.call(`"c2"`, "tasks/cancel", `{"taskId":"`+id+`"}`))
	if c2.Error == nil || !strings.Contains(c2.Error.Message, "already ended") {
		t.Errorf("second cancel: %+v", c2)
	}

	// A call the server runs itself (no single job): its task keeps the
	// call's result, here an error result, and ends failed.
	plainInstall := decodeReply(t, ts.call(`"pi"`, "tools/call", `{"name":"install_packages","arguments":{"workspace":"w","packages":["jq"]}}`))
	ip := decodeReply(t, ts.call(`"ip"`, "tools/call", `{"name":"install_packages","arguments":{"workspace":"w","packages":["jq"]},"task":{}}`))
	var ipTask struct {
		Task taskReply `json:"task"`
	}
	if err := json.Unmarshal(ip.Result, &ipTask); err != nil || ipTask.Task.TaskID == "" || ipTask.Task.TaskID == id {
		t.Fatalf("install_packages as a task: %s %+v", ip.Result, ip.Error)
	}
	ipRes := decodeReply(t, ts.call(`"ipr"`, "tasks/result", `{"taskId":"`+ipTask.Task.TaskID+`"}`))
	var gotRes, wantRes struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	_ = json.Unmarshal(ipRes.Result, &gotRes)
	_ = json.Unmarshal(plainInstall.Result, &wantRes)
	if !gotRes.IsError || len(gotRes.Content) == 0 || len(wantRes.Content) == 0 || gotRes.Content[0].Text != wantRes.Content[0].Text {
		t.Errorf("install_packages task result %s, want the plain call's %s", ipRes.Result, plainInstall.Result)
	}
	if g := decodeReply(t, ts.call(`"ipg"`, "tasks/get", `{"taskId":"`+ipTask.Task.TaskID+`"}`)); !strings.Contains(string(g.Result), `"status":"failed"`) {
		t.Errorf("tasks/get of the failed call: %s", g.Result)
	}

	for _, tc := range []struct{ method, params, want string }{
		{"tasks/get", `{"taskId":"123e4567-e89b-12d3-a456-426614174000"}`, "not found"},
		{"tasks/get", `{}`, "params.taskId is required"},
		{"tools/call", `{"name":"get_job","arguments":{"job_id":"` + id + `"},"task":{}}`, "cannot run as a task"},
		{"tools/call", `{"name":"run_command","arguments":{},"task":{}}`, "argument command is required"},
		{"tools/call", `{"name":"run_command","arguments":{"command":"true"},"task":{"ttl":-1}}`, "params.task.ttl -1 is out of range"},
	} {
		r := decodeReply(t, ts.call(`"bad"`, tc.method, tc.params))
		if r.Error == nil || !strings.Contains(r.Error.Message, tc.want) {
			t.Errorf("%s %s: %s %+v, want an error saying %q", tc.method, tc.params, r.Result, r.Error, tc.want)
		}
	}
}

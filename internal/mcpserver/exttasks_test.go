package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
)

// modernParams are params of a 2026-07-28 request with its _meta; ext says
// whether the client declares the tasks extension.
func modernParams(body string, ext bool) string {
	caps := `{}`
	if ext {
		caps = `{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
	}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":` + caps + `}`
	if body == "" {
		return "{" + meta + "}"
	}
	return "{" + body + "," + meta + "}"
}

type extTaskReply struct {
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMS          *int64          `json:"ttlMs"`
	PollIntervalMS int64           `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result"`
	Content        json.RawMessage `json:"content"`
}

func decodeExtTask(t *testing.T, r rpcReply) extTaskReply {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error %d: %s", r.Error.Code, r.Error.Message)
	}
	var e extTaskReply
	if err := json.Unmarshal(r.Result, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestTasksExtensionOverStdio: a 2026-07-28 client that declares the tasks
// extension gets a task for a job that outlives wait_s and polls it with
// tasks/get; cancels it; without the extension tasks/* answer -32021; the
// methods the revision removed answer -32601.
func TestTasksExtensionOverStdio(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{output: "working on it\n"})

	disc := decodeReply(t, ts.call(`"d"`, "server/discover", modernParams("", true)))
	if !strings.Contains(string(disc.Result), `"extensions":{"io.modelcontextprotocol/tasks":{}}`) {
		t.Errorf("server/discover does not advertise the tasks extension: %s", disc.Result)
	}
	var caps struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(disc.Result, &caps); err != nil || caps.Capabilities["tasks"] != nil {
		t.Errorf("server/discover states the 2025-11-25 tasks capability: %s", caps.Capabilities["tasks"])
	}

	created := decodeExtTask(t, decodeReply(t, ts.call(`1`, "tools/call",
		modernParams(`"name":"run_command","arguments":{"command":"sleep 100","wait_s":0.2}`, true))))
	if created.ResultType != "task" || created.Status != "working" || created.TaskID == "" ||
		created.PollIntervalMS != TaskPollInterval.Milliseconds() || created.TTLMS == nil || *created.TTLMS <= 0 ||
		created.CreatedAt == "" || created.LastUpdatedAt == "" {
		t.Fatalf("a job that outlives wait_s: %+v, want a CreateTaskResult", created)
	}
	if _, err := ts.jobs.Get(t.Context(), created.TaskID); err != nil {
		t.Fatalf("the task's id %q is not its job's: %v", created.TaskID, err)
	}

	got := decodeExtTask(t, decodeReply(t, ts.call(`2`, "tasks/get", modernParams(`"taskId":"`+created.TaskID+`"`, true))))
	if got.ResultType != "complete" || got.Status != "working" || got.TaskID != created.TaskID || got.Result != nil {
		t.Errorf("tasks/get of a working task: %+v", got)
	}

	// Without the extension: -32021, naming it in data.
	line := ts.call(`3`, "tasks/get", modernParams(`"taskId":"`+created.TaskID+`"`, false))
	if r := decodeReply(t, line); r.Error == nil || r.Error.Code != mcp.MISSING_REQUIRED_CLIENT_CAPABILITY ||
		!strings.Contains(line, `"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`) {
		t.Errorf("tasks/get without the extension: %s", line)
	}
	for _, m := range []string{"tasks/list", "tasks/result"} {
		if r := decodeReply(t, ts.call(`4`, m, modernParams(`"taskId":"`+created.TaskID+`"`, true))); r.Error == nil || r.Error.Code != mcp.METHOD_NOT_FOUND {
			t.Errorf("%s in the 2026 era: %+v, want -32601", m, r)
		}
	}
	if r := decodeReply(t, ts.call(`5`, "tasks/update", modernParams(`"taskId":"`+created.TaskID+`","inputResponses":{"nope":{"action":"accept"}}`, true))); r.Error != nil || !strings.Contains(string(r.Result), `"resultType":"complete"`) {
		t.Errorf("tasks/update with a key not outstanding: %+v, want an acknowledgement", r)
	}
	if r := decodeReply(t, ts.call(`6`, "tasks/update", modernParams(`"taskId":"`+created.TaskID+`"`, true))); r.Error == nil || !strings.Contains(r.Error.Message, "inputResponses") {
		t.Errorf("tasks/update without inputResponses: %+v", r)
	}
	if r := decodeReply(t, ts.call(`7`, "tasks/get", modernParams(`"taskId":"nope"`, true))); r.Error == nil || r.Error.Code != mcp.INVALID_PARAMS {
		t.Errorf("tasks/get of an unknown task: %+v", r)
	}

	cancel := decodeReply(t, ts.call(`8`, "tasks/cancel", modernParams(`"taskId":"`+created.TaskID+`"`, true)))
	if cancel.Error != nil || string(cancel.Result) != `{"resultType":"complete"}` {
		t.Errorf("tasks/cancel: %s %+v, want the empty acknowledgement", cancel.Result, cancel.Error)
	}
	got = decodeExtTask(t, decodeReply(t, ts.call(`9`, "tasks/get", modernParams(`"taskId":"`+created.TaskID+`"`, true))))
	if got.Status != "cancelled" {
		t.Errorf("tasks/get after tasks/cancel: %+v", got)
	}
	if rec, _ := ts.jobs.Get(t.Context(), created.TaskID); rec == nil || rec.Reason != record.ReasonCancelled {
		t.Errorf("the cancelled task's job: %+v", rec)
	}

	// Without the extension a long call answers as it always did: a result
	// with the job still running.
	plain := decodeReply(t, ts.call(`10`, "tools/call", modernParams(`"name":"run_command","arguments":{"command":"sleep 100","wait_s":0.2}`, false)))
	if plain.Error != nil || strings.Contains(string(plain.Result), `"resultType":"task"`) || !strings.Contains(string(plain.Result), `"job_id"`) {
		t.Errorf("a call without the extension: %s", plain.Result)
	}
	// A 2025 client's tasks/update is not a method it has.
	ts.initialize()
	if r := decodeReply(t, ts.call(`11`, "tasks/update", `{"taskId":"x","inputResponses":{}}`)); r.Error == nil || r.Error.Code != mcp.METHOD_NOT_FOUND {
		t.Errorf("tasks/update of a 2025 client: %+v", r)
	}
}

// TestQuickCallIsNoTask: a job that ends within wait_s answers as a plain
// call, even to a client that declared the extension, and leaves no task.
func TestQuickCallIsNoTask(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{output: "done\n", exits: true})
	r := decodeExtTask(t, decodeReply(t, ts.call(`1`, "tools/call",
		modernParams(`"name":"run_command","arguments":{"command":"true","wait_s":30}`, true))))
	if r.ResultType != "complete" || r.TaskID != "" || !strings.Contains(string(r.Content), "done") {
		t.Fatalf("a quick call: %+v", r)
	}
	tasks, _, err := ts.jobs.ListTasks(t.Context(), "")
	if err != nil || len(tasks) != 0 {
		t.Errorf("a quick call left tasks: %v %v", tasks, err)
	}
	// A tool that runs no job answers as it is.
	list := decodeReply(t, ts.call(`2`, "tools/call", modernParams(`"name":"list_languages","arguments":{}`, true)))
	if list.Error != nil || !strings.Contains(string(list.Result), "bash") {
		t.Errorf("list_languages with the extension: %s %+v", list.Result, list.Error)
	}
}

// TestServerRunCallBecomesTask: a call of several jobs (benchmark_script)
// that outlasts the default wait becomes a task the server runs; its
// tasks/cancel ends it cancelled; a quick one answers plainly.
func TestServerRunCallBecomesTask(t *testing.T) {
	pol := policy.Default()
	pol.Jobs.DefaultWaitS = 1
	ts := startTestServerPolicy(t, &fakeRuntime{output: "x\n"}, pol)
	call := `"name":"benchmark_script","arguments":{"language":"bash","code":"sleep 100","runs":2}`
	created := decodeExtTask(t, decodeReply(t, ts.call(`1`, "tools/call", modernParams(call, true))))
	if created.ResultType != "task" || created.Status != "working" || created.TaskID == "" {
		t.Fatalf("a long benchmark_script: %+v, want a task", created)
	}
	if _, err := ts.jobs.Get(t.Context(), created.TaskID); err == nil {
		t.Errorf("the task %s is a job's: it runs in the server", created.TaskID)
	}
	if r := decodeReply(t, ts.call(`2`, "tasks/cancel", modernParams(`"taskId":"`+created.TaskID+`"`, true))); r.Error != nil {
		t.Fatalf("tasks/cancel: %+v", r.Error)
	}
	var got extTaskReply
	for deadline := time.Now().Add(10 * time.Second); got.Status != "cancelled" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = decodeExtTask(t, decodeReply(t, ts.call(`3`, "tasks/get", modernParams(`"taskId":"`+created.TaskID+`"`, true))))
	}
	if got.Status != "cancelled" {
		t.Errorf("after tasks/cancel: %+v", got)
	}

	quick := startTestServerPolicy(t, &fakeRuntime{output: "x\n", exits: true}, pol)
	r := decodeExtTask(t, decodeReply(t, quick.call(`1`, "tools/call", modernParams(call, true))))
	if r.TaskID != "" || r.ResultType != "complete" || !strings.Contains(string(r.Content), "run") {
		t.Errorf("a quick benchmark_script: %+v, want a plain result", r)
	}
}

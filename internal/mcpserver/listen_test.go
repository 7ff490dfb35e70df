package mcpserver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
)

type notification struct {
	Method string `json:"method"`
	Params struct {
		URI           string          `json:"uri"`
		TaskID        string          `json:"taskId"`
		Status        string          `json:"status"`
		Notifications json.RawMessage `json:"notifications"`
		Meta          struct {
			SubscriptionID json.RawMessage `json:"io.modelcontextprotocol/subscriptionId"`
		} `json:"_meta"`
	} `json:"params"`
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
}

// nextNote returns the next message the server writes, decoded.
func (ts *testServer) nextNote(timeout time.Duration) notification {
	ts.t.Helper()
	var n notification
	line := ts.next(timeout)
	if err := json.Unmarshal([]byte(line), &n); err != nil {
		ts.t.Fatalf("%v: %s", err, line)
	}
	return n
}

// expectQuiet fails if the server writes anything within d.
func (ts *testServer) expectQuiet(d time.Duration) {
	ts.t.Helper()
	select {
	case l := <-ts.lines:
		ts.t.Errorf("unexpected message: %s", l)
	case <-time.After(d):
	}
}

// startedJob starts a background run_command on a fakeRuntime printing
// "first\n" and returns its id once its sandbox has started (rt.write
// reaches it: a job shows as running while its sandbox starts).
func startedJob(t *testing.T, ts *testServer) string {
	t.Helper()
	r := decodeReply(t, ts.call(`"bg"`, "tools/call", `{"name":"run_command","arguments":{"command":"x","background":true}}`))
	var started struct {
		Structured struct {
			JobID string `json:"job_id"`
		} `json:"structuredContent"`
	}
	if err := json.Unmarshal(r.Result, &started); err != nil || started.Structured.JobID == "" {
		t.Fatalf("background job: %s %v", r.Result, err)
	}
	id := started.Structured.JobID
	waitStatus(t, ts.jobs, id, record.StatusRunning)
	waitOutput(t, ts.jobs, id, int64(len("first\n")))
	return id
}

// TestListenOverStdio: subscriptions/listen acknowledges what the tenant
// may follow (a job's output and status), leaves out what it may not,
// says "updated" as output grows and when the job ends, and stops without
// an answer when the client cancels it.
func TestListenOverStdio(t *testing.T) {
	rt := &fakeRuntime{output: "first\n"}
	ts := startTestServer(t, rt)
	ts.initialize()
	id := startedJob(t, ts)

	ts.send(`{"jsonrpc":"2.0","id":"L1","method":"subscriptions/listen","params":` + modernParams(
		`"notifications":{"resourceSubscriptions":["job://`+id+`/output","job://`+id+`","job://nope/output","workspace://w/a.txt","https://x"],"toolsListChanged":true}`, false) + `}`)
	ack := ts.nextNote(10 * time.Second)
	if ack.Method != "notifications/subscriptions/acknowledged" || string(ack.Params.Meta.SubscriptionID) != `"L1"` {
		t.Fatalf("first message %+v, want the acknowledgement tagged L1", ack)
	}
	if got := string(ack.Params.Notifications); got != `{"resourceSubscriptions":["job://`+id+`/output","job://`+id+`"]}` {
		t.Errorf("acknowledged %s, want the job's two resources only", got)
	}

	rt.write("more\n")
	n := ts.nextNote(10 * time.Second)
	if n.Method != "notifications/resources/updated" || n.Params.URI != "job://"+id+"/output" || string(n.Params.Meta.SubscriptionID) != `"L1"` {
		t.Errorf("after output grew: %+v", n)
	}
	// The job's end: its status changed (its output may say so too).
	ts.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"kill_job","arguments":{"job_id":"` + id + `"}}}`)
	sawStatus, killed := false, false
	for deadline := time.Now().Add(20 * time.Second); !(sawStatus && killed) && time.Now().Before(deadline); {
		n := ts.nextNote(time.Until(deadline))
		sawStatus = sawStatus || n.Method == "notifications/resources/updated" && n.Params.URI == "job://"+id
		killed = killed || string(n.ID) == "2"
	}
	if !sawStatus {
		t.Error("no update of job://" + id + " when the job ended")
	}
	// Both followers end with the job: the listen stays open until cancelled.
	ts.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"L1"}}`)
	if r := decodeReply(t, ts.call(`3`, "ping", `{}`)); r.Error != nil {
		t.Fatalf("ping after the listen: %+v", r.Error)
	}
	ts.expectQuiet(300 * time.Millisecond)

	// Nothing to follow: acknowledged empty, and answered at once.
	ts.send(`{"jsonrpc":"2.0","id":"L2","method":"subscriptions/listen","params":` + modernParams(`"notifications":{"resourceSubscriptions":["job://nope"]}`, false) + `}`)
	if n := ts.nextNote(5 * time.Second); n.Method != "notifications/subscriptions/acknowledged" || string(n.Params.Notifications) != `{}` {
		t.Errorf("listen to nothing: %+v", n)
	}
	if n := ts.nextNote(5 * time.Second); string(n.ID) != `"L2"` || !strings.Contains(string(n.Result), `"io.modelcontextprotocol/subscriptionId":"L2"`) {
		t.Errorf("listen to nothing, its answer: %+v", n)
	}
	// taskIds need the tasks extension; notifications is required.
	if r := decodeReply(t, ts.call(`"L3"`, "subscriptions/listen", modernParams(`"notifications":{"taskIds":["x"]}`, false))); r.Error == nil || r.Error.Code != -32021 {
		t.Errorf("taskIds without the extension: %+v", r)
	}
	if r := decodeReply(t, ts.call(`"L4"`, "subscriptions/listen", modernParams("", false))); r.Error == nil || !strings.Contains(r.Error.Message, "params.notifications") {
		t.Errorf("listen without notifications: %+v", r)
	}
}

// TestListenToTasks: a task's listener hears notifications/tasks with the
// detailed task, now and when it is cancelled.
func TestListenToTasks(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{output: "working\n"})
	created := decodeExtTask(t, decodeReply(t, ts.call(`1`, "tools/call",
		modernParams(`"name":"run_command","arguments":{"command":"sleep 100","wait_s":0.1}`, true))))
	ts.send(`{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":` + modernParams(`"notifications":{"taskIds":["`+created.TaskID+`","nope"]}`, true) + `}`)
	if n := ts.nextNote(5 * time.Second); string(n.Params.Notifications) != `{"taskIds":["`+created.TaskID+`"]}` || string(n.Params.Meta.SubscriptionID) != `7` {
		t.Fatalf("acknowledgement: %+v %s", n, n.Params.Notifications)
	}
	if n := ts.nextNote(5 * time.Second); n.Method != "notifications/tasks" || n.Params.TaskID != created.TaskID || n.Params.Status != "working" {
		t.Errorf("first task notification: %+v", n)
	}
	ts.send(`{"jsonrpc":"2.0","id":8,"method":"tasks/cancel","params":` + modernParams(`"taskId":"`+created.TaskID+`"`, true) + `}`)
	for deadline := time.Now().Add(10 * time.Second); ; {
		n := ts.nextNote(time.Until(deadline))
		if n.Method == "notifications/tasks" {
			if n.Params.Status != "cancelled" {
				t.Errorf("task notification after tasks/cancel: %+v", n)
			}
			break
		}
	}
}

// TestListenToTheResourceList: resourcesListChanged is granted, and a new
// job (resources/list lists the newest) sends list_changed; 16 listens a
// tenant, the 17th refused.
func TestListenToTheResourceList(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{output: "x\n"})
	ts.send(`{"jsonrpc":"2.0","id":"R","method":"subscriptions/listen","params":` + modernParams(`"notifications":{"resourcesListChanged":true,"toolsListChanged":true}`, false) + `}`)
	if n := ts.nextNote(5 * time.Second); string(n.Params.Notifications) != `{"resourcesListChanged":true}` {
		t.Fatalf("acknowledged %s, want resourcesListChanged only", n.Params.Notifications)
	}
	ts.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + modernParams(`"name":"run_command","arguments":{"command":"x","background":true}`, false) + `}`)
	sawList := false
	for deadline := time.Now().Add(10 * time.Second); !sawList && time.Now().Before(deadline); {
		n := ts.nextNote(time.Until(deadline))
		sawList = n.Method == "notifications/resources/list_changed" && string(n.Params.Meta.SubscriptionID) == `"R"`
	}
	if !sawList {
		t.Error("no list_changed after a new job")
	}
	for i := 0; i < 15; i++ { // 15 more: 16 in all
		ts.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"M%d","method":"subscriptions/listen","params":%s}`, i, modernParams(`"notifications":{"resourcesListChanged":true}`, false)))
	}
	for acks := 0; acks < 15; { // each is open once acknowledged
		if n := ts.nextNote(5 * time.Second); n.Method == "notifications/subscriptions/acknowledged" {
			acks++
		}
	}
	r := decodeReply(t, ts.call(`"over"`, "subscriptions/listen", modernParams(`"notifications":{"resourcesListChanged":true}`, false)))
	if r.Error == nil || !strings.Contains(r.Error.Message, "16 listen streams") {
		t.Errorf("the 17th listen: %+v", r)
	}
}

// TestListenOverHTTP: over HTTP a listen is an SSE response: the
// acknowledgement first, updates as the job's output grows, and the
// closing answer, last, when the server closes.
func TestListenOverHTTP(t *testing.T) {
	rt := &fakeRuntime{output: "first\n"}
	ts := startTestServer(t, rt)
	ts.initialize()
	id := startedJob(t, ts)

	closing := make(chan struct{})
	web := httptest.NewServer(ts.srv.frontHTTP(http.NotFoundHandler(), closing))
	defer web.Close()
	body := `{"jsonrpc":"2.0","id":"H","method":"subscriptions/listen","params":` + modernParams(`"notifications":{"resourceSubscriptions":["job://`+id+`/output"]}`, false) + `}`
	resp, err := http.Post(web.URL, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	events := make(chan string, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				events <- data
			}
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("the stream ended")
			}
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return ""
	}
	if e := next(); !strings.Contains(e, "notifications/subscriptions/acknowledged") || !strings.Contains(e, `"io.modelcontextprotocol/subscriptionId":"H"`) {
		t.Fatalf("first event: %s", e)
	}
	rt.write("more\n")
	if e := next(); !strings.Contains(e, "notifications/resources/updated") || !strings.Contains(e, "job://"+id+"/output") {
		t.Errorf("after output grew: %s", e)
	}
	close(closing)
	if e := next(); !strings.Contains(e, `"id":"H"`) || !strings.Contains(e, `"result":`) {
		t.Errorf("the closing answer: %s", e)
	}
	if _, ok := <-events; ok {
		t.Error("the stream went on after its answer")
	}
}

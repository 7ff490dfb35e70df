package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/sandboxer/sandboxer/internal/record"
)

func TestIDsEchoedExactly(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{})
	ts.initialize()
	for _, id := range []string{
		`9007199254740993`, `-9007199254740993`, `123456789012345678901234567890`, `7`, `0`, `1.5`, `1e3`,
		`"abc"`, `""`, `"sbx~1"`, `"with \"quotes\" and <html>"`,
	} {
		line := ts.call(id, "tools/list", "")
		want := `{"jsonrpc":"2.0","id":` + id + `,"result":`
		if !strings.HasPrefix(line, want) {
			t.Errorf("id %s: response starts %q", id, truncateForTest(line))
		}
	}
	// Errors carry the id too.
	line := ts.call(`9007199254740993`, "no/such/method", "")
	if r := decodeReply(t, line); r.Error == nil || !strings.HasPrefix(line, `{"jsonrpc":"2.0","id":9007199254740993,"error":`) {
		t.Errorf("error response: %s", line)
	}
	// Many at once (served concurrently): each answer carries its own id.
	want := map[string]bool{}
	for i := 0; i < 50; i++ {
		id := fmt.Sprint(9007199254741000 + 2*i)
		want[id] = true
		ts.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"resources/read","params":{"uri":"job://x%d"}}`, id, i))
	}
	for len(want) > 0 {
		r := decodeReply(t, ts.next(5*time.Second))
		if !want[string(r.ID)] || r.Error == nil || r.Error.Code != -32002 {
			t.Fatalf("unexpected answer id %s: %+v", r.ID, r.Error)
		}
		delete(want, string(r.ID))
	}
	// Whitespace around the id is fine.
	ts.send(`{"jsonrpc":"2.0", "id" :  9007199254740995 , "method":"ping"}`)
	if line := ts.response(`9007199254740995`); !strings.Contains(line, `"result"`) {
		t.Errorf("ping: %s", line)
	}
}

func TestInvalidIDsRefused(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{})
	ts.initialize()
	for _, id := range []string{`{"a":1}`, `[1]`, `true`, `false`, `null`} {
		ts.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/list"}`, id))
		line := ts.next(5 * time.Second)
		r := decodeReply(t, line)
		if r.Error == nil || r.Error.Code != -32600 || string(r.ID) != "null" {
			t.Errorf("id %s: got %s", id, line)
		}
	}
	// The server carries on.
	if line := ts.call(`1`, "ping", ""); !strings.Contains(line, `"result"`) {
		t.Errorf("ping after bad ids: %s", line)
	}
}

func TestRequestsBeforeInitialize(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{})
	for _, method := range []string{"tools/list", "tools/call", "resources/list", "resources/read", "resources/templates/list"} {
		r := decodeReply(t, ts.call(`1`, method, `{}`))
		if r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, "before initialize") {
			t.Errorf("%s before initialize: %+v", method, r)
		}
	}
	if r := decodeReply(t, ts.call(`2`, "ping", "")); r.Error != nil {
		t.Errorf("ping before initialize: %+v", r.Error)
	}
	// A stateless (2026-07-28) request needs no initialize.
	modern := `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}`
	if r := decodeReply(t, ts.call(`3`, "tools/list", modern)); r.Error != nil || !strings.Contains(string(r.Result), "run_command") {
		t.Errorf("stateless tools/list: %+v %s", r.Error, r.Result)
	}
	// A legacy version in _meta is no way around initialize.
	legacy := `{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}}`
	if r := decodeReply(t, ts.call(`4`, "tools/list", legacy)); r.Error == nil || r.Error.Code != -32600 {
		t.Errorf("legacy _meta version before initialize: %+v", r)
	}
	ts.initialize()
	if r := decodeReply(t, ts.call(`5`, "tools/list", "")); r.Error != nil {
		t.Errorf("tools/list after initialize: %+v", r.Error)
	}
}

func TestUnknownResourceNotFound(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{})
	ts.initialize()
	unknown := uuid.NewString()
	for i, uri := range []string{"job://nope", "job://" + unknown, "job://" + unknown + "/output", "job://", "job://a/b/c", "job://x/outputs/", "file:///etc/passwd"} {
		r := decodeReply(t, ts.call(fmt.Sprint(i+1), "resources/read", fmt.Sprintf(`{"uri":%q}`, uri)))
		if r.Error == nil || r.Error.Code != -32002 {
			t.Errorf("%s: %+v", uri, r)
			continue
		}
		if len(r.Error.Message) < 20 || strings.Contains(r.Error.Message, "handler not found") {
			t.Errorf("%s: message %q", uri, r.Error.Message)
		}
	}
	// A real job's record and output are found.
	ctx := context.Background()
	line := ts.call(`100`, "tools/call", `{"name":"run_command","arguments":{"command":"x","background":true}}`)
	id := jobIDFrom(t, line)
	for _, uri := range []string{"job://" + id, "job://" + id + "/output"} {
		if r := decodeReply(t, ts.call(`101`, "resources/read", fmt.Sprintf(`{"uri":%q}`, uri))); r.Error != nil {
			t.Errorf("%s: %+v", uri, r.Error)
		}
	}
	_, _ = ts.jobs.Kill(ctx, id, "KILL", 0, record.ReasonRequested)
}

func jobIDFrom(t *testing.T, line string) string {
	t.Helper()
	i := strings.Index(line, `"job_id":"`)
	if i < 0 {
		t.Fatalf("no job_id in %s", truncateForTest(line))
	}
	rest := line[i+len(`"job_id":"`):]
	return rest[:strings.IndexByte(rest, '"')]
}

func TestResourcesListRecentJobs(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{})
	ts.initialize()
	var ids []string
	for i := 0; i < 3; i++ {
		line := ts.call(fmt.Sprint(10+i), "tools/call", fmt.Sprintf(`{"name":"run_command","arguments":{"command":"echo job-%d && sleep 100","background":true}}`, i))
		ids = append(ids, jobIDFrom(t, line))
	}
	r := decodeReply(t, ts.call(`20`, "resources/list", ""))
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	res := string(r.Result)
	last := -1
	for i := len(ids) - 1; i >= 0; i-- { // newest first
		at := strings.Index(res, `"uri":"job://`+ids[i]+`"`)
		if at < 0 {
			t.Fatalf("job %s not listed: %s", ids[i], res)
		}
		if at < last {
			t.Errorf("jobs not newest first: %s", res)
		}
		last = at
	}
	if !strings.Contains(res, "echo job-1 && sleep 100") || !strings.Contains(res, "running") {
		t.Errorf("no status or command in the listing: %s", res)
	}
	// The templates are still there.
	if r := decodeReply(t, ts.call(`21`, "resources/templates/list", "")); !strings.Contains(string(r.Result), "job://{job_id}/output") {
		t.Errorf("templates: %s", r.Result)
	}
	for _, id := range ids {
		_, _ = ts.jobs.Kill(context.Background(), id, "KILL", 0, record.ReasonRequested)
	}
}

func TestNoHTMLEscaping(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{output: "<b>fish & chips</b>\n"})
	ts.initialize()
	line := ts.call(`1`, "tools/call", `{"name":"run_command","arguments":{"command":"echo '<b>fish & chips</b>'","wait_s":0.2}}`)
	if strings.Contains(line, `\u003c`) || strings.Contains(line, `\u003e`) || strings.Contains(line, `\u0026`) {
		t.Errorf("escaped: %s", line)
	}
	// In structuredContent and in the text content.
	if n := strings.Count(line, "<b>fish & chips</b>"); n < 2 {
		t.Errorf("want the output literal in text and structuredContent, found %d: %s", n, line)
	}
	id := jobIDFrom(t, line)
	r := ts.call(`2`, "resources/read", fmt.Sprintf(`{"uri":"job://%s/output"}`, id))
	if !strings.Contains(r, "<b>fish & chips</b>") {
		t.Errorf("resource escaped: %s", r)
	}
	r = ts.call(`3`, "resources/read", fmt.Sprintf(`{"uri":"job://%s"}`, id))
	if !strings.Contains(r, "echo '<b>fish & chips</b>'") {
		t.Errorf("record escaped: %s", r)
	}
	_, _ = ts.jobs.Kill(context.Background(), id, "KILL", 0, record.ReasonRequested)
}

func TestUnescapeHTML(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"\u003cb\u003e \u0026"}`:     `{"a":"<b> &"}`,
		`{"a":"\\u003c"}`:                  `{"a":"\\u003c"}`, // a backslash, then the text u003c
		`{"a":"\\\u003c"}`:                 `{"a":"\\<"}`,     // a backslash, then <
		`{"a":"\"\u0026\"","b":"\u2028x"}`: `{"a":"\"&\"","b":"\u2028x"}`,
		`{"a":"no escapes"}`:               `{"a":"no escapes"}`,
		`{"a":"\u0041\u003C"}`:             `{"a":"\u0041<"}`,
		`{"a":"end\\"}`:                    `{"a":"end\\"}`,
	} {
		if got := string(unescapeHTML([]byte(in))); got != want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestMembersAndInject(t *testing.T) {
	line := []byte(`{ "id" : 12 , "params": {"name":"x"} ,"method":"tools/call"}`)
	m, ok := members(line)
	if !ok || string(m["id"].of(line)) != "12" || string(m["params"].of(line)) != `{"name":"x"}` {
		t.Fatalf("members: %v %v", m, ok)
	}
	for params, want := range map[string]string{
		`{"name":"x"}`:                  `{"_meta":{"k":"t"},"name":"x"}`,
		`{}`:                            `{"_meta":{"k":"t"}}`,
		`{ }`:                           `{"_meta":{"k":"t"} }`,
		`{"_meta":{},"name":"x"}`:       `{"_meta":{"k":"t"},"name":"x"}`,
		`{"_meta":{"progressToken":1}}`: `{"_meta":{"k":"t","progressToken":1}}`,
		`{"_meta":null}`:                `{"_meta":null}`,
	} {
		p := []byte(params)
		got := injectMetaTokenKey(p, span{0, len(p)}, []byte(`"k"`), []byte(`"t"`))
		if string(got) != want {
			t.Errorf("inject into %s = %s, want %s", params, got, want)
		}
	}
}

// cancelRun starts a waiting run_command with this id, cancels it with the
// given notification params (the requestId is filled in), and returns the
// job once the call has answered.
func cancelRun(t *testing.T, ts *testServer, rawID string, reason *string) *record.Job {
	t.Helper()
	ctx := context.Background()
	before, _, _ := ts.jobs.List(ctx, record.ListFilter{})
	ts.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"sleep 1000","wait_s":30}}}`, rawID))
	var id string
	deadline := time.Now().Add(10 * time.Second)
	for id == "" {
		jobs, _, _ := ts.jobs.List(ctx, record.ListFilter{})
		if len(jobs) > len(before) {
			id = jobs[0].ID
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("job did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitStatus(t, ts.jobs, id, record.StatusRunning)
	time.Sleep(50 * time.Millisecond) // the call is waiting on the job
	params := fmt.Sprintf(`{"requestId":%s`, rawID)
	if reason != nil {
		params += fmt.Sprintf(`,"reason":%q`, *reason)
	}
	ts.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":` + params + `}}`)
	line := ts.response(rawID)
	t.Logf("answer to the cancelled call: %s", truncateForTest(line))
	rec, err := ts.jobs.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestCancellationReasons(t *testing.T) {
	ts := startTestServer(t, &fakeRuntime{})
	ts.initialize()
	str := func(s string) *string { return &s }

	// The client's own request timed out: the job goes on.
	for i, reason := range []string{"McpError: MCP error -32001: Request timed out", "SdkError: Request timed out", "timed out after 30.0s"} {
		id := fmt.Sprint(9007199254740993 + i*2) // a big id must still find its call
		rec := cancelRun(t, ts, id, str(reason))
		time.Sleep(100 * time.Millisecond)
		if rec, _ = ts.jobs.Get(context.Background(), rec.ID); rec.Status != record.StatusRunning {
			t.Errorf("reason %q: job %s, want it running", reason, rec.Status)
		}
		_, _ = ts.jobs.Kill(context.Background(), rec.ID, "KILL", 0, record.ReasonRequested)
	}
	// Any other reason, or none, kills it.
	for i, reason := range []*string{nil, str(""), str("user aborted"), str("AbortError: This operation was aborted")} {
		rec := cancelRun(t, ts, fmt.Sprintf(`"call-%d"`, i), reason)
		rec = waitStatus(t, ts.jobs, rec.ID, record.StatusKilled, record.StatusRunning)
		if rec.Status != record.StatusKilled || rec.Reason != record.ReasonCancelled {
			t.Errorf("reason %v: job %s/%s, want killed/cancelled", reason, rec.Status, rec.Reason)
		}
	}
}

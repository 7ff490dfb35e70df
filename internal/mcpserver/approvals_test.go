package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/policy"
)

// modernElicitParams are params of a 2026-07-28 request from a client that
// can elicit.
func modernElicitParams(body string) string {
	return "{" + body + `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}}`
}

type inputRequired struct {
	ResultType    string `json:"resultType"`
	InputRequests map[string]struct {
		Method string `json:"method"`
		Params struct {
			Mode            string         `json:"mode"`
			Message         string         `json:"message"`
			RequestedSchema map[string]any `json:"requestedSchema"`
		} `json:"params"`
	} `json:"inputRequests"`
	RequestState string `json:"requestState"`
	IsError      bool   `json:"isError"`
	Content      []struct {
		Text string `json:"text"`
	} `json:"content"`
	Structured map[string]any `json:"structuredContent"`
}

func decodeInputRequired(t *testing.T, line string) inputRequired {
	t.Helper()
	r := decodeReply(t, line)
	if r.Error != nil {
		t.Fatalf("error %d: %s", r.Error.Code, r.Error.Message)
	}
	var ir inputRequired
	if err := json.Unmarshal(r.Result, &ir); err != nil {
		t.Fatal(err)
	}
	return ir
}

// TestApprovals: a job naming egress waits for a person's approval (an
// input_required result with one form elicitation naming what will run);
// the approved retry runs it; a replayed, altered or another call's state
// is refused; a decline refuses; a client that cannot elicit is refused
// with a sentence; a call the policy does not hold runs at once.
func TestApprovals(t *testing.T) {
	pol := policy.Default()
	pol.Egress.Allow = []string{"example.com"}
	pol.Approvals.Egress = true
	ts := startTestServerPolicy(t, &fakeRuntime{output: "ran\n", exits: true}, pol)
	call := `"name":"run_command","arguments":{"command":"curl https://example.com","egress":["example.com"]}`

	asked := decodeInputRequired(t, ts.call(`1`, "tools/call", modernElicitParams(call)))
	req, ok := asked.InputRequests["approval"]
	if asked.ResultType != "input_required" || !ok || req.Method != "elicitation/create" || req.Params.Mode != "form" ||
		!strings.Contains(req.Params.Message, "reach example.com through the egress proxy") ||
		!strings.Contains(req.Params.Message, "curl https://example.com") || asked.RequestState == "" ||
		req.Params.RequestedSchema["required"] == nil {
		t.Fatalf("a held call: %+v", asked)
	}
	answer := func(state, action string, approve bool) string {
		return call + `,"inputResponses":{"approval":{"action":"` + action + `","content":{"approve":` + map[bool]string{true: "true", false: "false"}[approve] + `}}},"requestState":"` + state + `"`
	}
	ran := decodeInputRequired(t, ts.call(`2`, "tools/call", modernElicitParams(answer(asked.RequestState, "accept", true))))
	if ran.IsError || ran.Structured["status"] != "completed" || ran.ResultType == "input_required" {
		t.Errorf("the approved call: %+v", ran)
	}
	replay := decodeInputRequired(t, ts.call(`3`, "tools/call", modernElicitParams(answer(asked.RequestState, "accept", true))))
	if !replay.IsError || !strings.Contains(replay.Content[0].Text, "answered already") {
		t.Errorf("a replayed approval: %+v", replay)
	}

	second := decodeInputRequired(t, ts.call(`4`, "tools/call", modernElicitParams(call)))
	tampered := []byte(second.RequestState)
	tampered[3] ^= 1
	if r := decodeInputRequired(t, ts.call(`5`, "tools/call", modernElicitParams(answer(string(tampered), "accept", true)))); !r.IsError ||
		!strings.Contains(r.Content[0].Text, "requestState") {
		t.Errorf("an altered state: %+v", r)
	}
	other := strings.Replace(answer(second.RequestState, "accept", true), "curl https://example.com", "curl https://example.com/other", 1)
	if r := decodeInputRequired(t, ts.call(`6`, "tools/call", modernElicitParams(other))); !r.IsError || !strings.Contains(r.Content[0].Text, "arguments changed") {
		t.Errorf("a state with other arguments: %+v", r)
	}
	if r := decodeInputRequired(t, ts.call(`7`, "tools/call", modernElicitParams(answer(second.RequestState, "decline", false)))); !r.IsError || !strings.Contains(r.Content[0].Text, "declined") {
		t.Errorf("a declined call: %+v", r)
	}
	third := decodeInputRequired(t, ts.call(`8`, "tools/call", modernElicitParams(call)))
	if r := decodeInputRequired(t, ts.call(`9`, "tools/call", modernElicitParams(answer(third.RequestState, "accept", false)))); !r.IsError || !strings.Contains(r.Content[0].Text, "declined") {
		t.Errorf("accepted with approve false: %+v", r)
	}

	if r := decodeInputRequired(t, ts.call(`10`, "tools/call", modernParams(call, false))); !r.IsError ||
		!strings.Contains(r.Content[0].Text, "cannot ask for one") || !strings.Contains(r.Content[0].Text, "approvals") {
		t.Errorf("a client that cannot elicit: %+v", r)
	}
	if r := decodeInputRequired(t, ts.call(`11`, "tools/call", modernElicitParams(`"name":"run_command","arguments":{"command":"true"}`))); r.IsError || r.ResultType == "input_required" {
		t.Errorf("a call the policy does not hold: %+v", r)
	}
}

// TestApprovalsOfAnEarlierRevision: a 2025-11-25 client that can elicit is
// asked with elicitation/create, and its approval runs the call.
func TestApprovalsOfAnEarlierRevision(t *testing.T) {
	pol := policy.Default()
	pol.Egress.Allow = []string{"example.com"}
	pol.Approvals.Egress = true
	ts := startTestServerPolicy(t, &fakeRuntime{output: "ran\n", exits: true}, pol)
	if r := decodeReply(t, ts.call(`"i"`, "initialize", `{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"old","version":"1"}}`)); r.Error != nil {
		t.Fatal(r.Error.Message)
	}
	ts.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	ts.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"curl https://example.com","egress":["example.com"]}}}`)
	var ask struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Message string `json:"message"`
		} `json:"params"`
	}
	if err := json.Unmarshal([]byte(ts.next(10e9)), &ask); err != nil || ask.Method != "elicitation/create" || !strings.Contains(ask.Params.Message, "example.com") {
		t.Fatalf("the server's request: %+v %v", ask, err)
	}
	ts.send(`{"jsonrpc":"2.0","id":` + string(ask.ID) + `,"result":{"action":"accept","content":{"approve":true}}}`)
	r := decodeInputRequired(t, ts.response(`1`))
	if r.IsError || r.Structured["status"] != "completed" {
		t.Errorf("the approved call of a 2025 client: %+v", r)
	}
}

// modernTaskElicitParams are params of a 2026-07-28 request from a client
// that declares the tasks extension and can elicit.
func modernTaskElicitParams(body string) string {
	return "{" + body + `,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}},"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`
}

// TestApprovalsAsTasks: a client of the tasks extension gets a held call as
// a task in input_required, whose tasks/get carries the request for
// approval; tasks/update with the approval runs the call (the task ends
// with its result), a decline ends it with the refusal, a cancel cancels it.
func TestApprovalsAsTasks(t *testing.T) {
	pol := policy.Default()
	pol.Egress.Allow = []string{"example.com"}
	pol.Approvals.Egress = true
	ts := startTestServerPolicy(t, &fakeRuntime{output: "ran\n", exits: true}, pol)
	call := `"name":"run_command","arguments":{"command":"curl https://example.com","egress":["example.com"]}`
	held := func(id string) string {
		created := decodeExtTask(t, decodeReply(t, ts.call(id, "tools/call", modernTaskElicitParams(call))))
		if created.ResultType != "task" || created.Status != "input_required" || created.TaskID == "" {
			t.Fatalf("a held call of a tasks client: %+v", created)
		}
		return created.TaskID
	}
	get := func(id, task string) (extTaskReply, string) {
		line := ts.call(id, "tasks/get", modernTaskElicitParams(`"taskId":"`+task+`"`))
		return decodeExtTask(t, decodeReply(t, line)), line
	}
	update := func(id, task, action string, approve bool) {
		a := map[bool]string{true: "true", false: "false"}[approve]
		r := decodeReply(t, ts.call(id, "tasks/update", modernTaskElicitParams(`"taskId":"`+task+`","inputResponses":{"approval":{"action":"`+action+`","content":{"approve":`+a+`}}}`)))
		if r.Error != nil || string(r.Result) != `{"resultType":"complete"}` {
			t.Fatalf("tasks/update: %s %+v", r.Result, r.Error)
		}
	}

	task := held(`1`)
	got, line := get(`2`, task)
	if got.Status != "input_required" || !strings.Contains(line, `"inputRequests":{"approval":{"method":"elicitation/create"`) ||
		!strings.Contains(line, "reach example.com through the egress proxy") {
		t.Fatalf("tasks/get of a held task: %s", line)
	}
	update(`3`, task, "accept", true)
	for deadline := time.Now().Add(10 * time.Second); got.Status != "completed" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got, line = get(`4`, task)
	}
	if got.Status != "completed" || !strings.Contains(string(got.Result), "ran") || strings.Contains(string(got.Result), `"isError":true`) {
		t.Errorf("the approved task: %s", line)
	}
	update(`5`, task, "accept", true) // answered already: ignored

	declined := held(`6`)
	update(`7`, declined, "decline", false)
	if got, line := get(`8`, declined); got.Status != "completed" || !strings.Contains(line, "a person declined this call") || !strings.Contains(line, `"isError":true`) {
		t.Errorf("a declined task: %s", line)
	}
	cancelled := held(`9`)
	if r := decodeReply(t, ts.call(`10`, "tasks/cancel", modernTaskElicitParams(`"taskId":"`+cancelled+`"`))); r.Error != nil {
		t.Fatalf("tasks/cancel of a held task: %+v", r.Error)
	}
	if got, _ := get(`11`, cancelled); got.Status != "cancelled" {
		t.Errorf("a held task cancelled: %+v", got)
	}
}

// TestApprovalSentences: what each kind of held call tells the person, and
// what the policy does not hold.
func TestApprovalSentences(t *testing.T) {
	a := newApprovals(policy.Approvals{InstallPackages: true, Egress: true, Secrets: true, ExpireS: 600})
	for _, c := range []struct {
		tool string
		args map[string]any
		want []string // "" : not held
	}{
		{"install_packages", map[string]any{"workspace": "w", "packages": []any{"requests==2.32.3"}, "manager": "pip"},
			[]string{`install_packages wants to install requests==2.32.3 with pip into workspace "w"`}},
		{"install_packages", map[string]any{"workspace": "w", "by_manager": map[string]any{"npm": []any{"left-pad"}, "apt": []any{"jq"}}},
			[]string{"jq with apt, left-pad with npm"}},
		{"run_script", map[string]any{"language": "python", "code": "print(1)", "secrets": []any{"GITHUB_TOKEN"}},
			[]string{"use the secret(s) GITHUB_TOKEN", "Its code: print(1)"}},
		{"run_command", map[string]any{"command": "curl x", "egress": []any{"pypi.org", "files.pythonhosted.org"}, "workspace": "w"},
			[]string{"reach pypi.org, files.pythonhosted.org through the egress proxy", `In workspace "w"`}},
		{"run_command", map[string]any{"command": "true", "egress": []any{}}, nil},
		{"read_file", map[string]any{"workspace": "w", "path": "a"}, nil},
	} {
		got := a.needed(c.tool, c.args)
		if c.want == nil {
			if got != "" {
				t.Errorf("%s %v is held: %q", c.tool, c.args, got)
			}
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %v: %q, want it to say %q", c.tool, c.args, got, w)
			}
		}
	}
	if got := newApprovals(policy.Approvals{Egress: true}).needed("install_packages", map[string]any{"workspace": "w", "packages": []any{"x"}}); got != "" {
		t.Errorf("an install held by a policy holding only egress: %q", got)
	}
}

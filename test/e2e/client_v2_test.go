package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/testutil"
)

// clientV2Out is what testdata/client-v2.mjs saw.
type clientV2Out struct {
	Era        string         `json:"era"`
	Extensions map[string]any `json:"extensions"`
	Long       struct {
		Kind     string   `json:"kind"`
		TaskID   string   `json:"taskId"`
		Statuses []string `json:"statuses"`
		Status   string   `json:"status"`
		Text     string   `json:"text"`
	} `json:"long"`
	Quick struct {
		Kind string `json:"kind"`
		Text string `json:"text"`
	} `json:"quick"`
	Cancelled struct {
		Kind   string `json:"kind"`
		Status string `json:"status"`
		Error  string `json:"error"`
	} `json:"cancelled"`
	TasksList       any `json:"tasksList"`
	TasksListStatus int `json:"tasksListStatus"`
	Listen          struct {
		Kind    string `json:"kind"`
		JobID   string `json:"jobId"`
		Honored struct {
			ResourceSubscriptions []string `json:"resourceSubscriptions"`
		} `json:"honored"`
		OutputUpdates int    `json:"outputUpdates"`
		StatusUpdates int    `json:"statusUpdates"`
		Closed        string `json:"closed"`
	} `json:"listen"`
	Files struct {
		Honored struct {
			ResourceSubscriptions []string `json:"resourceSubscriptions"`
		} `json:"honored"`
		Updates []string `json:"updates"`
	} `json:"files"`
	Approval struct {
		Kind     string   `json:"kind"`
		Statuses []string `json:"statuses"`
		Asked    []struct {
			Kind     string `json:"kind"`
			Message  string `json:"message"`
			Delivery string `json:"delivery"`
		} `json:"asked"`
		Status string `json:"status"`
		Text   string `json:"text"`
	} `json:"approval"`
	Other *struct {
		Honored   map[string]any `json:"honored"`
		TaskError string         `json:"taskError"`
	} `json:"other"`
}

// runClientV2 runs testdata/client-v2.mjs with args after MODULES.
func runClientV2(t *testing.T, args ...string) clientV2Out {
	t.Helper()
	node, sdkDir := sdkClient(t)
	mods := filepath.Dir(filepath.Dir(sdkDir))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, append([]string{"testdata/client-v2.mjs", mods}, args...)...)
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("client v2: %v\n%s\nstderr:\n%s", err, raw, tail(stderr.String(), 4000))
	}
	var out clientV2Out
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("client v2 printed %q: %v\nstderr:\n%s", raw, err, tail(stderr.String(), 4000))
	}
	return out
}

// checkClientV2 checks what the 2026-07-28 client saw, on either transport.
func checkClientV2(t *testing.T, out clientV2Out) {
	t.Helper()
	if out.Era != "modern" || out.Extensions["io.modelcontextprotocol/tasks"] == nil {
		t.Errorf("era %q, extensions %v: want modern, with the tasks extension", out.Era, out.Extensions)
	}
	if out.Long.Kind != "task" || out.Long.TaskID == "" || !slices.Contains(out.Long.Statuses, "working") ||
		out.Long.Status != "completed" || !strings.Contains(out.Long.Text, "task-done") {
		t.Errorf("a job longer than wait_s: %+v, want a task polled working to its result", out.Long)
	}
	if out.Quick.Kind != "immediate" || !strings.Contains(out.Quick.Text, "quick") {
		t.Errorf("a quick job: %+v, want a plain result", out.Quick)
	}
	if out.Cancelled.Kind != "task" || out.Cancelled.Status != "cancelled" {
		t.Errorf("a cancelled task: %+v", out.Cancelled)
	}
	if out.TasksList != float64(-32601) {
		t.Errorf("tasks/list in the new revision answered %v, want -32601", out.TasksList)
	}
	id := out.Listen.JobID
	if want := []string{"job://" + id + "/output", "job://" + id}; !slices.Equal(out.Listen.Honored.ResourceSubscriptions, want) {
		t.Errorf("listen acknowledged %v, want %v (not the unknown job)", out.Listen.Honored.ResourceSubscriptions, want)
	}
	// Four lines 0.7 s apart, coalesced at most every 100 ms: more than one
	// update, and the job's end.
	if out.Listen.OutputUpdates < 2 || out.Listen.StatusUpdates < 1 || out.Listen.Closed != "local" {
		t.Errorf("listen to a running job: %+v, want updates as its output grew and when it ended", out.Listen)
	}
	if len(out.Files.Honored.ResourceSubscriptions) != 2 {
		t.Errorf("listen to a workspace acknowledged %v, want its directory and its file (not the missing path)", out.Files.Honored.ResourceSubscriptions)
	}
	a := out.Approval
	if a.Kind != "task" || !slices.Contains(a.Statuses, "input_required") || len(a.Asked) != 1 || a.Asked[0].Kind != "elicitation" ||
		a.Asked[0].Delivery != "task-update" || !strings.Contains(a.Asked[0].Message, "reach example.com through the egress proxy") ||
		a.Status != "completed" || !strings.Contains(a.Text, "approved") {
		t.Errorf("an approval round trip: %+v, want a task in input_required, its person asked what will run, then the job's output", a)
	}
	for _, suffix := range []string{"/notes", "/notes/a.txt"} {
		if !slices.ContainsFunc(out.Files.Updates, func(u string) bool { return strings.HasSuffix(u, suffix) }) {
			t.Errorf("no update of the workspace's %s: %v", suffix, out.Files.Updates)
		}
	}
}

// clientV2Policy holds jobs naming egress for a person's approval.
const clientV2Policy = `egress:
  allow: ["example.com"]
approvals:
  egress: true
`

// TestClientV2OverStdio drives the tasks extension, subscriptions/listen and
// an approval with the official TypeScript client v2 pinned to 2026-07-28,
// over stdio; the audit log records the approval's decisions.
func TestClientV2OverStdio(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	state := t.TempDir()
	checkClientV2(t, runClientV2(t, "stdio", binPath, state, writePolicy(t, clientV2Policy)))
	var decisions []string
	for _, e := range auditEntries(t, &server{t: t, stateDir: state}) {
		if e["tool"] == "run_command" && e["rule"] == "approvals" {
			decisions = append(decisions, e["decision"].(string))
		}
	}
	if !slices.Equal(decisions, []string{"awaiting_approval", "approved"}) { // the held task's line, then the call's
		t.Errorf("the audit log's approval decisions: %v, want awaiting_approval then approved", decisions)
	}
}

// TestClientV2OverHTTP: the same over Streamable HTTP, and another tenant
// can neither listen to the first's job nor read its task.
func TestClientV2OverHTTP(t *testing.T) {
	t.Parallel()
	h := startHTTPServer(t, "--policy", writePolicy(t, clientV2Policy))
	out := runClientV2(t, "http", h.base+"/mcp", aliceToken, bobToken)
	checkClientV2(t, out)
	if out.TasksListStatus != 404 {
		t.Errorf("tasks/list over HTTP: status %d, want 404 (the revision's status for -32601)", out.TasksListStatus)
	}
	if out.Other == nil || len(out.Other.Honored) != 0 || !strings.Contains(out.Other.TaskError, "not found") {
		t.Errorf("another tenant: %+v, want nothing acknowledged and the task not found", out.Other)
	}
}

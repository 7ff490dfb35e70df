package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/testutil"
)

// sdkInstall serializes sdkClient's install.
var sdkInstall sync.Mutex

// sdkClient finds the TypeScript SDK and node that scripts/conformance.sh
// installs into conformance/node_modules (pinned, with the client v2 and its
// tasks extension), installing them first when they are missing.
func sdkClient(t *testing.T) (node, sdkDir string) {
	t.Helper()
	sdkInstall.Lock() // parallel tests: one npm ci at a time
	defer sdkInstall.Unlock()
	dir, err := filepath.Abs("../../conformance")
	if err != nil {
		t.Fatal(err)
	}
	node = filepath.Join(dir, "node_modules/node/bin/node")
	sdkDir = filepath.Join(dir, "node_modules/@modelcontextprotocol/sdk")
	missing := false
	for _, p := range []string{"sdk", "client", "ext-tasks"} { // every pinned package (package.json)
		if _, err := os.Stat(filepath.Join(dir, "node_modules/@modelcontextprotocol", p, "package.json")); err != nil {
			missing = true
		}
	}
	if missing {
		if _, err := exec.LookPath("npm"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("npm is needed to install the TypeScript SDK under CI=true: %v", err)
			}
			t.Skipf("skipping: npm not found, so the TypeScript SDK cannot be installed (%v)", err)
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in conformance/: %v\n%s", err, out)
		}
		// The stamp scripts/conformance.sh reads: installed from this lock file.
		if lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json")); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "node_modules/.sandboxer-lock.json"), lock, 0o644)
		}
	}
	return node, sdkDir
}

// TestTasksWithTheTypeScriptSDK drives MCP tasks with the TypeScript SDK's
// client: a task-augmented run_command answers with a task at once (the
// client polls it working before it completes), tasks/result carries the
// output and the job id, tasks/cancel ends a long task's job (get_job says
// killed), and after a server restart tasks/get and tasks/result of the
// earlier task still answer.
func TestTasksWithTheTypeScriptSDK(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	node, sdkDir := sdkClient(t)
	stateDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, node, "testdata/tasks-client.mjs", sdkDir, binPath, stateDir)
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("tasks client: %v\n%s\nstderr:\n%s", err, raw, tail(stderr.String(), 4000))
	}
	var out struct {
		Capabilities struct {
			List     *struct{} `json:"list"`
			Cancel   *struct{} `json:"cancel"`
			Requests struct {
				Tools struct {
					Call *struct{} `json:"call"`
				} `json:"tools"`
			} `json:"requests"`
		} `json:"capabilities"`
		TaskSupport map[string]string `json:"taskSupport"`
		TaskID      string            `json:"taskId"`
		Statuses    []string          `json:"statuses"`
		Error       string            `json:"error"`
		Result      struct {
			Structured struct {
				JobID  string `json:"job_id"`
				Status string `json:"status"`
				Stdout string `json:"stdout"`
			} `json:"structuredContent"`
			IsError bool `json:"isError"`
			Meta    map[string]struct {
				TaskID string `json:"taskId"`
			} `json:"_meta"`
		} `json:"result"`
		LongID string `json:"longId"`
		Cancel struct {
			Status string `json:"status"`
		} `json:"cancel"`
		LongJob struct {
			Status string `json:"status"`
			Reason string `json:"reason"`
		} `json:"longJob"`
		List       []string `json:"list"`
		BenchID    string   `json:"benchId"`
		BenchError string   `json:"benchError"`
		Bench      struct {
			Runs []any `json:"runs"`
		} `json:"bench"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	c := out.Capabilities
	if c.List == nil || c.Cancel == nil || c.Requests.Tools.Call == nil {
		t.Errorf("tasks capability: %s", raw)
	}
	for _, tool := range []string{"run_command", "run_script"} {
		if out.TaskSupport[tool] != "optional" {
			t.Errorf("%s's taskSupport is %q, want optional (%v)", tool, out.TaskSupport[tool], out.TaskSupport)
		}
	}
	if out.Error != "" {
		t.Fatalf("the task ended in an error: %s", out.Error)
	}
	// Polled working at least once: the call answered before the job ended.
	if !slices.Contains(out.Statuses, "working") || out.Statuses[len(out.Statuses)-1] != "completed" {
		t.Errorf("statuses polled: %v, want working then completed", out.Statuses)
	}
	r := out.Result
	if r.IsError || r.Structured.Stdout != "done\n" || r.Structured.JobID != out.TaskID || r.Structured.Status != "completed" {
		t.Errorf("tasks/result: %+v (task %s)", r, out.TaskID)
	}
	if r.Meta["io.modelcontextprotocol/related-task"].TaskID != out.TaskID {
		t.Errorf("tasks/result names no related task: %+v", r.Meta)
	}
	if out.Cancel.Status != "cancelled" || out.LongJob.Status != "killed" || out.LongJob.Reason != "cancelled" {
		t.Errorf("cancel: task %s, job %s (%s); want cancelled, killed (cancelled)", out.Cancel.Status, out.LongJob.Status, out.LongJob.Reason)
	}
	if out.BenchError != "" || len(out.Bench.Runs) != 2 || out.BenchID == "" {
		t.Errorf("benchmark_script as a task: %s, %d runs (id %q)", out.BenchError, len(out.Bench.Runs), out.BenchID)
	}
	if !slices.Contains(out.List, out.TaskID+" completed") || !slices.Contains(out.List, out.LongID+" cancelled") ||
		!slices.Contains(out.List, out.BenchID+" completed") {
		t.Errorf("tasks/list: %v", out.List)
	}

	// A new server on the same state: the tasks are the store's jobs. (A
	// client of the 2025-11-25 revision: its tasks/result is gone in the
	// 2026-07-28 one, TestClientV2OverStdio.)
	s := startServerClient(t, stateDir, nil, []client.ClientOption{client.WithLegacyProtocolOnly()})
	get := mcp.GetTaskRequest{}
	get.Params.TaskId = out.TaskID
	task, err := s.client.GetTask(ctx, get)
	if err != nil || task.Status != mcp.TaskStatusCompleted {
		t.Fatalf("tasks/get after a restart: %+v %v", task, err)
	}
	resReq := mcp.TaskResultRequest{}
	resReq.Params.TaskId = out.TaskID
	res, err := s.client.TaskResult(ctx, resReq)
	if err != nil {
		t.Fatalf("tasks/result after a restart: %v", err)
	}
	b, _ := json.Marshal(res)
	if !strings.Contains(string(b), `"stdout":"done\n"`) || !strings.Contains(string(b), out.TaskID) {
		t.Errorf("tasks/result after a restart: %s", b)
	}
	resReq.Params.TaskId = out.BenchID
	if res, err := s.client.TaskResult(ctx, resReq); err != nil {
		t.Errorf("benchmark_script's tasks/result after a restart: %v", err)
	} else if b, _ := json.Marshal(res); !strings.Contains(string(b), `"runs":[`) {
		t.Errorf("benchmark_script's tasks/result after a restart: %s", b)
	}
}

// postRPC posts one JSON-RPC request to /mcp with a bearer token and returns
// the decoded reply.
func postRPC(t *testing.T, h *httpServer, token, method string, params any) rpcAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, h.base+"/mcp", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a rpcAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("%s: %v: %s", method, err, raw)
	}
	return a
}

type rpcAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// TestHTTPTasksAreTheTenants: over Streamable HTTP a task is its tenant's
// like the job it is. Another tenant's tasks/get, tasks/result and
// tasks/cancel of it say not found, and its tasks/list leaves it out.
func TestHTTPTasksAreTheTenants(t *testing.T) {
	t.Parallel()
	h := startHTTPServer(t)
	created := postRPC(t, h, aliceToken, "tools/call", map[string]any{
		"name": "run_command", "arguments": map[string]any{"command": "sleep 1; echo alice-task"}, "task": map[string]any{"ttl": 60000}})
	if created.Error != nil {
		t.Fatalf("alice's task: %+v", created.Error)
	}
	var ct struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	_ = json.Unmarshal(created.Result, &ct)
	id := ct.Task.TaskID
	if id == "" {
		t.Fatalf("no task id: %s", created.Result)
	}
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		a := postRPC(t, h, bobToken, m, map[string]any{"taskId": id})
		if a.Error == nil || !strings.Contains(a.Error.Message, "not found") {
			t.Errorf("bob's %s of alice's task: %s %+v, want not found", m, a.Result, a.Error)
		}
	}
	if l := postRPC(t, h, bobToken, "tasks/list", map[string]any{}); strings.Contains(string(l.Result), id) || l.Error != nil {
		t.Errorf("bob's tasks/list: %s %+v", l.Result, l.Error)
	}
	if l := postRPC(t, h, aliceToken, "tasks/list", map[string]any{}); !strings.Contains(string(l.Result), id) {
		t.Errorf("alice's tasks/list: %s %+v", l.Result, l.Error)
	}
	res := postRPC(t, h, aliceToken, "tasks/result", map[string]any{"taskId": id})
	if res.Error != nil || !strings.Contains(string(res.Result), "alice-task") {
		t.Errorf("alice's tasks/result: %s %+v", res.Result, res.Error)
	}
	if g := postRPC(t, h, aliceToken, "tasks/get", map[string]any{"taskId": id}); !strings.Contains(string(g.Result), `"status":"completed"`) {
		t.Errorf("alice's tasks/get after the end: %s %+v", g.Result, g.Error)
	}

	// A call the server runs itself, cancelled while it runs: cancelled, its
	// job killed; bob cannot see or cancel it.
	bench := postRPC(t, h, aliceToken, "tools/call", map[string]any{
		"name": "benchmark_script", "arguments": map[string]any{"language": "bash", "code": "sleep 300", "runs": 1}, "task": map[string]any{}})
	var bt struct {
		Task struct {
			TaskID string `json:"taskId"`
			Status string `json:"status"`
		} `json:"task"`
	}
	if err := json.Unmarshal(bench.Result, &bt); err != nil || bt.Task.Status != "working" {
		t.Fatalf("benchmark_script as a task: %s %+v", bench.Result, bench.Error)
	}
	if a := postRPC(t, h, bobToken, "tasks/cancel", map[string]any{"taskId": bt.Task.TaskID}); a.Error == nil || !strings.Contains(a.Error.Message, "not found") {
		t.Errorf("bob's cancel of alice's benchmark: %s %+v", a.Result, a.Error)
	}
	alice := h.client(aliceToken)
	// Its job has to be running before the cancel can be seen to kill it.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		l := answer(t, alice, "list_jobs", map[string]any{"status": "running"})
		if strings.Contains(l, "sleep 300") || strings.Contains(l, "script") {
			break
		}
	}
	c := postRPC(t, h, aliceToken, "tasks/cancel", map[string]any{"taskId": bt.Task.TaskID})
	if c.Error != nil || !strings.Contains(string(c.Result), `"status":"cancelled"`) {
		t.Fatalf("alice's cancel of her benchmark: %s %+v", c.Result, c.Error)
	}
	if l := answer(t, alice, "list_jobs", map[string]any{"status": "running"}); strings.Contains(l, "script") {
		t.Errorf("the benchmark's job still runs after the cancel: %s", l)
	}
}

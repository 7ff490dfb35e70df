// Package faults holds tests that disturb the shared Docker engine itself.
// They run alone, after the rest of the suite (make test sets
// SANDBOXER_FAULT_TESTS=1), because they restart the daemon.
package faults

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/testutil"
)

func call(t *testing.T, c *client.Client, tool string, args map[string]any) (map[string]any, bool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var text strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	data, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return m, res.IsError, text.String()
}

// restartDaemon stops dockerd and starts it again with the project's script.
func restartDaemon(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("pkill", "-TERM", "-x", "dockerd").CombinedOutput(); err != nil {
		t.Fatalf("stop dockerd: %v %s", err, out)
	}
	for i := 0; i < 100; i++ {
		if exec.Command("pgrep", "-x", "dockerd").Run() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd := exec.Command("bash", "../../scripts/engine.sh")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start dockerd: %v %s", err, out)
	}
}

// THREATS 35: the engine restarted mid-job → the waiting call returns within
// seconds with a clear status; later jobs work without restarting the server.
func TestDaemonRestartMidJob(t *testing.T) {
	if os.Getenv("SANDBOXER_FAULT_TESTS") != "1" {
		t.Skip("restarts the Docker daemon: run alone with SANDBOXER_FAULT_TESTS=1 (make test does)")
	}
	testutil.RequireDocker(t)
	bin := os.Getenv("SANDBOXER_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "sandboxer")
		if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/sandboxer").CombinedOutput(); err != nil {
			t.Fatalf("build: %v %s", err, out)
		}
	}
	c, err := client.NewStdioMCPClient(bin, nil, "serve", "--state-dir", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "faults", Version: "1"}
	if _, err := c.Initialize(context.Background(), init); err != nil {
		t.Fatal(err)
	}
	r, isErr, text := call(t, c, "run_command", map[string]any{"command": "echo started; sleep 300", "background": true})
	if isErr {
		t.Fatal(text)
	}
	id, _ := r["job_id"].(string)
	if _, isErr, text := call(t, c, "read_output", map[string]any{"job_id": id, "until": "started", "wait_s": 20}); isErr {
		t.Fatal(text)
	}
	// A call waiting on the job while the engine goes away.
	type res struct {
		m    map[string]any
		took time.Duration
	}
	waited := make(chan res, 1)
	go func() {
		start := time.Now()
		m, _, _ := call(t, c, "get_job", map[string]any{"job_id": id, "wait_s": 50})
		waited <- res{m, time.Since(start)}
	}()
	time.Sleep(500 * time.Millisecond)
	restartStarted := time.Now()
	restartDaemon(t)
	select {
	case w := <-waited:
		if st, _ := w.m["status"].(string); st != "failed" && st != "killed" {
			t.Errorf("after an engine restart the job is %v, want failed", w.m)
		}
		if reason, _ := w.m["reason"].(string); reason != "lost" && reason != "exit_code" {
			t.Errorf("reason %q; want lost or exit_code", reason)
		}
		t.Logf("waiting call returned %s after the restart began: %v %v", time.Since(restartStarted).Round(time.Millisecond), w.m["status"], w.m["reason"])
	case <-time.After(60 * time.Second):
		t.Fatal("the waiting call did not return within 60 s of the engine restart")
	}
	// The server carries on: a new job works.
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, isErr, text := call(t, c, "run_command", map[string]any{"command": "echo back"})
		if !isErr && m["stdout"] == "back\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs do not work after the engine restart: %s", text)
		}
		time.Sleep(time.Second)
	}
}

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// wireServer is the binary driven with raw JSON-RPC lines, for what an SDK
// client would not send (or would normalise): exact ids, requests before
// initialize, odd resource URIs.
type wireServer struct {
	t     *testing.T
	stdin io.WriteCloser
	lines chan string
}

func startWire(t *testing.T) *wireServer {
	t.Helper()
	cmd := exec.Command(binPath, "serve", "--state-dir", t.TempDir())
	cmd.Env = os.Environ()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &wireServer{t: t, stdin: stdin, lines: make(chan string, 256)}
	go func() {
		sc := bufio.NewReader(stdout)
		for {
			line, err := sc.ReadString('\n')
			if line != "" {
				r.lines <- line
			}
			if err != nil {
				close(r.lines)
				return
			}
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("server did not exit after stdin closed")
		}
	})
	return r
}

func (r *wireServer) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.stdin, line+"\n"); err != nil {
		r.t.Fatal(err)
	}
}

func (r *wireServer) next() string {
	r.t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			r.t.Fatal("server output ended")
		}
		return l
	case <-time.After(20 * time.Second):
		r.t.Fatal("no answer from the server")
	}
	return ""
}

type wireReply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (r *wireServer) reply(line string) wireReply {
	r.t.Helper()
	var rep wireReply
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		r.t.Fatalf("not JSON: %q", line)
	}
	return rep
}

func TestProtocolRawWire(t *testing.T) {
	t.Parallel()
	r := startWire(t)

	// Before initialize: refused, ping allowed.
	r.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if rep := r.reply(r.next()); rep.Error == nil || rep.Error.Code != -32600 || !strings.Contains(rep.Error.Message, "before initialize") {
		t.Errorf("tools/list before initialize: %+v", rep)
	}
	r.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if rep := r.reply(r.next()); rep.Error != nil {
		t.Errorf("ping: %+v", rep.Error)
	}

	r.send(`{"jsonrpc":"2.0","id":9007199254740993,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if line := r.next(); !strings.HasPrefix(line, `{"jsonrpc":"2.0","id":9007199254740993,"result":`) {
		t.Fatalf("initialize: %s", line)
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	// Ids: exact, and refused when not a string or number.
	r.send(`{"jsonrpc":"2.0","id":18446744073709551617,"method":"tools/list"}`)
	if line := r.next(); !strings.HasPrefix(line, `{"jsonrpc":"2.0","id":18446744073709551617,"result":`) {
		t.Errorf("big id: %.200s", line)
	} else if strings.Contains(line, `\u003c`) || strings.Contains(line, `\u0026`) {
		t.Errorf("HTML-escaped text on the wire: %.200s", line)
	}
	r.send(`{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`)
	if rep := r.reply(r.next()); rep.Error == nil || rep.Error.Code != -32600 || string(rep.ID) != "null" {
		t.Errorf("object id: %+v", rep)
	}

	// Unknown job resources: -32002 with a sentence.
	for i, uri := range []string{"job://nope", "job://00000000-0000-4000-8000-000000000000/output", "job://a/b/c"} {
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"r%d","method":"resources/read","params":{"uri":%q}}`, i, uri))
		if rep := r.reply(r.next()); rep.Error == nil || rep.Error.Code != -32002 {
			t.Errorf("%s: %+v", uri, rep)
		}
	}
	r.send(`{"jsonrpc":"2.0","id":"list","method":"resources/list"}`)
	if rep := r.reply(r.next()); rep.Error != nil {
		t.Errorf("resources/list: %+v", rep.Error)
	}
}

// A call that the client abandons because its own request timed out (at 5 s,
// while the server would wait 10) leaves the job running: it is findable with
// list_jobs and goes on to complete. (mcp-go's client sends the reason
// "context deadline exceeded"; the SDKs' reasons are unit-tested.) A
// deliberate cancellation still kills the job: TestJobsCancelledCallKillsJob.
func TestProtocolClientTimeoutLeavesJobRunning(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.client.CallTool(ctx, toolRequest("run_command", map[string]any{"command": "sleep 7; echo finished", "wait_s": 10})); err == nil {
		t.Fatal("want the call to time out")
	}
	time.Sleep(500 * time.Millisecond)
	jobs := s.ok("list_jobs", map[string]any{"status": "running"})
	list, _ := jobs["jobs"].([]any)
	if len(list) != 1 {
		t.Fatalf("want the job still running, got %v", jobs)
	}
	id := str(list[0].(map[string]any), "job_id")
	if got := s.ok("get_job", map[string]any{"job_id": id, "wait_s": 15}); str(got, "status") != "completed" {
		t.Fatalf("the job whose call timed out: %v", got)
	}
	if out, _ := s.readAll(id); out != "finished\n" {
		t.Errorf("output %q", out)
	}
}

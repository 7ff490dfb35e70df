package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/tools"
)

// fakeRuntime runs "sandboxes" that print what a test asks and then wait
// until destroyed, without Docker.
type fakeRuntime struct {
	output string // written to stdout at start
	exits  bool   // the sandbox ends at once (exit 0) instead of waiting

	mu   sync.Mutex
	last sandbox.Output // the last sandbox's output, for write
}

// write writes more output of the last sandbox started (a test waits for
// its first output, waitOutput: a job shows as running before its start).
func (r *fakeRuntime) write(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last.Write(sandbox.Stdout, []byte(s))
}

type fakeHandle struct {
	code *int // the exit code; nil: 137, killed
	id   string
	once sync.Once
	done chan struct{}
}

func (r *fakeRuntime) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	r.mu.Lock()
	r.last = out
	r.mu.Unlock()
	if r.output != "" {
		out.Write(sandbox.Stdout, []byte(r.output))
	}
	h := &fakeHandle{id: "fake-" + spec.JobID, done: make(chan struct{})}
	if r.exits {
		h.code = new(int)
		h.once.Do(func() { close(h.done) })
	}
	return h, nil
}
func (r *fakeRuntime) Adopt(context.Context, string, int64, int64, sandbox.Output) (sandbox.Handle, error) {
	return nil, errors.New("fake: no adoption")
}
func (r *fakeRuntime) List(context.Context) ([]sandbox.Container, error) { return nil, nil }
func (r *fakeRuntime) Remove(context.Context, string) error              { return nil }
func (r *fakeRuntime) Ping(context.Context) error                        { return nil }
func (r *fakeRuntime) ImageExists(context.Context, string) (bool, error) { return true, nil }
func (r *fakeRuntime) Close() error                                      { return nil }

func (h *fakeHandle) ContainerID() string { return h.id }
func (h *fakeHandle) KeepsStdin() bool    { return false }
func (h *fakeHandle) WriteStdin(context.Context, []byte) (int, error) {
	return 0, sandbox.ErrNoStdin
}
func (h *fakeHandle) CloseStdin() error     { return nil }
func (h *fakeHandle) Done() <-chan struct{} { return h.done }
func (h *fakeHandle) Status() sandbox.ExitStatus {
	if h.code != nil {
		return sandbox.ExitStatus{ExitCode: *h.code}
	}
	return sandbox.ExitStatus{ExitCode: 137}
}
func (h *fakeHandle) Signal(context.Context, string) error { return nil }
func (h *fakeHandle) Resize(context.Context, uint16, uint16) error {
	return sandbox.ErrNoTTY
}
func (h *fakeHandle) Destroy(context.Context) error { h.once.Do(func() { close(h.done) }); return nil }

// testServer is a Server serving over in-process pipes, with a raw client.
type testServer struct {
	t     *testing.T
	srv   *Server
	jobs  *job.Manager
	in    *io.PipeWriter
	lines chan []byte
	done  chan error
}

func startTestServer(t *testing.T, rt *fakeRuntime) *testServer {
	t.Helper()
	return startTestServerPolicy(t, rt, policy.Default())
}

// startTestServerPolicy is startTestServer with a policy of the test's.
func startTestServerPolicy(t *testing.T, rt *fakeRuntime, pol *policy.Policy) *testServer {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "sandboxer.db"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := job.New(rt, st, pol, dir, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(tools.Deps{Jobs: jobs, Policy: pol, Languages: lang.NewRegistry(pol.Image, nil), Runtime: rt}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ts := &testServer{t: t, srv: srv, jobs: jobs, in: inW, lines: make(chan []byte, 1024), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		ts.done <- srv.ServeStdio(ctx, inR, outW, log.New(io.Discard, "", 0))
		outW.Close()
	}()
	go func() {
		r := bufio.NewReaderSize(outR, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				ts.lines <- line
			}
			if err != nil {
				close(ts.lines)
				return
			}
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-ts.done:
		case <-time.After(5 * time.Second):
			t.Error("server did not stop after stdin closed")
		}
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		jobs.Shutdown(sctx)
		scancel()
		st.Close()
	})
	return ts
}

// send writes one raw line.
func (ts *testServer) send(line string) {
	ts.t.Helper()
	if _, err := io.WriteString(ts.in, line+"\n"); err != nil {
		ts.t.Fatal(err)
	}
}

// next returns the next line the server wrote.
func (ts *testServer) next(timeout time.Duration) string {
	ts.t.Helper()
	select {
	case l, ok := <-ts.lines:
		if !ok {
			ts.t.Fatal("server output ended")
		}
		return string(l)
	case <-time.After(timeout):
		ts.t.Fatal("no message from the server")
	}
	return ""
}

// response reads lines until one with this raw id (as JSON text) appears,
// skipping notifications; the line is returned as written.
func (ts *testServer) response(rawID string) string {
	ts.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		line := ts.next(time.Until(deadline))
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal([]byte(line), &msg); err != nil {
			ts.t.Fatalf("server wrote a non-JSON line: %q", line)
		}
		if msg.Method == "" && string(msg.ID) == rawID {
			return line
		}
	}
	ts.t.Fatalf("no response with id %s", rawID)
	return ""
}

// call sends a request and returns its response line.
func (ts *testServer) call(rawID, method, params string) string {
	ts.t.Helper()
	msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":%q`, rawID, method)
	if params != "" {
		msg += `,"params":` + params
	}
	ts.send(msg + "}")
	return ts.response(rawID)
}

func (ts *testServer) initialize() {
	ts.t.Helper()
	line := ts.call(`"init"`, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}`)
	if !strings.Contains(line, `"result"`) {
		ts.t.Fatalf("initialize: %s", line)
	}
	ts.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

type rpcReply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeReply(t *testing.T, line string) rpcReply {
	t.Helper()
	var r rpcReply
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	return r
}

// waitOutput waits until a job has stored at least n bytes of output.
func waitOutput(t *testing.T, jobs *job.Manager, id string, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if size, err := jobs.Size(context.Background(), id, 0); err == nil && size >= n {
			return
		}
	}
	t.Fatalf("job %s stored no %d bytes of output", id, n)
}

// waitStatus waits until a job has one of the statuses.
func waitStatus(t *testing.T, jobs *job.Manager, id string, statuses ...string) *record.Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := jobs.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range statuses {
			if rec.Status == s {
				return rec
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s, want one of %v", id, rec.Status, statuses)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

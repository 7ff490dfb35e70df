// Package e2e drives the built sandboxer binary over stdio with an MCP client,
// as an agent would. Every line the server writes to stdout is checked to be
// an MCP (JSON-RPC 2.0) message.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/gobuild"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

var binPath string

func TestMain(m *testing.M) {
	flag.Parse()
	setDefaultParallel()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "e2e: every test drives a server on an engine: skipped under -short")
		os.Exit(0)
	}
	binPath = os.Getenv("SANDBOXER_BIN")
	if binPath == "" {
		dir, err := os.MkdirTemp("", "sandboxer-e2e")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		binPath = filepath.Join(dir, "sandboxer")
		build := exec.Command("go", "build", "-o", binPath, "../../cmd/sandboxer")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build sandboxer:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(dir)
	}
	os.Exit(m.Run())
}

// defaultParallel is how many tests marked parallel run at once when -parallel
// is not given. Go's default (GOMAXPROCS, 2 on the machines this runs on) suits
// tests that compute; these mostly wait on a server, an engine and its
// containers (on a 2-core machine the serial ones kept it about a third busy),
// so more of them at once shortens `make test` without starving any. The few
// whose assertions are about time do not call t.Parallel, and run first, alone.
const defaultParallel = 4

// setDefaultParallel applies defaultParallel unless the command line set -test.parallel.
func setDefaultParallel() {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", fmt.Sprint(defaultParallel))
	}
}

// server is one running sandboxer process with a connected MCP client.
type server struct {
	t        *testing.T
	stateDir string
	env      []string
	cmd      *exec.Cmd
	client   *client.Client
	stderr   *syncBuffer
	stdout   *stdoutValidator
	notes    *notifications
	exited   chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// stdoutValidator passes the server's stdout through, failing the test on any
// line that is not a JSON-RPC 2.0 message.
type stdoutValidator struct {
	t   *testing.T
	mu  sync.Mutex
	bad []string
}

func (v *stdoutValidator) pipe(src io.Reader, dst *io.PipeWriter) {
	r := bufio.NewReaderSize(src, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			var msg struct {
				JSONRPC string `json:"jsonrpc"`
			}
			if json.Unmarshal(line, &msg) != nil || msg.JSONRPC != "2.0" {
				v.mu.Lock()
				v.bad = append(v.bad, string(truncate(line, 200)))
				v.mu.Unlock()
			}
			if _, werr := dst.Write(line); werr != nil {
				return
			}
		}
		if err != nil {
			dst.CloseWithError(err)
			return
		}
	}
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

type notifications struct {
	mu       sync.Mutex
	progress []mcp.JSONRPCNotification
}

// writePolicy writes a policy file for a test and returns its path.
func writePolicy(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// policyEnv is the environment that points a server at a policy with yaml in it.
func policyEnv(t *testing.T, yaml string) string {
	t.Helper()
	return "SANDBOXER_POLICY=" + writePolicy(t, yaml)
}

// startServer starts the binary with a fresh state dir (or the given one).
func startServer(t *testing.T, env ...string) *server {
	t.Helper()
	testutil.RequireDocker(t)
	return startServerIn(t, t.TempDir(), env...)
}

func startServerIn(t *testing.T, stateDir string, env ...string) *server {
	t.Helper()
	return startServerFlags(t, stateDir, nil, env...)
}

// startServerFlags starts the binary on stateDir with more serve flags.
func startServerFlags(t *testing.T, stateDir string, flags []string, env ...string) *server {
	t.Helper()
	return startServerClient(t, stateDir, flags, nil, env...)
}

// startServerClient is startServerFlags with options for its client (the
// mcp-go client speaks the newest revision unless told otherwise).
func startServerClient(t *testing.T, stateDir string, flags []string, opts []client.ClientOption, env ...string) *server {
	t.Helper()
	s := &server{t: t, stateDir: stateDir, env: env, stderr: &syncBuffer{}, notes: &notifications{}, exited: make(chan struct{})}
	s.cmd = exec.Command(binPath, append([]string{"serve", "--state-dir", stateDir, "--log-level", "debug"}, flags...)...)
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stderr = s.stderr
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	rawOut, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	s.stdout = &stdoutValidator{t: t}
	pr, pw := io.Pipe()
	go s.stdout.pipe(rawOut, pw)
	tr := transport.NewIO(pr, stdin, io.NopCloser(bytes.NewReader(nil)))
	s.client = client.NewClient(tr, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.client.Start(ctx); err != nil {
		t.Fatalf("start client: %v\nstderr:\n%s", err, s.stderr.String())
	}
	s.client.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == string(mcp.MethodNotificationProgress) {
			s.notes.mu.Lock()
			s.notes.progress = append(s.notes.progress, n)
			s.notes.mu.Unlock()
		}
	})
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "sandboxer-e2e", Version: "1"}
	if _, err := s.client.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize: %v\nstderr:\n%s", err, s.stderr.String())
	}
	t.Cleanup(func() {
		s.stop()
		s.removeGoBuildCaches()
	})
	return s
}

// removeGoBuildCaches removes the shared Go build cache volumes of this
// server's instance (internal/gobuild): each test's state directory is an
// instance of its own, and the engine is shared.
func (s *server) removeGoBuildCaches() { removeGoBuildCachesOf(s.t, s.stateDir) }

// removeGoBuildCachesOf removes the shared Go build cache volumes of the
// instance of a state directory.
func removeGoBuildCachesOf(t *testing.T, stateDir string) {
	cfg := config.Config{StateDir: stateDir}
	rt, err := docker.New(cfg.Instance())
	if err != nil {
		return
	}
	defer rt.Close()
	vols, _ := rt.ListVolumes(context.Background(), gobuild.LabelTenant)
	for _, v := range vols {
		if err := rt.RemoveVolume(context.Background(), v.Name); err != nil {
			t.Logf("remove volume %s: %v", v.Name, err)
		}
	}
}

// stop closes stdin (a graceful shutdown) and checks stdout stayed clean.
func (s *server) stop() {
	s.t.Helper()
	select {
	case <-s.exited:
	default:
		_ = s.client.Close()
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			s.t.Errorf("server did not exit within 20 s of stdin closing\nstderr:\n%s", s.stderr.String())
			<-s.exited
		}
	}
	s.checkRaces()
	s.stdout.mu.Lock()
	defer s.stdout.mu.Unlock()
	if len(s.stdout.bad) > 0 {
		s.t.Errorf("server wrote %d non-MCP lines to stdout, first: %q", len(s.stdout.bad), s.stdout.bad[0])
	}
}

// kill9 kills the server with SIGKILL, as a crash would.
func (s *server) kill9() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	_ = s.client.Close()
	s.checkRaces()
}

// checkRaces fails the test if the server (built with -race by make test)
// reported a data race.
func (s *server) checkRaces() {
	s.t.Helper()
	if out := s.stderr.String(); strings.Contains(out, "WARNING: DATA RACE") {
		i := strings.Index(out, "WARNING: DATA RACE")
		s.t.Errorf("the server reported a data race:\n%s", tail(out[i:], 6000))
	}
}

// call calls a tool and returns the result.
func (s *server) call(tool string, args map[string]any) *mcp.CallToolResult {
	s.t.Helper()
	return s.callCtx(context.Background(), tool, args)
}

func (s *server) callCtx(ctx context.Context, tool string, args map[string]any) *mcp.CallToolResult {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := s.client.CallTool(ctx, req)
	if err != nil {
		s.t.Fatalf("call %s: %v\nstderr tail:\n%s", tool, err, tail(s.stderr.String(), 3000))
	}
	return res
}

// ok calls a tool that must succeed and decodes its structured result.
func (s *server) ok(tool string, args map[string]any) map[string]any {
	s.t.Helper()
	res := s.call(tool, args)
	if res.IsError {
		s.t.Fatalf("%s(%v) returned a tool error: %s", tool, args, text(res))
	}
	return structured(s.t, res)
}

// toolErr calls a tool that must fail with a tool error and returns its text.
func (s *server) toolErr(tool string, args map[string]any) string {
	s.t.Helper()
	res := s.call(tool, args)
	if !res.IsError {
		s.t.Fatalf("%s(%v) should have been a tool error, got: %s", tool, args, text(res))
	}
	return text(res)
}

// failedWith calls a tool that must fail with a tool error that still carries
// a structured result (e.g. an install whose packages were not all installed).
func (s *server) failedWith(tool string, args map[string]any) (map[string]any, string) {
	s.t.Helper()
	res := s.call(tool, args)
	if !res.IsError {
		s.t.Fatalf("%s(%v) should have been a tool error, got: %s", tool, args, text(res))
	}
	return structured(s.t, res), text(res)
}

func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("structured content is not an object: %s", data)
	}
	return m
}

func text(res *mcp.CallToolResult) string {
	var b bytes.Buffer
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// containers lists the job sandboxes this server instance has on the engine.
func (s *server) containers() []sandbox.Container {
	s.t.Helper()
	cfg := config.Config{StateDir: s.stateDir}
	rt, err := docker.New(cfg.Instance())
	if err != nil {
		s.t.Fatal(err)
	}
	defer rt.Close()
	cs, err := rt.List(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	// Warm sandboxes wait for a job and are not any job's: not counted; nor
	// are the shared Go build cache's builders (they follow go jobs, and the
	// server removes them at its exit: test/leftovers checks).
	jobs := cs[:0]
	for _, c := range cs {
		if (c.Kind != sandbox.KindPool || c.JobID != "") && c.Kind != gobuild.KindBuilder {
			jobs = append(jobs, c)
		}
	}
	return jobs
}

// allContainers lists every sandbox of this instance, warm ones included.
func (s *server) allContainers() []sandbox.Container {
	s.t.Helper()
	cfg := config.Config{StateDir: s.stateDir}
	rt, err := docker.New(cfg.Instance())
	if err != nil {
		s.t.Fatal(err)
	}
	defer rt.Close()
	cs, err := rt.List(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return cs
}

// waitNoContainers waits until the instance has no sandboxes left.
func (s *server) waitNoContainers(within time.Duration) {
	s.t.Helper()
	// A job's sandbox is removed after its result is returned: on this busy
	// 2-core machine, with the suite's other servers running, a removal has
	// taken longer than 10 s (a fresh clone's CI run). The bound is for the
	// removal happening at all; how fast it is belongs to the bench.
	within = max(within, 30*time.Second)
	deadline := time.Now().Add(within)
	for {
		cs := s.containers()
		if len(cs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var left []string
			for _, c := range cs {
				left = append(left, fmt.Sprintf("%.12s job %q kind %q running %v", c.ID, c.JobID, c.Kind, c.Running))
			}
			s.t.Fatalf("%d sandbox containers still present after %s: %s\nstderr:\n%s", len(cs), within, strings.Join(left, "; "), tail(s.stderr.String(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func num(t *testing.T, m map[string]any, key string) float64 {
	t.Helper()
	v, ok := m[key].(float64)
	if !ok {
		t.Fatalf("result field %q is %v (%T), want a number; result: %v", key, m[key], m[key], m)
	}
	return v
}

func str(m map[string]any, key string) string {
	v, _ := m[key].(string)
	return v
}

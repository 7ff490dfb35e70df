package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxer/sandboxer/internal/e2b/envd/process"
	"github.com/sandboxer/sandboxer/internal/e2b/envd/process/processconnect"
)

var e2bLine = regexp.MustCompile(`"addr":"([0-9.:\[\]]+)".*serving the E2B API on http`)

// e2bSDK installs the pinned e2b SDK into testdata/e2b (npm ci) when it is
// missing, and returns node.
func e2bSDK(t *testing.T) string {
	t.Helper()
	node, _ := sdkClient(t) // conformance/'s node 22
	sdkInstall.Lock()
	defer sdkInstall.Unlock()
	dir, _ := filepath.Abs("testdata/e2b")
	if _, err := os.Stat(filepath.Join(dir, "node_modules/e2b/package.json")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in testdata/e2b: %v\n%s", err, out)
		}
	}
	return node
}

// startE2BServer serves HTTP and the E2B API (serve with extra, which
// names --e2b) and returns the E2B listener's address.
func startE2BServer(t *testing.T, extra ...string) (*httpServer, string) {
	t.Helper()
	h := startHTTPServer(t, extra...)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := e2bLine.FindStringSubmatch(h.stderr.String()); m != nil {
			return h, m[1]
		}
	}
	t.Fatalf("no 'serving the E2B API' line:\n%s", tail(h.stderr.String(), 3000))
	return nil, ""
}

// runE2BScript runs a script of testdata/e2b with the e2b SDK against a
// server of its own (serve with extra), as alice, and returns its stdout.
func runE2BScript(t *testing.T, script string, extra ...string) []byte {
	t.Helper()
	h, addr := startE2BServer(t, extra...)
	node := e2bSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = "testdata/e2b"
	cmd.Env = append(os.Environ(), "E2B_API_URL=http://"+addr, "E2B_SANDBOX_URL=http://"+addr,
		"E2B_API_KEY="+aliceToken, "OTHER_KEY="+bobToken)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("the e2b script %s: %v\n%s\nstderr:\n%s\nserver:\n%s", script, err, raw, tail(stderr.String(), 3000), tail(h.stderr.String(), 3000))
	}
	return raw
}

// TestE2BSDK: a script an E2B user writes, run with the real e2b SDK and
// only E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY changed, against
// `serve --e2b`: create, a command's output, error output and exit code,
// a file written and read (also by a command), the filesystem (list,
// makeDir, watchDir, rename, getInfo, remove), a terminal typed into,
// resized and killed, a pause (and connect resuming it), a background command fed
// through stdin, listed and killed, list, set the timeout, connect again,
// kill; another tenant's key lists none of it and cannot
// connect to it.
func TestE2BSDK(t *testing.T) {
	t.Parallel()
	raw := runE2BScript(t, "client.mjs", "--e2b", "127.0.0.1:0")
	var out struct {
		SandboxID string `json:"sandboxId"`
		Run       struct {
			Stdout, Stderr string
			ExitCode       int
		} `json:"run"`
		OK struct {
			Stdout   string
			ExitCode int
		} `json:"ok"`
		Read, Cat, Reconnected    string
		Home                      string
		List, Events              []string
		MadeDir, MadeAgain        bool
		Moved, Info               string
		ExistsAfterRemove         bool
		PtyAnswered, PtyResized   bool
		PtyKilled                 bool
		Paused                    bool
		PausedState               string
		Fed, BgEnd                string
		BgPid                     int
		ListedPids, AfterKillPids []int
		Killed                    bool
		Listed, OtherListed       []string
		AfterKill                 []string
		OtherConnect              string
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("the script printed %q: %v", raw, err)
	}
	if out.Run.Stdout != "hello from /workspace\n" || out.Run.Stderr != "oops\n" || out.Run.ExitCode != 3 {
		t.Errorf("a command with envs, error output and exit 3: %+v", out.Run)
	}
	if out.OK.Stdout != "done\n" || out.OK.ExitCode != 0 {
		t.Errorf("a plain command: %+v", out.OK)
	}
	if out.Read != "some notes\n" || out.Cat != "some notes\n" || out.Reconnected != "some notes\n" {
		t.Errorf("a file written: read %q, by a command at its E2B path %q, after connect %q", out.Read, out.Cat, out.Reconnected)
	}
	if out.Home != "/workspace\n/home/user\n" {
		t.Errorf("E2B's home in a command: %q, want /home/user, a link to /workspace", out.Home)
	}
	if out.Fed != "ping\n" || !slices.Contains(out.ListedPids, out.BgPid) || !out.Killed ||
		!strings.Contains(out.BgEnd, "exit 137") || len(out.AfterKillPids) != 0 {
		t.Errorf("a background command: fed %q, listed %v (pid %d), killed %v, its end %q, then listed %v",
			out.Fed, out.ListedPids, out.BgPid, out.Killed, out.BgEnd, out.AfterKillPids)
	}
	if !slices.Equal(out.List, []string{"a.txt:file"}) || !out.MadeDir || out.MadeAgain || !slices.Contains(out.Events, "create:b.txt") ||
		out.Moved != "/home/user/data/c.txt" || out.Info != "c.txt:file:1" || out.ExistsAfterRemove {
		t.Errorf("the filesystem: list %v, makeDir %v then %v, watch %v, rename %q, getInfo %q, exists after remove %v",
			out.List, out.MadeDir, out.MadeAgain, out.Events, out.Moved, out.Info, out.ExistsAfterRemove)
	}
	if !out.Paused || out.PausedState != "paused" {
		t.Errorf("pause: %v, then the state %q", out.Paused, out.PausedState)
	}
	if !out.PtyAnswered || !out.PtyResized || !out.PtyKilled {
		t.Errorf("a terminal: answered %v, resized %v, killed %v", out.PtyAnswered, out.PtyResized, out.PtyKilled)
	}
	if !slices.Equal(out.Listed, []string{out.SandboxID}) || len(out.AfterKill) != 0 {
		t.Errorf("list: %v, after kill %v", out.Listed, out.AfterKill)
	}
	if len(out.OtherListed) != 0 || !strings.Contains(out.OtherConnect, "not found") {
		t.Errorf("another tenant: listed %v, connect %q", out.OtherListed, out.OtherConnect)
	}
}

// TestE2BLifecycle: with the real e2b SDK (lifecycle.mjs), against a server
// with the templates toolset: a running sandbox's metrics against its
// limits; a command's timeoutMs ends it; the user option (root refused); a polled watcher (Create,
// GetWatcherEvents, Remove) sees a new file; the git helpers init, add and
// commit; a snapshot a new sandbox starts
// from, listed by its sandbox, deleted once (then not found); a fork refused
// while a process runs that runc cannot carry, then two forks with the
// files; nothing left listed.
func TestE2BLifecycle(t *testing.T) {
	t.Parallel()
	raw := runE2BScript(t, "lifecycle.mjs", "--e2b", "127.0.0.1:0", "--toolsets", "all")
	t.Logf("lifecycle.mjs saw %s", raw)
	var out struct {
		Metrics []struct {
			CPUCount                               int
			CPUUsedPct                             float64
			MemUsed, MemTotal, DiskUsed, DiskTotal int64
			Recent                                 bool
		}
		TimedOut              string
		TimeoutTookMs         int
		Polled                []string
		RemovedWatcher        int
		PollAfterRemove       string
		GitUntracked          []string
		AsUser, AsRoot        string
		WriteAsRoot           string
		GitLog                string
		SnapshotID            string `json:"snapshotId"`
		Snapshots             []string
		FromSnapshot          string
		Deleted, DeletedAgain bool
		ForkWhileRunning      string
		Forks                 []string
		Left                  []string
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("the script printed %q: %v", raw, err)
	}
	if len(out.Metrics) != 1 {
		t.Fatalf("metrics: %+v, want one sample", out.Metrics)
	}
	m := out.Metrics[0]
	if m.CPUCount < 1 || m.MemUsed <= 0 || m.MemTotal < m.MemUsed || m.DiskTotal <= 0 || m.DiskUsed < 0 || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 || !m.Recent {
		t.Errorf("metrics: %+v", m)
	}
	if out.TimedOut == "finished" || out.TimeoutTookMs > 20000 {
		t.Errorf("sleep 30 with timeoutMs 2000: %s after %d ms", out.TimedOut, out.TimeoutTookMs)
	}
	if !slices.Contains(out.Polled, "EVENT_TYPE_CREATE:p.txt") || out.RemovedWatcher != 200 || out.PollAfterRemove != "not_found" {
		t.Errorf("a polled watcher: events %v, removed %d, polled after %q", out.Polled, out.RemovedWatcher, out.PollAfterRemove)
	}
	if out.AsUser != "1000\n" || !strings.Contains(out.AsRoot, `user "root"`) || !strings.Contains(out.WriteAsRoot, "unprivileged") {
		t.Errorf("the user option: as user %q, as root %q, a file written as root %q", out.AsUser, out.AsRoot, out.WriteAsRoot)
	}
	if !slices.Equal(out.GitUntracked, []string{"untracked:a.txt"}) || out.GitLog != "first\n" {
		t.Errorf("the git helpers: status %v, then log %q", out.GitUntracked, out.GitLog)
	}
	if out.SnapshotID == "" || !slices.Equal(out.Snapshots, []string{out.SnapshotID}) || out.FromSnapshot != "v1\n" || !out.Deleted || out.DeletedAgain {
		t.Errorf("a snapshot %q: listed %v, a sandbox from it read %q, deleted %v then %v",
			out.SnapshotID, out.Snapshots, out.FromSnapshot, out.Deleted, out.DeletedAgain)
	}
	if !strings.Contains(out.ForkWhileRunning, "would not be carried") || !slices.Equal(out.Forks, []string{"v1\n", "v1\n"}) {
		t.Errorf("forks: while a process runs %q; then %q", out.ForkWhileRunning, out.Forks)
	}
	if len(out.Left) != 0 {
		t.Errorf("sandboxes left: %v", out.Left)
	}
}

// TestE2BKeepalive: a quiet command's stream carries keepalive events at
// the SDK's Keepalive-Ping-Interval (so proxies do not close it), then its
// output and its end; over the generated Connect client, as the SDK speaks.
func TestE2BKeepalive(t *testing.T) {
	t.Parallel()
	_, addr := startE2BServer(t, "--e2b", "127.0.0.1:0")
	base := "http://" + addr
	req, _ := http.NewRequest("POST", base+"/sandboxes", strings.NewReader(`{"templateID":"bash","timeout":120}`))
	req.Header.Set("X-API-KEY", aliceToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	_ = json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || sb.SandboxID == "" {
		t.Fatalf("create: %d %+v", resp.StatusCode, sb)
	}
	defer func() {
		req, _ := http.NewRequest("DELETE", base+"/sandboxes/"+sb.SandboxID, nil)
		req.Header.Set("X-API-KEY", aliceToken)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	client := processconnect.NewProcessClient(http.DefaultClient, base)
	start := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "sleep 2.5; echo done"}}})
	start.Header().Set("E2b-Sandbox-Id", sb.SandboxID)
	start.Header().Set("X-Access-Token", sb.EnvdAccessToken)
	start.Header().Set("Keepalive-Ping-Interval", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.Start(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var out string
	exit := int32(-1)
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent(); {
		case ev.GetStart() != nil:
			kinds = append(kinds, "start")
		case ev.GetKeepalive() != nil:
			kinds = append(kinds, "keepalive")
		case ev.GetData() != nil:
			kinds = append(kinds, "data")
			out += string(ev.GetData().GetStdout())
		case ev.GetEnd() != nil:
			kinds = append(kinds, "end")
			exit = ev.GetEnd().GetExitCode()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("the stream: %v (events %v)", err, kinds)
	}
	if n := strings.Count(strings.Join(kinds, " "), "keepalive"); n < 2 || kinds[0] != "start" || kinds[len(kinds)-1] != "end" || out != "done\n" || exit != 0 {
		t.Errorf("events %v (%d keepalives, want 2 or more before the output), output %q, exit %d", kinds, n, out, exit)
	}
}

// TestE2BFrontDoor: the E2B listener's bad credentials (API keys and
// sandbox tokens alike) count at the server's front door: past its limit
// the source is refused with 429 and Retry-After, while a good key still
// works.
func TestE2BFrontDoor(t *testing.T) {
	t.Parallel()
	_, addr := startE2BServer(t, "--e2b", "127.0.0.1:0")
	send := func(path string, headers map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		for h, v := range headers {
			req.Header.Set(h, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for i := range 10 { // auth.MaxFailedCredentials
		headers := map[string]string{"X-API-KEY": fmt.Sprintf("not-a-key-%d", i)}
		path, want := "/sandboxes", http.StatusUnauthorized
		if i%2 == 1 {
			headers = map[string]string{"E2b-Sandbox-Id": "e2b-0123456789ab", "X-Access-Token": "guess"}
			path, want = "/health", http.StatusNotFound
		}
		if code, _ := send(path, headers); code != want {
			t.Fatalf("bad attempt %d: %d, want %d", i+1, code, want)
		}
	}
	if code, retry := send("/sandboxes", map[string]string{"X-API-KEY": "one-more"}); code != http.StatusTooManyRequests || retry == "" {
		t.Errorf("a bad key past the limit: %d (Retry-After %q), want 429", code, retry)
	}
	if code, _ := send("/sandboxes", map[string]string{"X-API-KEY": aliceToken}); code != http.StatusOK {
		t.Errorf("a good key from the same address: %d", code)
	}
}

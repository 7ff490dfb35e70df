package e2e

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A Go module with dependencies, as an agent brings one into a workspace:
// install_packages fetches its requirements through the module proxy (the
// install alone has network); its tests then pass offline, and again after an
// idle stop, incrementally (the build and module caches are on the volume).
func TestWorkspaceGoInstallThenOfflineTests(t *testing.T) {
	t.Parallel()
	s := startServer(t, installPolicy(t, ""))
	name := "e2e-goinstall"
	s.createWS(name, map[string]any{"language": "go"})
	files := map[string]string{
		"go.mod": "module example.com/sbxdemo\n\ngo 1.22\n",
		"ids.go": `package sbxdemo

import (
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

// NewID is a fresh uuid; Diff says how two values differ.
func NewID() string { return uuid.NewString() }
func Diff(a, b any) string { return cmp.Diff(a, b) }
`,
		"ids_test.go": `package sbxdemo

import "testing"

func TestIDs(t *testing.T) {
	t.Parallel()
	if a, b := NewID(), NewID(); a == b || len(a) != 36 {
		t.Fatalf("ids %q %q", a, b)
	}
	if Diff([]int{1, 2}, []int{1, 3}) == "" {
		t.Fatal("no diff")
	}
}
`,
	}
	for path, content := range files {
		s.ok("write_file", map[string]any{"workspace": name, "path": path, "content": content})
	}
	r := s.ok("install_packages", map[string]any{"workspace": name,
		"packages": []any{"github.com/google/uuid@v1.6.0", "github.com/google/go-cmp@v0.7.0"}, "timeout_s": 300})
	if r["installed"] != true {
		t.Fatalf("go install: %v", r)
	}
	if nets := wsNetworks(t, name); nets != "" {
		t.Fatalf("after the install the workspace is still on %q", nets)
	}
	// Offline: the job has no network, and GOPROXY=off in the image. The
	// standard library comes from the seed linked into the workspace's cache.
	if out := s.longWSRun(name, "go test ./... 2>&1 && go env GOPROXY GOMODCACHE"); !strings.Contains(out, "ok") || !strings.Contains(out, "\noff\n/workspace/.cache/go-mod") {
		t.Fatalf("go test after the install: %q", out)
	}
	// An idle stop loses no cache: the second run is served from the build cache.
	deadline := time.Now().Add(60 * time.Second)
	for {
		l := s.ok("list_workspaces", nil)
		if w := l["workspaces"].([]any)[0].(map[string]any); str(w, "state") == "stopped" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace not stopped after idling: %v", l)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if out := s.longWSRun(name, "go test ./... 2>&1"); !strings.Contains(out, "(cached)") {
		t.Fatalf("go test after an idle stop was not served from the workspace's build cache: %q", out)
	}
}

// An install through an egress whose TLS the image does not trust fails at
// once (no retries of an error retrying cannot fix), as a tool error that
// names the policy key that fixes it.
func TestInstallTLSFailureIsFastAndNamesTheKey(t *testing.T) {
	t.Parallel()
	// A module proxy with a certificate nobody trusts, where the workspace's
	// install network reaches the host (the bridge's gateway).
	ln, err := net.Listen("tcp", "172.17.0.1:0")
	if err != nil {
		t.Skipf("the Docker bridge's gateway 172.17.0.1 is not on this host: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }))
	srv.Listener = ln
	srv.TLS = &tls.Config{}
	srv.StartTLS()
	defer srv.Close()
	s := startServer(t, policyEnv(t, "pool:\n  enabled: false\nworkspaces:\n  install_goproxy: "+srv.URL+"\n  install_gosumdb: \"off\"\n"))
	name := "e2e-tlsfail"
	s.createWS(name, map[string]any{"language": "go"})
	s.ok("write_file", map[string]any{"workspace": name, "path": "go.mod", "content": "module example.com/x\n\ngo 1.22\n"})
	start := time.Now()
	r, msg := s.failedWith("install_packages", map[string]any{"workspace": name, "packages": []any{"github.com/google/uuid@v1.6.0"}})
	took := time.Since(start)
	if r["installed"] != false || !strings.Contains(msg, "workspaces.install_ca_file") || !strings.Contains(msg, "TLS") {
		t.Fatalf("TLS failure: %q %v", msg, r)
	}
	// Bounded, not retried for a minute (an npm retrying a certificate error took 71 s).
	if took > 40*time.Second {
		t.Errorf("a TLS failure took %s to report", took)
	}
}

// longWSRun runs a command in a workspace that may take minutes, and returns
// its output once it completed.
func (s *server) longWSRun(ws, command string) string {
	s.t.Helper()
	r := s.wsRun(ws, command, "timeout_s", 900, "background", true)
	rec := s.waitJob(str(r, "job_id"), "", 15*time.Minute)
	if str(rec, "status") != "completed" {
		s.t.Fatalf("%q in workspace %s: %v", command, ws, rec)
	}
	out := s.ok("read_output", map[string]any{"job_id": str(r, "job_id"), "cursor": 0, "max_bytes": 1 << 20})
	return str(out, "output")
}

package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// toolLog is a Caller that records each call with its tenant and answers
// as the tools do when all goes well (the e2e test drives the real tools).
type toolLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *toolLog) CallTool(ctx context.Context, name string, args map[string]any) (*mcp.CallToolResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf("%s %s %v", tenant.Owner(ctx), name, args["name"]))
	return &mcp.CallToolResult{StructuredContent: map[string]any{}}, nil
}

func (l *toolLog) HasTool(string) bool { return true }

func (l *toolLog) called(want string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.calls {
		if c == want {
			return true
		}
	}
	return false
}

type keys map[string]string

func (k keys) Authenticate(token string) (string, string, bool) {
	name, ok := k[token]
	return name, "tenant", ok
}

// TestSandboxesOutliveTheServer: the sandboxes are the store's, each its
// tenant's: after a restart (a new Server on the same store) list, get and
// the in-sandbox API's token still work; another tenant's key sees none of
// them; list filters by metadata and pages; a timeout moved holds, and the
// reaper kills what is due (its workspace deleted as its tenant).
func TestSandboxesOutliveTheServer(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tools := &toolLog{}
	k := keys{"ka": "alice", "kb": "bob"}
	first := httptest.NewServer(New(Deps{Call: tools, Tokens: k, Registry: st}).Handler())
	do := func(srv *httptest.Server, key, method, path, body string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-API-KEY", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	var ids []string
	tokens := map[string]string{}
	for i, md := range []string{`{"team":"red"}`, `{"team":"blue"}`, `{"team":"red"}`} {
		code, body, _ := do(first, "ka", "POST", "/v2/sandboxes", fmt.Sprintf(`{"templateID":"bash","timeout":%d,"metadata":%s,"envVars":{"K":"v"}}`, 60+i, md))
		if code != http.StatusCreated {
			t.Fatalf("create: %d %s", code, body)
		}
		var c struct{ SandboxID, EnvdAccessToken string }
		_ = json.Unmarshal([]byte(body), &c)
		ids = append(ids, c.SandboxID)
		tokens[c.SandboxID] = c.EnvdAccessToken
	}
	for body, want := range map[string]string{
		`{"timeout":999999}`: "timeout", `{"mcp":{"github":{}}}`: "mcp:", `{"volumeMounts":[{"name":"v","path":"/data"}]}`: "volumeMounts:",
		`{"network":{"allowOut":["pypi.org"]}}`: "without denyOut", `{"envVars":{"":"x"}}`: "envVars:",
	} {
		if code, got, _ := do(first, "ka", "POST", "/v2/sandboxes", body); code != http.StatusBadRequest || !strings.Contains(got, want) {
			t.Errorf("create %s: %d %s, want 400 naming %q", body, code, got, want)
		}
	}
	first.Close()

	// A restart: a new server over the same store.
	second := httptest.NewServer(New(Deps{Call: tools, Tokens: k, Registry: st}).Handler())
	defer second.Close()
	code, body, _ := do(second, "ka", "GET", "/v2/sandboxes", "")
	for _, id := range ids {
		if code != http.StatusOK || !strings.Contains(body, id) {
			t.Fatalf("alice's list after a restart lacks %s: %d %s", id, code, body)
		}
	}
	if code, body, _ := do(second, "kb", "GET", "/v2/sandboxes", ""); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("bob's list: %d %s", code, body)
	}
	if code, _, _ := do(second, "kb", "GET", "/sandboxes/"+ids[0], ""); code != http.StatusNotFound {
		t.Errorf("bob's get of alice's sandbox: %d", code)
	}
	if code, _, _ := do(second, "kb", "DELETE", "/sandboxes/"+ids[0], ""); code != http.StatusNotFound {
		t.Errorf("bob's kill of alice's sandbox: %d", code)
	}
	code, body, _ = do(second, "ka", "GET", "/sandboxes/"+ids[1], "")
	if code != http.StatusOK || !strings.Contains(body, tokens[ids[1]]) || !strings.Contains(body, `"team":"blue"`) {
		t.Errorf("alice's get after a restart: %d %s", code, body)
	}
	// The in-sandbox API knows the sandbox by its token, after the restart too.
	health := func(id, token string) int {
		req, _ := http.NewRequest("GET", second.URL+"/health", nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("X-Access-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := health(ids[0], tokens[ids[0]]); c != http.StatusNoContent {
		t.Errorf("envd health with the sandbox's token: %d", c)
	}
	if c := health(ids[0], tokens[ids[1]]); c != http.StatusNotFound {
		t.Errorf("envd health with another sandbox's token: %d", c)
	}
	// The front door's judge: keys and sandbox tokens, good and bad.
	judge := New(Deps{Call: tools, Tokens: k, Registry: st})
	for _, c := range []struct {
		name            string
		headers         map[string]string
		presented, good bool
	}{
		{"a good key", map[string]string{"X-API-KEY": "ka"}, true, true},
		{"a bad key", map[string]string{"X-API-KEY": "nope"}, true, false},
		{"nothing", nil, false, false},
		{"a sandbox's token", map[string]string{"E2b-Sandbox-Id": ids[0], "X-Access-Token": tokens[ids[0]]}, true, true},
		{"another sandbox's token", map[string]string{"E2b-Sandbox-Id": ids[0], "X-Access-Token": tokens[ids[1]]}, true, false},
		{"no token", map[string]string{"E2b-Sandbox-Id": ids[0]}, true, false},
		{"no such sandbox", map[string]string{"E2b-Sandbox-Id": "e2b-000000000000", "X-Access-Token": "x"}, true, false},
	} {
		r := httptest.NewRequest("GET", "/health", nil)
		for h, v := range c.headers {
			r.Header.Set(h, v)
		}
		if p, g := judge.Credentials(r); p != c.presented || g != c.good {
			t.Errorf("%s: presented %v good %v", c.name, p, g)
		}
	}
	// Filters and pages.
	code, body, _ = do(second, "ka", "GET", "/v2/sandboxes?metadata=team%3Dred", "")
	if code != http.StatusOK || strings.Contains(body, ids[1]) || !strings.Contains(body, ids[0]) || !strings.Contains(body, ids[2]) {
		t.Errorf("metadata team=red: %d %s", code, body)
	}
	_, body, hdr := do(second, "ka", "GET", "/v2/sandboxes?limit=2", "")
	var page []map[string]any
	_ = json.Unmarshal([]byte(body), &page)
	next := hdr.Get("X-Next-Token")
	if len(page) != 2 || next == "" {
		t.Fatalf("the first page of 2: %s, next %q", body, next)
	}
	_, body, hdr = do(second, "ka", "GET", "/v2/sandboxes?limit=2&nextToken="+next, "")
	_ = json.Unmarshal([]byte(body), &page)
	if len(page) != 1 || hdr.Get("X-Next-Token") != "" {
		t.Errorf("the second page: %s, next %q", body, hdr.Get("X-Next-Token"))
	}
	if code, body, _ := do(second, "ka", "GET", "/v2/sandboxes?limit=0", ""); code != http.StatusBadRequest || !strings.Contains(body, "limit") {
		t.Errorf("limit 0: %d %s", code, body)
	}
	// A moved timeout holds; the reaper kills what is due, as its tenant.
	if code, body, _ := do(second, "ka", "POST", "/sandboxes/"+ids[0]+"/timeout", `{"timeout":86400}`); code != http.StatusNoContent {
		t.Fatalf("set timeout: %d %s", code, body)
	}
	api := New(Deps{Call: tools, Tokens: k, Registry: st})
	api.reapDue(context.Background(), time.Now().Add(2*time.Minute))
	for _, id := range ids[1:] {
		if !tools.called("alice delete_workspace " + id) {
			t.Errorf("the reaper did not delete %s as alice: %v", id, tools.calls)
		}
	}
	if tools.called("alice delete_workspace " + ids[0]) {
		t.Errorf("the reaper deleted %s, whose timeout was moved", ids[0])
	}
	_, body, _ = do(second, "ka", "GET", "/v2/sandboxes", "")
	if !strings.Contains(body, ids[0]) || strings.Contains(body, ids[1]) || strings.Contains(body, ids[2]) {
		t.Errorf("alice's list after the reaper: %s", body)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// answer is everything an MCP client learns from a call: whether it was an
// error, its text and its structured content, as bytes.
func answer(t *testing.T, c *client.Client, tool string, args map[string]any) string {
	t.Helper()
	res := callHTTP(t, c, tool, args)
	b, err := json.Marshal(map[string]any{"is_error": res.IsError, "text": text(res), "structured": res.StructuredContent})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// resourceAnswer is what resources/read of uri tells, as bytes.
func resourceAnswer(t *testing.T, c *client.Client, uri string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = uri
	res, err := c.ReadResource(ctx, req)
	b, _ := json.Marshal(map[string]any{"result": res, "error": errString(err)})
	return string(b)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestHTTPTenantKeysByteForByte runs every tool that names an object as
// tenant bob against each of tenant alice's objects (a finished job, a
// running session, a workspace with a file, an open port, a changes cursor,
// a block-list entry) and compares each answer byte for byte with the
// answer bob gets for the same names on a server where they do not exist.
// Then bob makes his own workspace under alice's name: his, new, never
// "already exists", and it starts with none of alice's changes (THREATS
// 45, 104).
func TestHTTPTenantKeysByteForByte(t *testing.T) {
	t.Parallel()
	h := startHTTPServer(t, "--toolsets", "all", "--allow-block-edits")
	empty := startHTTPServer(t, "--toolsets", "all", "--allow-block-edits")
	alice, bob, bobElsewhere := h.client(aliceToken), h.client(bobToken), empty.client(bobToken)

	const ws = "e2e-tenant-keys"
	cleanupWorkspace(t, ws)
	okHTTP(t, alice, "create_workspace", map[string]any{"name": ws})
	okHTTP(t, alice, "write_file", map[string]any{"workspace": ws, "path": "alice.txt", "content": "alice's file\n"})
	done := str(okHTTP(t, alice, "run_command", map[string]any{"command": "echo alice-output"}), "job_id")
	session := str(okHTTP(t, alice, "start_session", map[string]any{"command": "bash", "workspace": ws}), "job_id")
	okHTTP(t, alice, "expose_port", map[string]any{"workspace": ws, "port": 8000})
	changes := okHTTP(t, alice, "workspace_changes", map[string]any{"workspace": ws, "max_bytes": 16})
	if changes["has_more"] != true {
		t.Fatalf("alice's changes fit one page of 16 bytes: %v", changes)
	}
	okHTTP(t, alice, "block_command", map[string]any{"command": "alicetool", "reason": "alice's rule"})

	calls := []struct {
		tool string
		args map[string]any
	}{
		{"get_job", map[string]any{"job_id": done}},
		{"get_job", map[string]any{"job_id": session, "wait_s": 1}},
		{"read_output", map[string]any{"job_id": done}},
		{"read_output", map[string]any{"job_id": session, "cursor": 0}},
		{"send_input", map[string]any{"job_id": session, "text": "echo hi"}},
		{"resize_terminal", map[string]any{"job_id": session, "rows": 30, "cols": 100}},
		{"list_processes", map[string]any{"job_id": session}},
		{"kill_process", map[string]any{"job_id": session, "pid": 1}},
		{"kill_job", map[string]any{"job_id": session}},
		{"run_command", map[string]any{"command": "cat alice.txt", "workspace": ws}},
		{"run_script", map[string]any{"code": "cat alice.txt", "workspace": ws}},
		{"start_session", map[string]any{"command": "bash", "workspace": ws}},
		{"read_file", map[string]any{"workspace": ws, "path": "alice.txt"}},
		{"write_file", map[string]any{"workspace": ws, "path": "bob.txt", "content": "x"}},
		{"list_files", map[string]any{"workspace": ws}},
		{"workspace_changes", map[string]any{"workspace": ws}},
		{"workspace_changes", map[string]any{"workspace": ws, "cursor": 16}},
		{"expose_port", map[string]any{"workspace": ws, "port": 8000}},
		{"expose_port", map[string]any{"workspace": ws, "port": 8000, "close": true}},
		{"install_packages", map[string]any{"workspace": ws, "packages": []any{"jq"}, "manager": "apt"}},
		{"list_commands", map[string]any{"workspace": ws}},
		{"list_jobs", map[string]any{"workspace": ws}},
		{"list_jobs", map[string]any{}},
		{"list_workspaces", map[string]any{}},
		{"list_blocked_commands", map[string]any{}},
		{"unblock_command", map[string]any{"command": "alicetool"}},
		{"delete_workspace", map[string]any{"name": ws}},
	}
	for _, c := range calls {
		theirs, none := answer(t, bob, c.tool, c.args), answer(t, bobElsewhere, c.tool, c.args)
		if theirs != none {
			t.Errorf("%s%v: bob's answer about alice's object differs from the answer where it does not exist:\n%s\n%s", c.tool, mustJSON(c.args), theirs, none)
		}
	}
	for _, uri := range []string{"job://" + done, "job://" + done + "/output", "job://" + session} {
		if theirs, none := resourceAnswer(t, bob, uri), resourceAnswer(t, bobElsewhere, uri); theirs != none {
			t.Errorf("resources/read %s: bob's answer differs from an unknown one's:\n%s\n%s", uri, theirs, none)
		}
	}
	// Alice's work is untouched: her session runs, her file, port and rule hold.
	if st := str(okHTTP(t, alice, "get_job", map[string]any{"job_id": session}), "status"); st != "running" {
		t.Fatalf("alice's session after bob's calls: %s", st)
	}
	if got := okHTTP(t, alice, "read_file", map[string]any{"workspace": ws, "path": "alice.txt"}); !strings.Contains(str(got, "content"), "alice's file") {
		t.Fatalf("alice's file: %v", got)
	}
	if msg := errHTTP(t, alice, "run_command", map[string]any{"command": "alicetool"}); !strings.Contains(msg, "alicetool") {
		t.Fatalf("alice's block-list entry: %q", msg)
	}
	if res := okHTTP(t, bob, "run_command", map[string]any{"command": "alicetool 2>/dev/null; echo ran"}); !strings.Contains(str(res, "stdout"), "ran") {
		t.Fatalf("alice's block-list entry applies to bob: %v", res)
	}

	// Bob's own workspace of the same name: new, empty, with no changes of alice's.
	okHTTP(t, bob, "create_workspace", map[string]any{"name": ws})
	if msg := errHTTP(t, bob, "workspace_changes", map[string]any{"workspace": ws, "cursor": 16}); !strings.Contains(msg, "(0 bytes)") {
		t.Fatalf("bob's new workspace pages alice's diff: %q", msg)
	}
	if files := okHTTP(t, bob, "list_files", map[string]any{"workspace": ws}); strings.Contains(mustJSON(files), "alice.txt") {
		t.Fatalf("bob's workspace holds alice's file: %v", files)
	}
	if got := okHTTP(t, alice, "read_file", map[string]any{"workspace": ws, "path": "alice.txt"}); !strings.Contains(str(got, "content"), "alice's file") {
		t.Fatalf("alice's file after bob made his workspace: %v", got)
	}
	// An admin names each as TENANT/NAME.
	admin := h.client(opsToken)
	if got := okHTTP(t, admin, "read_file", map[string]any{"workspace": "alice/" + ws, "path": "alice.txt"}); !strings.Contains(str(got, "content"), "alice's file") {
		t.Fatalf("the admin's alice/%s: %v", ws, got)
	}
	if list := mustJSON(okHTTP(t, admin, "list_workspaces", map[string]any{})); !strings.Contains(list, `"alice/`+ws+`"`) || !strings.Contains(list, `"bob/`+ws+`"`) {
		t.Fatalf("the admin's list: %s", list)
	}
	okHTTP(t, bob, "delete_workspace", map[string]any{"name": ws})
	okHTTP(t, alice, "kill_job", map[string]any{"job_id": session, "grace_s": 0})
	// Alice's own new workspace under her old name starts clean too.
	okHTTP(t, alice, "delete_workspace", map[string]any{"name": ws})
	okHTTP(t, alice, "create_workspace", map[string]any{"name": ws})
	if msg := errHTTP(t, alice, "workspace_changes", map[string]any{"workspace": ws, "cursor": 16}); !strings.Contains(msg, "(0 bytes)") {
		t.Fatalf("a new workspace under an old name pages the old one's diff: %q", msg)
	}
	okHTTP(t, alice, "delete_workspace", map[string]any{"name": ws})
}

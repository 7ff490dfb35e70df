package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

func TestJobsCancelledCallKillsJob(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelledAt time.Time
	timer := time.AfterFunc(time.Second, func() { cancelledAt = time.Now(); cancel() })
	defer timer.Stop()
	res, err := s.client.CallTool(ctx, toolRequest("run_command", map[string]any{"command": "sleep 100"}))
	if err == nil {
		t.Fatalf("cancelled run_command returned a result, want a context error: %s", text(res))
	}
	if ctx.Err() == nil {
		t.Fatalf("run_command failed before the cancel: %v", err)
	}
	<-ctx.Done() // cancelledAt is set before the cancel

	// The kill is at once; the bound tells "killed" from "left running" on
	// a busy machine (removing a sandbox there can take seconds).
	deadline := cancelledAt.Add(15 * time.Second)
	var job map[string]any
	for {
		jobs := s.jobList(nil)
		if len(jobs) > 1 {
			t.Fatalf("want one job, list_jobs shows %v", jobs)
		}
		if len(jobs) == 1 {
			job = jobs[0]
			if str(job, "status") != "queued" && str(job, "status") != "running" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job not ended within 15 s of the cancel: %v", job)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if str(job, "status") != "killed" || str(job, "reason") != "cancelled" {
		t.Fatalf("want killed/cancelled, got %v", job)
	}
	s.waitNoContainers(10 * time.Second)
}

func TestJobsProgressNotifications(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	req := toolRequest("run_command", map[string]any{"command": "sleep 3; echo done"})
	req.Params.Meta = &mcp.Meta{ProgressToken: "tok-1"}
	res, err := s.client.CallTool(ctxTimeout(t, time.Minute), req)
	if err != nil {
		t.Fatal(err)
	}
	s.notes.mu.Lock()
	atResult := len(s.notes.progress)
	s.notes.mu.Unlock()
	if res.IsError {
		t.Fatalf("run_command: %s", text(res))
	}
	if m := structured(t, res); str(m, "status") != "completed" || str(m, "stdout") != "done\n" {
		t.Fatalf("want completed done, got %v", m)
	}
	if atResult < 1 {
		t.Fatalf("no progress notification before the result of a 3 s command")
	}
	time.Sleep(2 * time.Second)
	s.notes.mu.Lock()
	defer s.notes.mu.Unlock()
	if n := len(s.notes.progress); n != atResult {
		t.Errorf("%d progress notifications before the result, %d two seconds later: some came after the result", atResult, n)
	}
	for i, n := range s.notes.progress {
		if tok := n.Params.AdditionalFields["progressToken"]; tok != "tok-1" {
			data, _ := json.Marshal(n)
			t.Errorf("notification %d carries token %v, want tok-1: %s", i, tok, data)
		}
	}
}

func TestJobsResources(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	r := s.ok("run_command", map[string]any{"command": "echo resource-out; echo resource-err >&2"})
	id := str(r, "job_id")

	read := func(uri string) mcp.TextResourceContents {
		t.Helper()
		req := mcp.ReadResourceRequest{}
		req.Params.URI = uri
		res, err := s.client.ReadResource(ctxTimeout(t, 30*time.Second), req)
		if err != nil {
			t.Fatalf("read %s: %v", uri, err)
		}
		if len(res.Contents) != 1 {
			t.Fatalf("read %s: %d contents, want 1", uri, len(res.Contents))
		}
		tc, ok := res.Contents[0].(mcp.TextResourceContents)
		if !ok {
			t.Fatalf("read %s: contents are %T, want text", uri, res.Contents[0])
		}
		if tc.URI != uri {
			t.Errorf("read %s: contents carry URI %q", uri, tc.URI)
		}
		return tc
	}

	rec := read("job://" + id)
	var m map[string]any
	if err := json.Unmarshal([]byte(rec.Text), &m); err != nil {
		t.Fatalf("job://%s is not JSON: %v\n%s", id, err, rec.Text)
	}
	if str(m, "job_id") != id || str(m, "status") != "completed" {
		t.Errorf("job://%s = %v, want job_id %s, completed", id, m, id)
	}
	if rec.MIMEType != "application/json" {
		t.Errorf("job://%s MIME type %q, want application/json", id, rec.MIMEType)
	}

	out := read("job://" + id + "/output")
	if out.Text != "resource-out\nresource-err\n" && out.Text != "resource-err\nresource-out\n" {
		t.Errorf("job://%s/output = %q, want both lines", id, out.Text)
	}
}

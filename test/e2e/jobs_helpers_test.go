package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// Helpers shared by the TestJobs* tests.

// jobList returns list_jobs' jobs (newest first).
func (s *server) jobList(args map[string]any) []map[string]any {
	s.t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	r := s.ok("list_jobs", args)
	raw, ok := r["jobs"].([]any)
	if !ok {
		s.t.Fatalf("list_jobs: jobs is %T, want a list; result: %v", r["jobs"], r)
	}
	jobs := make([]map[string]any, 0, len(raw))
	for _, j := range raw {
		m, ok := j.(map[string]any)
		if !ok {
			s.t.Fatalf("list_jobs: entry is %T, want an object", j)
		}
		jobs = append(jobs, m)
	}
	return jobs
}

// findJob returns list_jobs' entry for id, or nil.
func findJob(jobs []map[string]any, id string) map[string]any {
	for _, j := range jobs {
		if str(j, "job_id") == id {
			return j
		}
	}
	return nil
}

// waitJob polls get_job until the job has the given status (or any final
// status when want is ""), failing the test after within.
func (s *server) waitJob(id, want string, within time.Duration) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := s.ok("get_job", map[string]any{"job_id": id})
		st := str(r, "status")
		if st == want || (want == "" && st != "queued" && st != "running") {
			return r
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s is %s after %s, want %q; record: %v", id, st, within, want, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readAll reads a job's combined output from cursor 0.
func (s *server) readAll(id string) (string, map[string]any) {
	s.t.Helper()
	r := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "max_bytes": 1 << 20})
	return str(r, "output"), r
}

// exitCode returns a record's exit_code, failing when it is missing.
func exitCode(t *testing.T, m map[string]any) int {
	t.Helper()
	return int(num(t, m, "exit_code"))
}

// lines splits output into its lines, dropping the final newline.
func lines(out string) []string {
	out = strings.TrimSuffix(out, "\n")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// toolRequest builds a tools/call request for s.client.CallTool.
func toolRequest(tool string, args map[string]any) mcp.CallToolRequest {
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	return req
}

// ctxTimeout is a context ending after d or with the test.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

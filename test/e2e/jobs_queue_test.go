package e2e

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestJobsQueueWhenSlotsTaken(t *testing.T) {
	t.Parallel()
	s := startServer(t, "SANDBOXER_MAX_JOBS=2")
	var ids []string
	for i := 0; i < 2; i++ {
		r := s.ok("run_command", map[string]any{"command": "sleep 3", "background": true})
		if str(r, "status") != "running" {
			t.Fatalf("job %d: want running, got %v", i, r)
		}
		ids = append(ids, str(r, "job_id"))
	}
	r := s.ok("run_command", map[string]any{"command": "echo third", "background": true})
	third := str(r, "job_id")
	if str(r, "status") != "queued" {
		t.Fatalf("third job: want queued, got %v", r)
	}
	if g := s.ok("get_job", map[string]any{"job_id": third}); str(g, "status") != "queued" {
		t.Fatalf("get_job of the third job: want queued, got %v", g)
	}

	g := s.ok("get_job", map[string]any{"job_id": third, "wait_s": 30})
	if str(g, "status") != "completed" || exitCode(t, g) != 0 {
		t.Fatalf("third job: want completed/0 once a slot freed, got %v", g)
	}
	if out, _ := s.readAll(third); out != "third\n" {
		t.Errorf("third job's output = %q, want %q", out, "third\n")
	}
	// It started only after one of the first two ended.
	started, err := time.Parse(time.RFC3339Nano, str(g, "started_at"))
	if err != nil {
		t.Fatalf("third job's started_at %q: %v", str(g, "started_at"), err)
	}
	var firstEnd time.Time
	for _, id := range ids {
		f := s.ok("get_job", map[string]any{"job_id": id, "wait_s": 10})
		if str(f, "status") != "completed" {
			t.Fatalf("job %s: want completed, got %v", id, f)
		}
		ended, err := time.Parse(time.RFC3339Nano, str(f, "ended_at"))
		if err != nil {
			t.Fatalf("ended_at %q: %v", str(f, "ended_at"), err)
		}
		if firstEnd.IsZero() || ended.Before(firstEnd) {
			firstEnd = ended
		}
	}
	if started.Before(firstEnd) {
		t.Errorf("third job started at %s, before the first slot freed at %s", started, firstEnd)
	}
	s.waitNoContainers(10 * time.Second)
}

func TestJobsConcurrentRunCommands(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	const n = 20
	type result struct {
		status, stdout string
		err            string
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := s.client.CallTool(ctxTimeout(t, 3*time.Minute), toolRequest("run_command", map[string]any{
				"command": fmt.Sprintf("echo %d; sleep 1", i), "wait_s": 50,
			}))
			switch {
			case err != nil:
				results[i].err = err.Error()
			case res.IsError:
				results[i].err = text(res)
			default:
				// Not structured(): t.Fatal must not be called off the test goroutine.
				var m map[string]any
				data, _ := json.Marshal(res.StructuredContent)
				if err := json.Unmarshal(data, &m); err != nil {
					results[i].err = fmt.Sprintf("structured content %s: %v", data, err)
					return
				}
				results[i] = result{status: str(m, "status"), stdout: str(m, "stdout")}
			}
		}(i)
	}
	wg.Wait()
	for i, r := range results {
		if r.err != "" {
			t.Errorf("call %d: %s", i, r.err)
			continue
		}
		if r.status != "completed" || r.stdout != fmt.Sprintf("%d\n", i) {
			t.Errorf("call %d: status %s stdout %q, want completed %q", i, r.status, r.stdout, fmt.Sprintf("%d\n", i))
		}
	}
	if jobs := s.jobList(map[string]any{"limit": 100}); len(jobs) != n {
		t.Errorf("list_jobs shows %d jobs, want %d", len(jobs), n)
	}
	s.waitNoContainers(15 * time.Second)
}

func TestJobsPrune(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	var quick []string
	for _, c := range []string{"echo one", "echo two; exit 1"} {
		r := s.ok("run_command", map[string]any{"command": c})
		if st := str(r, "status"); st != "completed" && st != "failed" {
			t.Fatalf("%q: want it finished, got %v", c, r)
		}
		quick = append(quick, str(r, "job_id"))
	}
	time.Sleep(2 * time.Second)
	r := s.ok("run_command", map[string]any{"command": "sleep 30", "background": true})
	running := str(r, "job_id")

	p := s.ok("prune_jobs", map[string]any{"older_than_s": 1})
	if num(t, p, "removed") != 2 {
		t.Fatalf("prune older_than_s 1: want 2 removed, got %v", p)
	}
	removed, _ := p["removed_ids"].([]any)
	for _, id := range quick {
		found := false
		for _, r := range removed {
			found = found || r == id
		}
		if !found {
			t.Errorf("job %s not in removed_ids %v", id, removed)
		}
	}
	jobs := s.jobList(nil)
	if len(jobs) != 1 || str(jobs[0], "job_id") != running || str(jobs[0], "status") != "running" {
		t.Fatalf("after prune list_jobs = %v, want only the running job %s", jobs, running)
	}
	for _, id := range quick {
		if msg := s.toolErr("get_job", map[string]any{"job_id": id}); msg == "" {
			t.Errorf("get_job of pruned job %s: empty error", id)
		}
	}

	p = s.ok("prune_jobs", map[string]any{"older_than_s": 3600})
	if num(t, p, "removed") != 0 {
		t.Fatalf("prune older_than_s 3600: want nothing removed, got %v", p)
	}
	if jobs := s.jobList(nil); findJob(jobs, running) == nil {
		t.Fatalf("running job %s gone from list_jobs: %v", running, jobs)
	}
	s.ok("kill_job", map[string]any{"job_id": running, "signal": "KILL"})
	s.waitNoContainers(10 * time.Second)
}

// A job killed while its sandbox is being started (here: just promoted from
// the queue) must still go at once, not run on until its own end or timeout.
func TestJobsKillWhileStarting(t *testing.T) {
	t.Parallel()
	s := startServer(t, "SANDBOXER_MAX_JOBS=1")
	first := str(s.ok("run_command", map[string]any{"command": "sleep 1", "background": true}), "job_id")
	r := s.ok("run_command", map[string]any{"command": "sleep 1000", "background": true})
	second := str(r, "job_id")
	if str(r, "status") != "queued" {
		t.Fatalf("second job: want queued, got %v", r)
	}
	// get_job returns as the first job ends, which is when the second's
	// sandbox starts being created: the kill lands while it starts.
	s.ok("get_job", map[string]any{"job_id": first, "wait_s": 15})
	start := time.Now()
	k := s.ok("kill_job", map[string]any{"job_id": second, "grace_s": 0})
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("kill_job of a starting job took %s, want a few seconds at most", took)
	}
	if str(k, "status") != "killed" || str(k, "reason") != "requested" {
		t.Fatalf("want killed/requested, got %v", k)
	}
	s.waitNoContainers(10 * time.Second)
}

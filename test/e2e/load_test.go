package e2e

import (
	"github.com/sandboxer/sandboxer/internal/sandbox"

	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// fdCount is how many files the server process has open.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// THREATS 14 and 42 (scaled to CI): many short jobs that leave background
// children behind → every job completes, no container is left, and the
// server's open files return to where they were.
func TestLoadManyShortJobsLeaveNothing(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	s.ok("run_command", map[string]any{"command": "true"}) // warm up: database, client pools
	baseline := fdCount(t, s.cmd.Process.Pid)
	const jobs, workers = 60, 4
	var wg sync.WaitGroup
	errs := make(chan string, jobs)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := s.ok("run_command", map[string]any{"command": fmt.Sprintf("sleep 100 & (sleep 100 &); echo %d", i)})
				if str(r, "status") != "completed" || str(r, "stdout") != fmt.Sprintf("%d\n", i) {
					errs <- fmt.Sprintf("job %d: %v", i, r)
				}
			}
		}()
	}
	for i := 0; i < jobs; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	var bad []string
	for e := range errs {
		bad = append(bad, e)
	}
	if len(bad) > 0 {
		t.Fatalf("%d jobs went wrong, first: %s", len(bad), bad[0])
	}
	s.waitNoContainers(10 * time.Second)
	// The pool follows use: after a burst it keeps more warm sandboxes
	// waiting (its depth), each with its attach stream open. A leak per
	// job would be tens of files; those streams are not one.
	warm := 0
	for _, c := range s.allContainers() {
		if c.Kind == sandbox.KindPool {
			warm++
		}
	}
	if after := fdCount(t, s.cmd.Process.Pid); after > baseline+8+2*warm {
		t.Errorf("open files grew from %d to %d after %d jobs (%d warm sandboxes waiting)", baseline, after, jobs, warm)
	}
	list := s.ok("list_jobs", map[string]any{"limit": 500})
	if n := len(list["jobs"].([]any)); n != jobs+1 {
		t.Errorf("list_jobs has %d jobs, want %d", n, jobs+1)
	}
	if strings.Contains(s.stderr.String(), "level\":\"error") {
		t.Errorf("server logged errors:\n%s", tail(s.stderr.String(), 3000))
	}
}

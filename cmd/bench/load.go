package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox/containerd"
)

// Load: fresh jobs back to back, in a burst, and sustained, as a team server
// sees them (issue: a pool that keeps up), each against docker run in the
// same run. The pool's depth follows the arrival rate (internal/sandbox/pool).
const (
	loadSeq       = 200              // back-to-back run_command true
	loadBurst     = 20               // concurrent calls at once
	loadSustained = 60 * time.Second // of back-to-back calls from loadCallers
	loadCallers   = 4
	loadAlternate = 40 // back-to-back calls alternating a plain job and one with a granted mount
)

func loadBench(ctx context.Context, o options) error {
	image := images.Tag("base")
	progress("load: docker run --rm x%d (baseline)", o.dockerRuns)
	dockerRun, err := sample(o.dockerRuns, true, func() error {
		return exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", image, "true").Run()
	})
	if err != nil {
		return fmt.Errorf("docker run: %w", err)
	}
	backends := []string{policy.BackendDocker}
	if err := containerdAnswers(ctx); err != nil {
		progress("load: containerd skipped: %v (bash scripts/containerd.sh starts it)", err)
	} else {
		backends = append(backends, policy.BackendContainerd)
	}
	for _, b := range backends {
		if err := loadOn(ctx, o, b, dockerRun); err != nil {
			return fmt.Errorf("load on %s: %w", b, err)
		}
	}
	return nil
}

// containerdAnswers says why the containerd of scripts/containerd.sh cannot be benched.
func containerdAnswers(ctx context.Context) error {
	rt, err := containerd.New("", containerd.Config{})
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := rt.Ping(ctx); err != nil {
		return err
	}
	if ok, err := rt.ImageExists(ctx, images.Tag("base")); err != nil || !ok {
		return fmt.Errorf("image %s is not in containerd", images.Tag("base"))
	}
	return nil
}

// loadOn measures one backend against dockerRun, the baseline of the same run.
func loadOn(ctx context.Context, o options, backend string, dockerRun stats) error {
	jobs := fmt.Sprintf("backend: %s\njobs:\n  max_concurrent: %d\n", backend, max(o.maxJobs, loadBurst))
	// BENCH_LOAD_POLICY adds to the pool server's policy (e.g. "pool:\n  max_total: 3\n":
	// the configured sizes only, no depth that follows arrivals).
	tree, err := os.MkdirTemp("", "sandboxer-bench-tree-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	if err := os.Chmod(tree, 0o755); err != nil {
		return err
	}
	pol := jobs + fmt.Sprintf("mounts:\n  - {name: tree, source: %s}\n", tree) + os.Getenv("BENCH_LOAD_POLICY")
	s, err := startServer(ctx, o, "load-"+backend, pol)
	if err != nil {
		return err
	}
	defer s.close()
	job := map[string]any{"command": "true"}
	time.Sleep(3 * time.Second) // the pool's first fill
	progress("load %s: %d back-to-back calls", backend, loadSeq)
	seq, err := sample(loadSeq, false, func() error { _, err := s.runJob(ctx, job); return err })
	if err != nil {
		return err
	}
	time.Sleep(arrivalQuiet)
	progress("load %s: a burst of %d concurrent calls", backend, loadBurst)
	burst, err := concurrent(loadBurst, func() error { _, err := s.runJob(ctx, job); return err })
	if err != nil {
		return err
	}
	time.Sleep(arrivalQuiet)
	progress("load %s: two shapes alternating, %d calls", backend, loadAlternate)
	alt, err := alternating(ctx, s)
	if err != nil {
		return err
	}
	time.Sleep(arrivalQuiet)
	progress("load %s: %s sustained from %d callers", backend, loadSustained, loadCallers)
	cpu0, engine0, busy0 := processCPU(s.cmd.Process.Pid), engineCPU(), machineCPU()
	n, el, err := sustained(ctx, loadCallers, loadSustained, func() error { _, err := s.runJob(ctx, job); return err })
	if err != nil {
		return err
	}
	cpu1, engine1, busy1 := processCPU(s.cmd.Process.Pid), engineCPU(), machineCPU()
	s.close()

	off, err := startServer(ctx, o, "load-off-"+backend, jobs+"pool:\n  enabled: false\n")
	if err != nil {
		return err
	}
	defer off.close()
	progress("load %s: the empty pool's cold job x%d", backend, o.runs)
	cold, err := sample(o.runs, true, func() error { _, err := off.runJob(ctx, job); return err })
	if err != nil {
		return err
	}
	jps := float64(n) / el.Seconds()
	fmt.Printf("\n## Load (backend %s, %d cores; docker run --rm true p50 %.0f ms, p95 %.0f ms)\n\n", backend, runtime.NumCPU(), ms(dockerRun.p50()), ms(dockerRun.p95()))
	fmt.Println("| case | p50 ms | p95 ms | vs docker run |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| %d back-to-back run_command true | %.1f | %.1f | p95 %.2fx docker run's p50 |\n", loadSeq, ms(seq.p50()), ms(seq.p95()), ms(seq.p95())/ms(dockerRun.p50()))
	fmt.Printf("| burst of %d concurrent | %.1f | %.1f | p95 %.2fx docker run's p50 |\n", loadBurst, ms(burst.p50()), ms(burst.p95()), ms(burst.p95())/ms(dockerRun.p50()))
	fmt.Printf("| alternating plain / with a mount: plain | %.1f | %.1f | |\n", ms(alt[0].p50()), ms(alt[0].p95()))
	fmt.Printf("| alternating plain / with a mount: mount | %.1f | %.1f | |\n", ms(alt[1].p50()), ms(alt[1].p95()))
	fmt.Printf("| empty pool (cold) | %.1f | %.1f | %.2fx docker run's p50 |\n", ms(cold.p50()), ms(cold.p95()), ms(cold.p50())/ms(dockerRun.p50()))
	fmt.Printf("\nsustained: %d jobs in %s from %d callers: %.1f jobs/s (docker run --rm in series: %.1f/s)\n", n, el.Round(time.Millisecond), loadCallers, jps, 1/dockerRun.p50().Seconds())
	if n > 0 && cpu1 >= cpu0 {
		fmt.Printf("CPU per job: server %.1f ms, dockerd + containerd(s) %.1f ms (from /proc: the shims' and runc's own time is not counted), the whole machine %.1f ms (/proc/stat, everything busy)\n",
			float64(cpu1-cpu0)/float64(n), float64(engine1-engine0)/float64(n), float64(busy1-busy0)/float64(n))
	}
	return nil
}

// alternating runs loadAlternate calls back to back, a plain job and a job
// with a granted mount in turn: the latencies of each shape.
func alternating(ctx context.Context, s *server) ([2]stats, error) {
	var out [2]stats
	jobs := []map[string]any{{"command": "true"}, {"command": "true", "mounts": []any{"tree"}}}
	for i := range loadAlternate {
		t := time.Now()
		if _, err := s.runJob(ctx, jobs[i%2]); err != nil {
			return out, err
		}
		out[i%2] = append(out[i%2], time.Since(t))
	}
	for i := range out {
		sort.Slice(out[i], func(a, b int) bool { return out[i][a] < out[i][b] })
	}
	return out, nil
}

// arrivalQuiet lets one phase's arrivals leave the pool's window before the next.
const arrivalQuiet = 11 * time.Second

// concurrent runs n calls at once and returns their latencies.
func concurrent(n int, f func() error) (stats, error) {
	var mu sync.Mutex
	var ds []time.Duration
	var first error
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			err := f()
			mu.Lock()
			defer mu.Unlock()
			ds = append(ds, time.Since(t))
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return stats(ds), first
}

// sustained runs f back to back from callers for d; it returns how many ended.
func sustained(ctx context.Context, callers int, d time.Duration, f func() error) (int, time.Duration, error) {
	var mu sync.Mutex
	n := 0
	var first error
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < d && ctx.Err() == nil {
				err := f()
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if err == nil {
					n++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return n, time.Since(start), first
}

// processCPU is a process's user + system CPU time in ms (/proc/PID/stat).
func processCPU(pid int) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return (ut + st) * 10 // clock ticks of 10 ms
}

// machineCPU is the whole machine's busy CPU time in ms (/proc/stat: all
// but idle and iowait), which counts the shims, runc and the kernel too.
func machineCPU() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		busy += n
	}
	return busy * 10 // clock ticks of 10 ms
}

// engineCPU is dockerd's and containerd's CPU time in ms.
func engineCPU() int64 {
	var total int64
	for _, name := range []string{"dockerd", "containerd"} {
		out, err := exec.Command("pgrep", "-x", name).Output()
		if err != nil {
			continue
		}
		for _, p := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(p); err == nil {
				total += processCPU(pid)
			}
		}
	}
	return total
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/workspace"
)

// hibernateName is the hibernate part's server: its checkpoint figures are
// the server's own log lines, at level info.
const hibernateName = "hibernate"

// hibernateBench is `-only hibernate` (gVisor with checkpoints only): a
// python workspace on runsc holding an idle REPL; run_command true in it
// while it runs and after the idle loop hibernated it (the call restores
// it), against a cold start (a new workspace of the same shape and its
// first job), each n times; the checkpoints' time and image size from the server's log;
// and forks with processes of one and of four copies, each timed against
// that cold start.
func hibernateBench(ctx context.Context, o options) error {
	if out, err := exec.CommandContext(ctx, "docker", "version", "--format", "{{.Server.Experimental}}").Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		return errors.New("hibernate: the engine serves no checkpoints (runsc and the engine's experimental mode: make gvisor)")
	}
	s, err := startServer(ctx, o, hibernateName, "runtime: runsc\nworkspaces:\n  hibernate_after_s: 3\n")
	if err != nil {
		return err
	}
	defer s.close()
	const ws = "bench-hibernate"
	if _, err := s.call(ctx, "create_workspace", map[string]any{"name": ws, "language": "python"}); err != nil {
		return err
	}
	defer s.call(ctx, "delete_workspace", map[string]any{"name": ws})
	sess, err := s.call(ctx, "start_session", map[string]any{"workspace": ws, "language": "python", "command": "python3", "until": ">>> $"})
	if err != nil {
		return err
	}
	if id, _ := sess["job_id"].(string); id != "" {
		defer s.call(ctx, "kill_job", map[string]any{"job_id": id, "signal": "KILL", "grace_s": 0})
		if _, err := s.call(ctx, "send_input", map[string]any{"job_id": id, "text": "x = list(range(100000))", "enter": true, "until": ">>> $"}); err != nil {
			return err
		}
	}
	job := func() error {
		_, err := s.runJob(ctx, map[string]any{"command": "true", "workspace": ws})
		return err
	}
	cid, err := workspaceContainer(ctx, ws)
	if err != nil {
		return err
	}
	state := func() string { return containerState(ctx, cid) }
	progress("hibernate: run_command true in a running workspace x%d", o.runs)
	running, err := sample(o.runs, true, job)
	if err != nil {
		return err
	}
	// A cold start: a new workspace of the same shape, made and its first
	// job run. (An engine-side docker stop under runsc leaves the daemon's
	// exec stream open, so the server would not see that stop.)
	progress("hibernate: create_workspace and its first job x%d (a cold start)", o.runs)
	var cold stats
	for i := 0; i < o.runs; i++ {
		name := fmt.Sprintf("bench-cold-%d", i)
		start := time.Now()
		if _, err := s.call(ctx, "create_workspace", map[string]any{"name": name, "language": "python"}); err != nil {
			return err
		}
		if _, err := s.runJob(ctx, map[string]any{"command": "true", "workspace": name}); err != nil {
			return err
		}
		cold = append(cold, time.Since(start))
		if _, err := s.call(ctx, "delete_workspace", map[string]any{"name": name}); err != nil {
			return err
		}
	}
	progress("hibernate: run_command true in a hibernated workspace x%d (each after the idle loop hibernated it)", o.runs)
	var restored stats
	for i := 0; i < o.runs; i++ {
		deadline := time.Now().Add(60 * time.Second)
		for state() != "exited" {
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(s.logPath)
				return fmt.Errorf("the workspace was not hibernated within 60 s (state %q); the server's log:\n%s", state(), log)
			}
			time.Sleep(100 * time.Millisecond)
		}
		start := time.Now()
		if err := job(); err != nil {
			return err
		}
		restored = append(restored, time.Since(start))
	}
	forks := map[int]stats{}
	for _, count := range []int{1, 4} {
		progress("hibernate: fork with processes, %d cop(ies) x3", count)
		for i := 0; i < 3; i++ {
			name := fmt.Sprintf("bench-fork%d-%d", count, i)
			start := time.Now()
			res, err := s.call(ctx, "create_workspace", map[string]any{"name": name, "from": ws, "with_processes": true, "count": count})
			took := time.Since(start)
			if err != nil {
				return err
			}
			if origin, _ := res["origin"].(map[string]any); origin["processes"] != true {
				return fmt.Errorf("a fork with processes copied files only: %v", origin)
			}
			forks[count] = append(forks[count], took)
			for _, n := range workspace.CopyNames(name, count) {
				if _, err := s.call(ctx, "delete_workspace", map[string]any{"name": n}); err != nil {
					return err
				}
			}
		}
	}
	took, size, err := hibernations(s.logPath)
	if err != nil {
		return err
	}
	fmt.Printf("\n%-46s %9s %9s  %s\n", "a python workspace on runsc, an idle REPL", "p50 ms", "p95 ms", "goal")
	fmt.Printf("%-46s %9.2f %9.2f\n", "job while running", ms(running.p50()), ms(running.p95()))
	fmt.Printf("%-46s %9.2f %9.2f\n", "a new workspace and its first job (cold)", ms(cold.p50()), ms(cold.p95()))
	fmt.Printf("%-46s %9.2f %9.2f  <= 1000: %s\n", "job after hibernation (the call restores it)", ms(restored.p50()), ms(restored.p95()), yes(restored.p50() <= time.Second))
	fmt.Printf("%-46s %9.2f %9.2f  (%d checkpoints, image %.1f MiB)\n", "hibernation (checkpoint, from the log)", ms(took.p50()), ms(took.p95()), len(took), float64(size)/(1<<20))
	fmt.Printf("%-46s %9.2f %9.2f\n", "fork with processes, 1 copy", ms(forks[1].p50()), ms(forks[1].p95()))
	fmt.Printf("%-46s %9.2f %9.2f  <= 2000: %s\n", "fork with processes, 4 copies", ms(forks[4].p50()), ms(forks[4].p95()), yes(forks[4].p50() <= 2*time.Second))
	fmt.Printf("  restored / cold (p50)  %.3f\n", float64(restored.p50())/float64(cold.p50()))
	return nil
}

// hibernations reads the server's log for its checkpoints: their times and
// the last image's size.
func hibernations(logPath string) (stats, int64, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var took stats
	var size int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Message string  `json:"message"`
			Took    float64 `json:"took"`
			Bytes   int64   `json:"image_bytes"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "idle workspace hibernated" {
			took = append(took, time.Duration(line.Took*float64(time.Millisecond)))
			size = line.Bytes
		}
	}
	return took, size, sc.Err()
}

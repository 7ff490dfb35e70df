package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// pauseBench is `-only pause`: run_command true in a workspace while it
// runs, just after the idle loop paused it (the call thaws it first), and
// after its container was stopped (the call starts it again: a cold start
// of the same workspace), each n times, on one server with
// workspaces.pause_after_s: 1.
func pauseBench(ctx context.Context, o options) error {
	s, err := startServer(ctx, o, "pause", "workspaces:\n  pause_after_s: 1\n")
	if err != nil {
		return err
	}
	defer s.close()
	const ws = "bench-pause"
	if _, err := s.call(ctx, "create_workspace", map[string]any{"name": ws, "language": "bash"}); err != nil {
		return err
	}
	defer s.call(ctx, "delete_workspace", map[string]any{"name": ws})
	job := func() error {
		_, err := s.runJob(ctx, map[string]any{"command": "true", "workspace": ws})
		return err
	}
	progress("pause: run_command true in a running workspace x%d", o.runs)
	running, err := sample(o.runs, true, job)
	if err != nil {
		return err
	}
	cid, err := workspaceContainer(ctx, ws)
	if err != nil {
		return err
	}
	progress("pause: run_command true in a paused workspace x%d (each after the idle loop paused it)", o.runs)
	var thawed stats
	for i := 0; i < o.runs; i++ {
		deadline := time.Now().Add(30 * time.Second)
		for containerState(ctx, cid) != "paused" {
			if time.Now().After(deadline) {
				return fmt.Errorf("the workspace was not paused within 30 s (state %q)", containerState(ctx, cid))
			}
			time.Sleep(100 * time.Millisecond)
		}
		start := time.Now()
		if err := job(); err != nil {
			return err
		}
		thawed = append(thawed, time.Since(start))
	}
	progress("pause: run_command true in a stopped workspace x%d (a cold start of it)", o.runs)
	var cold stats
	for i := 0; i < o.runs; i++ {
		if err := exec.CommandContext(ctx, "docker", "stop", "-t", "1", cid).Run(); err != nil {
			return err
		}
		start := time.Now()
		if err := job(); err != nil {
			return err
		}
		cold = append(cold, time.Since(start))
	}
	fmt.Printf("\n%-46s %9s %9s  %s\n", "a workspace's job after idle", "p50 ms", "p95 ms", "goal")
	fmt.Printf("%-46s %9.2f %9.2f\n", "running", ms(running.p50()), ms(running.p95()))
	added := thawed.p50() - running.p50()
	fmt.Printf("%-46s %9.2f %9.2f  added p50 %.2f ms <= 15: %s\n", "paused (the call thaws it)", ms(thawed.p50()), ms(thawed.p95()), ms(added), yes(added <= 15*time.Millisecond))
	fmt.Printf("%-46s %9.2f %9.2f\n", "stopped (the call starts it: cold)", ms(cold.p50()), ms(cold.p95()))
	fmt.Printf("  paused / cold (p50)  %.3f\n", float64(thawed.p50())/float64(cold.p50()))
	return nil
}

// workspaceContainer is the id of workspace ws's container, as the engine
// lists it.
func workspaceContainer(ctx context.Context, ws string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "ps", "-aq", "--filter", "label="+sandbox.LabelWorkspace+"="+ws).Output()
	cid := strings.TrimSpace(string(out))
	if err != nil || cid == "" {
		return "", fmt.Errorf("the workspace's container: %q, %v", cid, err)
	}
	return cid, nil
}

// containerState is the engine's word for a container's state (running,
// paused, exited).
func containerState(ctx context.Context, cid string) string {
	out, _ := exec.CommandContext(ctx, "docker", "inspect", "--format", "{{.State.Status}}", cid).Output()
	return strings.TrimSpace(string(out))
}

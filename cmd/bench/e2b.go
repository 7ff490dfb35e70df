package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"time"
)

// e2bName is the e2b bench's server (it logs at info: the listener's address).
const e2bName = "e2b"

// e2bBench is `-only e2b`: the e2b SDK against `serve --e2b` (its script
// test/e2e/testdata/e2b/bench.mjs, node from conformance/) beside the same
// through MCP on the same server: a new sandbox (workspace) to its first
// command's output, and a command's round trip in one.
func e2bBench(ctx context.Context, o options) error {
	node, _ := filepath.Abs("conformance/node_modules/node/bin/node")
	sdk, _ := filepath.Abs("test/e2e/testdata/e2b")
	if _, err := os.Stat(filepath.Join(sdk, "node_modules/e2b")); err != nil {
		return fmt.Errorf("e2b: the SDK is not installed: run `npm ci` in %s (and `make conformance` once for node)", sdk)
	}
	s, err := startServer(ctx, o, e2bName, "", "SANDBOXER_E2B_ADDR=127.0.0.1:0")
	if err != nil {
		return err
	}
	defer s.close()
	addr := ""
	line := regexp.MustCompile(`"addr":"([0-9.:]+)".*serving the E2B API`)
	for deadline := time.Now().Add(30 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(s.logPath)
		if m := line.FindSubmatch(b); m != nil {
			addr = string(m[1])
		}
	}
	if addr == "" {
		return fmt.Errorf("e2b: the server did not say where it serves the E2B API (log: %s)", tail(s.logPath))
	}
	runs := min(o.runs, 20)
	progress("e2b: the e2b SDK, %d sandboxes and %d round trips", runs, runs)
	cmd := exec.CommandContext(ctx, node, "bench.mjs")
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "E2B_API_URL=http://"+addr, "E2B_SANDBOX_URL=http://"+addr, "E2B_API_KEY=bench", fmt.Sprintf("RUNS=%d", runs))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("e2b: the SDK's script: %v: %s", err, stderr.String())
	}
	var sdkOut struct {
		FirstOutputMS []float64 `json:"firstOutputMs"`
		RoundTripMS   []float64 `json:"roundTripMs"`
	}
	if err := json.Unmarshal(raw, &sdkOut); err != nil {
		return fmt.Errorf("e2b: the SDK's script printed %q: %v", raw, err)
	}
	progress("e2b: the same through MCP")
	var mcpFirst, mcpTrip stats
	for i := 0; i < runs; i++ {
		name := fmt.Sprintf("bench-e2b-%d", i)
		start := time.Now()
		if _, err := s.call(ctx, "create_workspace", map[string]any{"name": name, "language": "python"}); err != nil {
			return err
		}
		if _, err := s.runJob(ctx, map[string]any{"workspace": name, "command": "echo hi"}); err != nil {
			return err
		}
		mcpFirst = append(mcpFirst, time.Since(start))
		if i == 0 {
			for j := 0; j < runs; j++ {
				t := time.Now()
				if _, err := s.runJob(ctx, map[string]any{"workspace": name, "command": "true"}); err != nil {
					return err
				}
				mcpTrip = append(mcpTrip, time.Since(t))
			}
		}
		if _, err := s.call(ctx, "delete_workspace", map[string]any{"name": name}); err != nil {
			return err
		}
	}
	toStats := func(ms []float64) stats {
		var st stats
		for _, v := range ms {
			st = append(st, time.Duration(v*float64(time.Millisecond)))
		}
		return st
	}
	sdkFirst, sdkTrip := toStats(sdkOut.FirstOutputMS), toStats(sdkOut.RoundTripMS)
	fmt.Printf("\n%-52s %9s %9s  %s\n", "E2B API (e2b SDK) against MCP, same server", "p50 ms", "p95 ms", "SDK / MCP p50")
	fmt.Printf("%-52s %9.1f %9.1f  %.2f\n", "Sandbox.create() to the first command's output", ms(sdkFirst.p50()), ms(sdkFirst.p95()), float64(sdkFirst.p50())/float64(mcpFirst.p50()))
	fmt.Printf("%-52s %9.1f %9.1f\n", "  create_workspace + run_command (MCP)", ms(mcpFirst.p50()), ms(mcpFirst.p95()))
	fmt.Printf("%-52s %9.1f %9.1f  %.2f\n", "commands.run('true') round trip", ms(sdkTrip.p50()), ms(sdkTrip.p95()), float64(sdkTrip.p50())/float64(mcpTrip.p50()))
	fmt.Printf("%-52s %9.1f %9.1f\n", "  run_command true in the workspace (MCP)", ms(mcpTrip.p50()), ms(mcpTrip.p95()))
	return nil
}

// Command bench measures how long a tiny command takes through sandboxer
// (over MCP stdio, as an agent sees it) against baselines measured in the same
// run: a bare host process and a raw `docker run`. It prints ratios, not
// verdicts: performance is judged by people reading them, not by tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/images"
)

func main() {
	runs := flag.Int("runs", 10, "measured runs per case (after one warm-up)")
	bin := flag.String("bin", "bin/sandboxer", "sandboxer binary")
	flag.Parse()
	if err := run(*runs, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(runs int, bin string) error {
	image := images.Tag("base")
	host, err := measure(runs, func() error { return exec.Command("/bin/true").Run() })
	if err != nil {
		return err
	}
	dockerRun, err := measure(runs, func() error {
		return exec.Command("docker", "run", "--rm", "--network", "none", image, "true").Run()
	})
	if err != nil {
		return fmt.Errorf("docker run: %w", err)
	}
	stateDir, err := os.MkdirTemp("", "sandboxer-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stateDir)
	c, err := client.NewStdioMCPClient(bin, nil, "serve", "--state-dir", stateDir, "--log-level", "warn")
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "bench", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		return err
	}
	sandboxed, err := measure(runs, func() error {
		req := mcp.CallToolRequest{}
		req.Params.Name = "run_command"
		req.Params.Arguments = map[string]any{"command": "true"}
		res, err := c.CallTool(ctx, req)
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("run_command failed: %v", res.Content)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sandboxer: %w", err)
	}
	// THREATS 43: answers stay fast while jobs flood output.
	callTool := func(name string, args map[string]any) (*mcp.CallToolResult, error) {
		req := mcp.CallToolRequest{}
		req.Params.Name = name
		req.Params.Arguments = args
		return c.CallTool(ctx, req)
	}
	probe, err := callTool("run_command", map[string]any{"command": "true"})
	if err != nil {
		return err
	}
	probeID := probe.StructuredContent.(map[string]any)["job_id"]
	getJob := func() error {
		_, err := callTool("get_job", map[string]any{"job_id": probeID})
		return err
	}
	idle, err := measure(runs, getJob)
	if err != nil {
		return err
	}
	var floods []any
	for i := 0; i < 4; i++ {
		r, err := callTool("run_command", map[string]any{"command": "yes", "background": true, "timeout_s": 60})
		if err != nil {
			return err
		}
		floods = append(floods, r.StructuredContent.(map[string]any)["job_id"])
	}
	time.Sleep(time.Second)
	flooded, err := measure(runs, getJob)
	if err != nil {
		return err
	}
	for _, id := range floods {
		_, _ = callTool("kill_job", map[string]any{"job_id": id, "signal": "KILL"})
	}

	fmt.Printf("%-34s %10s\n", "case (median of runs)", "ms")
	fmt.Printf("%-34s %10.2f\n", "bare host process (/bin/true)", ms(host))
	fmt.Printf("%-34s %10.2f\n", "raw docker run --rm (CLI)", ms(dockerRun))
	fmt.Printf("%-34s %10.2f\n", "sandboxer run_command over MCP", ms(sandboxed))
	fmt.Printf("%-34s %10.2f\n", "get_job, idle", ms(idle))
	fmt.Printf("%-34s %10.2f\n", "get_job, 4 jobs flooding output", ms(flooded))
	fmt.Printf("\nratio sandboxer / docker run: %.2f\n", float64(sandboxed)/float64(dockerRun))
	fmt.Printf("ratio get_job flooded / idle: %.2f\n", float64(flooded)/float64(idle))
	fmt.Printf("ratio sandboxer / host process: %.0f\n", float64(sandboxed)/float64(host))
	return nil
}

// measure runs f once to warm up, then runs times, returning the median.
func measure(runs int, f func() error) (time.Duration, error) {
	if err := f(); err != nil {
		return 0, err
	}
	d := make([]time.Duration, 0, runs)
	for i := 0; i < runs; i++ {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		d = append(d, time.Since(start))
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

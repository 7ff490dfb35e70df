package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

const (
	httpClients    = 8
	jobsPerClient  = 25
	httpStartLimit = 60 * time.Second
)

var httpAddrLine = regexp.MustCompile(`"addr":"([^"]+)".*serving MCP on http`)

// httpVsStdio runs 8 callers × 25 trivial jobs through one stdio server and
// through 8 Streamable HTTP clients of one HTTP server, and compares the
// calls' p50.
func httpVsStdio(ctx context.Context, o options) error {
	s, err := startServer(ctx, o, "stdio", "")
	if err != nil {
		return err
	}
	progress("http: %d callers x %d jobs over stdio", httpClients, jobsPerClient)
	stdio, err := callersLatency(ctx, func(int) func() error {
		return func() error { _, err := s.runJob(ctx, trivialJob); return err }
	})
	var stdioGet stats
	if err == nil {
		stdioGet, err = getJobLatency(ctx, func(int) *server { return s })
	}
	s.close()
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "sandboxer-bench-http-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logPath := filepath.Join(dir, "server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(o.bin, "serve", "--state-dir", filepath.Join(dir, "state"), "--http", "127.0.0.1:0", "--http-rate", "0", "--log-level", "info")
	cmd.Stderr = logf
	cmd.Env = append(os.Environ(), "SANDBOXER_MAX_JOBS="+strconv.Itoa(o.maxJobs)) // as startServer's
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	var addr string
	for deadline := time.Now().Add(httpStartLimit); addr == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(logPath)
		if m := httpAddrLine.FindSubmatch(b); m != nil {
			addr = string(m[1])
		}
	}
	if addr == "" {
		return fmt.Errorf("the HTTP server did not start: %s", tail(logPath))
	}
	clients := make([]*client.Client, httpClients)
	for i := range clients {
		c, err := client.NewStreamableHttpClient("http://" + addr + "/mcp")
		if err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		init := mcp.InitializeRequest{}
		init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
		init.Params.ClientInfo = mcp.Implementation{Name: "bench-http", Version: "1"}
		if _, err := c.Initialize(ctx, init); err != nil {
			return err
		}
		defer c.Close()
		clients[i] = c
	}
	progress("http: %d clients x %d jobs over Streamable HTTP", httpClients, jobsPerClient)
	overHTTP, err := callersLatency(ctx, func(i int) func() error {
		hs := &server{c: clients[i]}
		return func() error { _, err := hs.runJob(ctx, trivialJob); return err }
	})
	if err != nil {
		return err
	}
	httpGet, err := getJobLatency(ctx, func(i int) *server { return &server{c: clients[i]} })
	if err != nil {
		return err
	}
	d := overHTTP.p50() - stdio.p50()
	fmt.Printf("\n%-50s %10s %10s %9s  %s\n", fmt.Sprintf("%d clients x %d calls each", httpClients, jobsPerClient), "stdio ms", "http ms", "diff ms", "goal")
	fmt.Printf("%-50s %10.1f %10.1f %9.1f  <= 2 ms %s\n", "run_command true: p50", ms(stdio.p50()), ms(overHTTP.p50()), ms(d), yes(d <= 2*time.Millisecond))
	fmt.Printf("%-50s %10.1f %10.1f\n", "run_command true: p95", ms(stdio.p95()), ms(overHTTP.p95()))
	// A call that starts no sandbox: what the transport itself costs.
	g := httpGet.p50() - stdioGet.p50()
	fmt.Printf("%-50s %10.2f %10.2f %9.2f  <= 2 ms %s\n", "get_job (no sandbox): p50", ms(stdioGet.p50()), ms(httpGet.p50()), ms(g), yes(g <= 2*time.Millisecond))
	return nil
}

var trivialJob = map[string]any{"command": "true"}

// getJobLatency makes one job through the first caller's server, then has
// every caller ask get_job for it.
func getJobLatency(ctx context.Context, serverOf func(i int) *server) (stats, error) {
	r, err := serverOf(0).runJob(ctx, trivialJob)
	if err != nil {
		return nil, err
	}
	args := map[string]any{"job_id": r["job_id"]}
	return callersLatency(ctx, func(i int) func() error {
		s := serverOf(i)
		return func() error { _, err := s.call(ctx, "get_job", args); return err }
	})
}

// callersLatency runs httpClients callers at once, jobsPerClient calls each,
// and returns every call's latency.
func callersLatency(ctx context.Context, caller func(i int) func() error) (stats, error) {
	var mu sync.Mutex
	var all stats
	var wg sync.WaitGroup
	errs := make(chan error, httpClients)
	for i := 0; i < httpClients; i++ {
		call := caller(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < jobsPerClient; j++ {
				t0 := time.Now()
				if err := call(); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				all = append(all, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil && !strings.Contains(err.Error(), "context canceled") {
		return nil, err
	}
	return all, nil
}

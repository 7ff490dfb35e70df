package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// listenBench is `-only listen`: how long after a job writes a line its
// listener hears notifications/resources/updated for the job's output
// (subscriptions/listen, the 2026-07-28 revision). The job prints its
// clock (the host's: a sandbox shares the kernel's realtime clock) every
// 250 ms; each update is paired with the newest line printed before it.
func listenBench(ctx context.Context, o options) error {
	s, err := startServer(ctx, o, "listen", "")
	if err != nil {
		return err
	}
	defer s.close()
	lines := min(max(o.runs, 10), 120)
	r, err := s.call(ctx, "run_command", map[string]any{"background": true, "timeout_s": lines + 30,
		"command": fmt.Sprintf("sleep 1; for i in $(seq %d); do date +%%s%%N; sleep 0.25; done", lines)})
	if err != nil {
		return err
	}
	id, _ := r["job_id"].(string)
	uri := "job://" + id + "/output"
	// The stdio client hands notifications to OnNotification only once
	// started (Start is idempotent: the transport runs already).
	if err := s.c.Start(ctx); err != nil {
		return err
	}
	var mu sync.Mutex
	var heard []time.Time
	s.c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == string(mcp.MethodNotificationResourceUpdated) && n.Params.AdditionalFields["uri"] == uri {
			mu.Lock()
			heard = append(heard, time.Now())
			mu.Unlock()
		}
	})
	stop, err := s.c.ListenAsync(ctx, mcp.SubscriptionFilter{ResourceSubscriptions: []string{uri}}, func(err error) { progress("listen: %v", err) })
	if err != nil {
		return err
	}
	progress("listen: a job printing its clock %d times, 250 ms apart", lines)
	if _, err := s.call(ctx, "get_job", map[string]any{"job_id": id, "wait_s": 50}); err != nil {
		stop()
		return err
	}
	for deadline := time.Now().Add(time.Duration(lines)*300*time.Millisecond + 5*time.Second); time.Now().Before(deadline); {
		rec, err := s.call(ctx, "get_job", map[string]any{"job_id": id, "wait_s": 10})
		if err != nil {
			stop()
			return err
		}
		if rec["status"] != "running" && rec["status"] != "queued" {
			break
		}
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	out, err := s.call(ctx, "read_output", map[string]any{"job_id": id, "cursor": 0, "max_bytes": 1 << 20})
	if err != nil {
		return err
	}
	var printed []time.Time
	for _, l := range strings.Fields(fmt.Sprint(out["output"])) {
		if ns, err := strconv.ParseInt(l, 10, 64); err == nil {
			printed = append(printed, time.Unix(0, ns))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var lat stats
	for _, h := range heard {
		var newest time.Time
		for _, p := range printed {
			if !p.After(h) && p.After(newest) {
				newest = p
			}
		}
		if !newest.IsZero() {
			lat = append(lat, h.Sub(newest))
		}
	}
	if len(lat) == 0 {
		return fmt.Errorf("listen: no update was heard for %d lines (log: %s)", len(printed), tail(s.logPath))
	}
	fmt.Printf("\n%-46s %9s %9s  %s\n", "a listen stream's notification latency", "p50 ms", "p95 ms", "updates / lines")
	fmt.Printf("%-46s %9.2f %9.2f  %d / %d\n", "job output line -> resources/updated", ms(lat.p50()), ms(lat.p95()), len(lat), len(printed))
	return nil
}

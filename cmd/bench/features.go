package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// features measures what scripts, sessions and workspaces add, on a server
// with the default pool: a Python hello world through run_script; a
// dependency cache hit against the first install, and a cached-dependency run
// against a run without dependencies; the round trip of 1+1 in a Python
// REPL; a trivial run_command in a workspace against a fresh (warm) job.
func features(ctx context.Context, o options, r *report) error {
	policy := ""
	// Where egress TLS is intercepted, installs trust the host's extra CAs.
	if cas, _ := filepath.Glob("/usr/local/share/ca-certificates/*.crt"); len(cas) > 0 {
		var bundle []byte
		for _, f := range cas {
			b, err := os.ReadFile(f)
			if err == nil {
				bundle = append(append(bundle, b...), '\n')
			}
		}
		caFile := filepath.Join(os.TempDir(), fmt.Sprintf("sandboxer-bench-ca-%d.pem", os.Getpid()))
		if err := os.WriteFile(caFile, bundle, 0o600); err != nil {
			return err
		}
		defer os.Remove(caFile)
		policy = "scripts:\n  install_ca_file: " + caFile + "\n"
	}
	s, err := startServer(ctx, o, "features", policy)
	if err != nil {
		return err
	}
	defer s.close()
	call := func(name string, args map[string]any) (map[string]any, error) { return s.call(ctx, name, args) }
	timed := func(name string, args map[string]any) (time.Duration, map[string]any, error) {
		start := time.Now()
		res, err := call(name, args)
		return time.Since(start), res, err
	}
	fmt.Printf("\n%-46s %9s %9s  %s\n", "scripts, sessions, workspaces", "p50 ms", "p95 ms", "goal")
	line := func(name string, st stats, goal string) {
		fmt.Printf("%-46s %9.2f %9.2f  %s\n", name, ms(st.p50()), ms(st.p95()), goal)
	}

	progress("features: run_script python hello world x%d", o.runs)
	hello, err := sample(o.runs, true, func() error {
		time.Sleep(time.Second) // the python pool's one sandbox is back
		_, res, err := timed("run_script", map[string]any{"language": "python", "code": "print('hello')"})
		if err == nil && res["stdout"] != "hello\n" {
			err = fmt.Errorf("run_script: %v", res)
		}
		return err
	})
	if err != nil {
		return err
	}
	// sample times the pause too: measure the call alone.
	hello = hello.minus(time.Second)
	line("run_script python hello world", hello, "")

	// javascript keeps no warm sandbox by default: its first script starts
	// cold, and the pool then follows its use (pool.max_total).
	progress("features: run_script javascript hello world, first then x%d", o.runs)
	jsHello := func() error {
		_, res, err := timed("run_script", map[string]any{"language": "javascript", "code": "console.log('hello')"})
		if err == nil && res["stdout"] != "hello\n" {
			err = fmt.Errorf("run_script: %v", res)
		}
		return err
	}
	firstJS := time.Now()
	if err := jsHello(); err != nil {
		return err
	}
	line("run_script javascript hello world, first", stats{time.Since(firstJS)}, "")
	jsWarm, err := sample(o.runs, false, func() error {
		time.Sleep(time.Second) // the followed sandbox is back
		return jsHello()
	})
	if err != nil {
		return err
	}
	line("run_script javascript hello world, followed", jsWarm.minus(time.Second), "p50 <= 40 ms")
	// The same program on the host, in the same run: node's own start.
	if node, err := exec.LookPath("node"); err == nil {
		host, err := sample(o.runs, true, func() error { return exec.CommandContext(ctx, node, "-e", "console.log('hello')").Run() })
		if err == nil {
			line("  host: node -e hello", host, "")
			fmt.Printf("  followed javascript hello / host node (p50)                    %.2f\n", float64(jsWarm.minus(time.Second).p50())/float64(host.p50()))
		}
	}

	progress("features: dependencies (is-number@7.0.0)")
	code := "const isNumber = require('is-number'); console.log(isNumber(5))"
	first, res, err := timed("run_script", map[string]any{"language": "javascript", "code": code, "dependencies": []string{"is-number@7.0.0"}})
	if err != nil {
		return fmt.Errorf("first install: %w", err)
	}
	if d, _ := res["dependencies"].(map[string]any); d == nil || d["cache"] != "installed" {
		fmt.Printf("(the dependency cache already held is-number: first run %v)\n", res["dependencies"])
	}
	time.Sleep(2 * time.Second) // a later run: the pool has a sandbox with the cache mounted
	var hit, plain stats
	for i := 0; i < 3; i++ {
		d, _, err := timed("run_script", map[string]any{"language": "javascript", "code": code, "dependencies": []string{"is-number@7.0.0"}})
		if err != nil {
			return err
		}
		hit = append(hit, d)
		time.Sleep(time.Second)
		d, _, err = timed("run_script", map[string]any{"language": "javascript", "code": "console.log(true)"})
		if err != nil {
			return err
		}
		plain = append(plain, d)
		time.Sleep(time.Second)
	}
	fmt.Printf("%-46s %9.2f\n", "dependencies: first install (run)", ms(first))
	line("dependencies: cache hit", hit, "")
	line("no dependencies (same language)", plain, "")

	progress("features: python REPL round trip x%d", o.runs)
	sess, err := call("start_session", map[string]any{"command": "python3", "language": "python", "until": ">>> $", "wait_s": 20})
	if err != nil {
		return err
	}
	id, _ := sess["job_id"].(string)
	repl, err := sample(o.runs, true, func() error {
		res, err := call("send_input", map[string]any{"job_id": id, "text": "1+1", "enter": true, "until": `2\r?\n>>> $`, "wait_s": 10})
		if err == nil && res["matched"] != true {
			err = fmt.Errorf("no answer: %v", res["output"])
		}
		return err
	})
	_, _ = call("kill_job", map[string]any{"job_id": id, "signal": "KILL"})
	if err != nil {
		return err
	}
	line("python REPL 1+1 (send_input -> answer)", repl, "p50 <= 20")

	ws, err := workspaceTrue(ctx, s, o.runs)
	if err != nil {
		return err
	}
	line("run_command true in a workspace", ws, "p50 <= 15")

	fmt.Printf("\nratios\n")
	fmt.Printf("  dependency cache hit / first install (p50)                     %.3f  (%.1fx faster)\n", float64(hit.p50())/float64(first), float64(first)/float64(hit.p50()))
	fmt.Printf("  cached-dependency run / no-dependency run (p50)                %.3f  goal <= 1.2: %s\n", float64(hit.p50())/float64(plain.p50()), yes(float64(hit.p50()) <= 1.2*float64(plain.p50())))
	if r.warmTrue != nil {
		fmt.Printf("  workspace run_command / fresh warm run_command (p50)           %.3f\n", float64(ws.p50())/float64(r.warmTrue.lat.p50()))
	}
	fmt.Printf("  python REPL round trip p50 <= 20 ms: %s\n", yes(repl.p50() <= 20*time.Millisecond))
	return nil
}

// workspaceTrue times `run_command true` in a bash workspace, n times, after
// one untimed job (the workspace's start and its first stream).
func workspaceTrue(ctx context.Context, s *server, n int) (stats, error) {
	progress("workspace: run_command true in a workspace x%d", n)
	if _, err := s.call(ctx, "create_workspace", map[string]any{"name": "bench", "language": "bash"}); err != nil {
		return nil, err
	}
	defer s.call(ctx, "delete_workspace", map[string]any{"name": "bench"})
	return sample(n, true, func() error {
		_, err := s.runJob(ctx, map[string]any{"command": "true", "workspace": "bench"})
		return err
	})
}

// workspaceOnly is `-only workspace`: run_command true in a workspace against
// the same in a fresh (warm) sandbox, on one server.
func workspaceOnly(ctx context.Context, o options) error {
	s, err := startServer(ctx, o, "workspace", "")
	if err != nil {
		return err
	}
	defer s.close()
	progress("workspace: run_command true in a fresh sandbox x%d", o.runs)
	fresh, err := sample(o.runs, true, func() error {
		time.Sleep(100 * time.Millisecond) // the pool's sandbox is back
		_, err := s.runJob(ctx, map[string]any{"command": "true"})
		return err
	})
	if err != nil {
		return err
	}
	fresh = fresh.minus(100 * time.Millisecond)
	ws, err := workspaceTrue(ctx, s, o.runs)
	if err != nil {
		return err
	}
	fmt.Printf("\n%-46s %9s %9s  %s\n", "workspace jobs", "p50 ms", "p95 ms", "goal")
	fmt.Printf("%-46s %9.2f %9.2f\n", "run_command true, fresh warm sandbox", ms(fresh.p50()), ms(fresh.p95()))
	fmt.Printf("%-46s %9.2f %9.2f  p50 <= 15: %s\n", "run_command true in a workspace", ms(ws.p50()), ms(ws.p95()), yes(ws.p50() <= 15*time.Millisecond))
	fmt.Printf("  workspace / fresh warm (p50)  %.3f\n", float64(ws.p50())/float64(fresh.p50()))
	return nil
}

// minus takes a fixed pause out of every sample.
func (s stats) minus(d time.Duration) stats {
	out := make(stats, len(s))
	for i, v := range s {
		out[i] = max(0, v-d)
	}
	return out
}

package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// warmOnly measures warm `run_command true` alone, three ways: spaced (each
// call -spacing after the last one ended), as the core part does (each call
// once the pool is full and done starting sandboxes), and as soon as the
// pool is full (after -settle; it may still be starting the sandboxes it
// keeps past its sizes). It asks the server nothing newer than run_command and get_job,
// so it measures older binaries too: scripts/bisect-warm.sh bisects the
// warm path with it. Its last line is the one the script reads.
func warmOnly(ctx context.Context, o options) error {
	progress("starting the server, default pool")
	policy := ""
	if o.warmPolicy != "" {
		b, err := os.ReadFile(o.warmPolicy)
		if err != nil {
			return err
		}
		policy = string(b)
	}
	s, err := startServer(ctx, o, "warm", policy)
	if err != nil {
		return err
	}
	defer s.close()
	const poolSize = 3 // policies/default.yaml: bash 2, python 1
	claimed := map[string]bool{}
	if _, err := s.poolFull(ctx, poolSize, "", claimed); err != nil {
		return err
	}
	progress("warm: run_command true x%d, spaced %s", o.runs, o.spacing)
	var spaced stats
	for i := -2; i < o.runs; i++ { // two warm-up calls
		time.Sleep(o.spacing)
		sent := time.Now()
		if _, err := s.runJob(ctx, map[string]any{"command": "true"}); err != nil {
			return err
		}
		if i >= 0 {
			spaced = append(spaced, time.Since(sent))
		}
	}
	progress("warm: run_command true x%d, the pool full and quiet before each", o.runs)
	quiet, err := s.measureWarm(ctx, o, poolSize, "base", true, claimed, map[string]any{"command": "true"})
	if err != nil {
		return err
	}
	progress("warm: run_command true x%d, as soon as the pool is full (it may still start more)", o.runs)
	refilling, err := s.measureWarm(ctx, o, poolSize, "base", false, claimed, map[string]any{"command": "true"})
	if err != nil {
		return err
	}
	fmt.Printf("warm true, spaced %s: p50_ms=%.2f p95_ms=%.2f runs=%d\n", o.spacing, ms(spaced.p50()), ms(spaced.p95()), len(spaced))
	fmt.Printf("warm true, pool quiet: p50_ms=%.2f p95_ms=%.2f runs=%d served_warm=%d\n", ms(quiet.lat.p50()), ms(quiet.lat.p95()), len(quiet.lat), quiet.served)
	fmt.Printf("warm true, pool full: p50_ms=%.2f p95_ms=%.2f runs=%d served_warm=%d\n", ms(refilling.lat.p50()), ms(refilling.lat.p95()), len(refilling.lat), refilling.served)
	return nil
}

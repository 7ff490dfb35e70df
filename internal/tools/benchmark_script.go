package tools

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/job"
)

// benchmark_script bounds.
const (
	defaultBenchRuns   = 5
	maxBenchRuns       = 50
	defaultBenchWarmup = 1
	maxBenchWarmup     = 10
)

// BenchmarkScriptArgs are benchmark_script's arguments.
type BenchmarkScriptArgs struct {
	Code         string            `json:"code" jsonschema:"the program's source code (at most 512 KiB)"`
	Language     string            `json:"language"`
	Args         []string          `json:"args,omitempty" jsonschema:"command-line arguments for every run"`
	Stdin        *string           `json:"stdin,omitempty" jsonschema:"text written to every run's stdin (at most 1 MiB)"`
	Env          map[string]string `json:"env,omitempty" jsonschema:"environment variables for every run (run_script's rules)"`
	EnvFile      string            `json:"env_file,omitempty" jsonschema:"host dotenv file under scripts.env_file_dirs (run_script's rules)"`
	Dependencies []string          `json:"dependencies,omitempty" jsonschema:"packages the script needs (run_script's rules): installed once into a cache before the first run, not measured"`
	Runs         *int              `json:"runs,omitempty"`
	Warmup       *int              `json:"warmup,omitempty"`
	TimeoutS     *float64          `json:"timeout_s,omitempty"`
	MemoryMB     *int64            `json:"memory_mb,omitempty"`
	CPUs         *float64          `json:"cpus,omitempty"`
	Pids         *int64            `json:"pids,omitempty"`
}

// BenchRun is one measured run.
type BenchRun struct {
	JobID           string `json:"job_id" jsonschema:"the run's job"`
	WallMS          int64  `json:"wall_ms" jsonschema:"wall time of the sandbox's process tree (compile included), in milliseconds"`
	CPUMS           int64  `json:"cpu_ms" jsonschema:"CPU time of every process of the run, in milliseconds"`
	PeakMemoryBytes int64  `json:"peak_memory_bytes" jsonschema:"peak memory of the run's sandbox, in bytes"`
	CompileMS       *int64 `json:"compile_ms,omitempty" jsonschema:"the compile step's duration, for compiled languages"`
}

// BenchStats are min, median and max of one figure.
type BenchStats struct {
	Min    int64 `json:"min" jsonschema:"smallest"`
	Median int64 `json:"median" jsonschema:"median (the lower middle of an even count)"`
	Max    int64 `json:"max" jsonschema:"largest"`
}

// BenchmarkScriptResult is benchmark_script's result.
type BenchmarkScriptResult struct {
	Language        string      `json:"language" jsonschema:"the language"`
	LanguageVersion string      `json:"language_version,omitempty" jsonschema:"the interpreter or compiler that ran it"`
	Warmup          int         `json:"warmup" jsonschema:"warm-up runs made (not measured)"`
	Runs            []BenchRun  `json:"runs" jsonschema:"the measured runs, in order"`
	WallMS          *BenchStats `json:"wall_ms,omitempty" jsonschema:"min, median and max of wall_ms"`
	CPUMS           *BenchStats `json:"cpu_ms,omitempty" jsonschema:"min, median and max of cpu_ms"`
	PeakMemoryBytes *BenchStats `json:"peak_memory_bytes,omitempty" jsonschema:"min, median and max of peak_memory_bytes"`
}

func BenchmarkScript(d Deps) Tool {
	pol := d.policyOrDefault()
	l := pol.Limits
	in := inputSchema[BenchmarkScriptArgs](map[string]param{
		"language": oneOf(scriptLanguageNames()...).describe("the source's language"),
		"runs":     between(1, maxBenchRuns).describe("measured runs, each in a fresh sandbox; default %d, at most %d", defaultBenchRuns, maxBenchRuns),
		"warmup":   between(0, maxBenchWarmup).describe("runs made first and not measured; default %d, at most %d", defaultBenchWarmup, maxBenchWarmup),
		"timeout_s": between(minTimeoutS, float64(l.TimeoutS.Max)).checkedByHandler().describe(
			"timeout of each run in seconds; default %d, at most %d", l.TimeoutS.Default, l.TimeoutS.Max),
		"memory_mb": between(minMemoryMB, float64(l.MemoryMB.Max)).checkedByHandler().describe(
			"memory limit of each run in MiB; default %d, at most %d", l.MemoryMB.Default, l.MemoryMB.Max),
		"cpus": between(minCPUs, l.CPUs.Max).checkedByHandler().describe(
			"CPU quota of each run in cores; default %s, at most %s", num(l.CPUs.Default), num(l.CPUs.Max)),
		"pids": between(minPids, float64(l.Pids.Max)).checkedByHandler().describe(
			"most processes and threads of each run; default %d, at most %d", l.Pids.Default, l.Pids.Max),
	})
	def := mcp.NewTool("benchmark_script",
		mcp.WithDescription("Run a script (as run_script would) warmup times unmeasured, then runs times, each in a fresh sandbox, one after another; "+
			"returns each run's wall time, CPU time and peak memory and their min, median and max. The first run that fails stops the benchmark with an error naming it and why. "+
			"The whole call must fit in the client's request timeout: keep runs × run time small."),
		mcp.WithToolTitle("Benchmark a script"),
		annotations("Benchmark a script", false, true, false, false),
		withInput(in),
		withOutput[BenchmarkScriptResult](),
	)
	return Tool{Toolset: ToolsetExec, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args BenchmarkScriptArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		runs, warmup := defaultBenchRuns, defaultBenchWarmup
		if args.Runs != nil {
			runs = *args.Runs
		}
		if args.Warmup != nil {
			warmup = *args.Warmup
		}
		if runs < 1 || runs > maxBenchRuns {
			return errorResult("runs %d is out of range: 1 to %d", runs, maxBenchRuns), nil
		}
		if warmup < 0 || warmup > maxBenchWarmup {
			return errorResult("warmup %d is out of range: 0 to %d", warmup, maxBenchWarmup), nil
		}
		run, problem := d.scriptRequest(ctx, RunScriptArgs{
			Code: args.Code, Language: args.Language, Args: args.Args, Stdin: args.Stdin, Env: args.Env, EnvFile: args.EnvFile, Dependencies: args.Dependencies,
			TimeoutS: args.TimeoutS, MemoryMB: args.MemoryMB, CPUs: args.CPUs, Pids: args.Pids,
		})
		if problem != nil {
			return problem, nil
		}
		res := BenchmarkScriptResult{Language: args.Language, LanguageVersion: run.version, Warmup: warmup, Runs: []BenchRun{}}
		wait := run.req.Limits.Timeout + timeoutSlack
		for i := 0; i < warmup+runs; i++ {
			rec, err := d.Jobs.Submit(ctx, run.req)
			if err != nil {
				return failure(err), nil
			}
			rec, err = d.Jobs.Wait(ctx, rec.ID, wait)
			if err != nil {
				return failure(err), nil
			}
			which := fmt.Sprintf("measured run %d", i-warmup+1)
			if i < warmup {
				which = fmt.Sprintf("warm-up run %d", i+1)
			}
			if !job.Finished(rec.Status) {
				_, _ = d.Jobs.Kill(context.Background(), rec.ID, "KILL", 0, job.ReasonCancelled)
				return errorResult("benchmark stopped: %s (job %s) was cancelled before it ended", which, rec.ID), nil
			}
			if rec.Status != job.StatusCompleted {
				tailOut, _ := d.Jobs.Tail(ctx, rec.ID, 20, 4096)
				text, _ := outputText(tailOut)
				return errorResult("benchmark stopped: %s (job %s) ended %s: %s\n%s", which, rec.ID, rec.Status, statusLine(rec), text), nil
			}
			if i < warmup {
				continue
			}
			br := BenchRun{JobID: rec.ID, WallMS: rec.Usage.WallMS, CPUMS: rec.Usage.CPUMS, PeakMemoryBytes: rec.Usage.PeakMemoryBytes}
			if c, _, ok := d.compileOf(ctx, rec.ID); ok {
				ms := c.DurationMS
				br.CompileMS = &ms
			}
			res.Runs = append(res.Runs, br)
		}
		pick := func(f func(BenchRun) int64) *BenchStats {
			v := make([]int64, len(res.Runs))
			for i, r := range res.Runs {
				v[i] = f(r)
			}
			sort.Slice(v, func(a, b int) bool { return v[a] < v[b] })
			return &BenchStats{Min: v[0], Median: v[(len(v)-1)/2], Max: v[len(v)-1]}
		}
		res.WallMS = pick(func(r BenchRun) int64 { return r.WallMS })
		res.CPUMS = pick(func(r BenchRun) int64 { return r.CPUMS })
		res.PeakMemoryBytes = pick(func(r BenchRun) int64 { return r.PeakMemoryBytes })
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %d runs after %d warm-up\nwall ms   min %d median %d max %d\ncpu ms    min %d median %d max %d\npeak MiB  min %.1f median %.1f max %.1f",
			args.Language, runs, warmup, res.WallMS.Min, res.WallMS.Median, res.WallMS.Max, res.CPUMS.Min, res.CPUMS.Median, res.CPUMS.Max,
			mib(res.PeakMemoryBytes.Min), mib(res.PeakMemoryBytes.Median), mib(res.PeakMemoryBytes.Max))
		return structured(res, b.String()), nil
	}}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func outputText(b []byte) (string, bool) { return capText(string(b), 4096) }

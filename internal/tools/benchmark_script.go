package tools

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sandboxer/sandboxer/internal/record"
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
	Code         string            `json:"code" jsonschema:"source code"`
	Language     string            `json:"language"`
	Args         []string          `json:"args,omitempty" jsonschema:"program arguments"`
	Stdin        *string           `json:"stdin,omitempty" jsonschema:"text for stdin"`
	Env          map[string]string `json:"env,omitempty" jsonschema:"environment variables"`
	EnvFile      string            `json:"env_file,omitempty" jsonschema:"host dotenv file under scripts.env_file_dirs"`
	Dependencies []string          `json:"dependencies,omitempty" jsonschema:"packages, as run_script's (installed before, not measured)"`
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
		"language": oneOf(scriptLanguageNames()...).describe("language"),
		"runs":     between(1, maxBenchRuns).describe("measured runs; default %d", defaultBenchRuns),
		"warmup":   between(0, maxBenchWarmup).describe("unmeasured runs first; default %d", defaultBenchWarmup),
		"timeout_s": between(minTimeoutS, float64(l.TimeoutS.Max)).checkedByHandler().describe(
			"seconds per run; default %d", l.TimeoutS.Default),
		"memory_mb": between(minMemoryMB, float64(l.MemoryMB.Max)).checkedByHandler().describe(
			"MiB per run; default %d", l.MemoryMB.Default),
		"cpus": between(minCPUs, l.CPUs.Max).checkedByHandler().describe(
			"CPU cores per run; default %s", num(l.CPUs.Default)),
		"pids": between(minPids, float64(l.Pids.Max)).checkedByHandler().describe(
			"process limit per run; default %d", l.Pids.Default),
	})
	def := mcp.NewTool("benchmark_script",
		mcp.WithDescription("Run a script warmup + runs times, each in a fresh sandbox: per-run wall, CPU and peak memory, and min, median, max."),
		mcp.WithToolTitle("Benchmark a script"),
		annotations("Benchmark a script", false, true, false, false),
		mcp.WithTaskSupport(mcp.TaskSupportOptional),
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
			if !record.Finished(rec.Status) {
				_, _ = d.Jobs.Kill(context.Background(), rec.ID, "KILL", 0, record.ReasonCancelled)
				return errorResult("benchmark stopped: %s (job %s) was cancelled before it ended", which, rec.ID), nil
			}
			if rec.Status != record.StatusCompleted {
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

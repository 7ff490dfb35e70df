package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/joho/godotenv"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/deps"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/script"
)

// Script input bounds.
const (
	maxScriptArgs     = 256
	maxScriptArgBytes = 32 << 10
	maxEnvFileBytes   = 256 << 10
	// maxCompileBytes caps what a result carries of each compile stream.
	maxCompileBytes = 64 << 10
	// maxSourceShown caps the source get_job shows (job://{id}/source has all).
	maxSourceShown = 16 << 10
)

// RunScriptArgs are run_script's arguments.
type RunScriptArgs struct {
	Code          string            `json:"code" jsonschema:"source"`
	Language      string            `json:"language"`
	Workspace     string            `json:"workspace,omitempty" jsonschema:"run in this workspace"`
	Args          []string          `json:"args,omitempty" jsonschema:"program args"`
	Stdin         *string           `json:"stdin,omitempty" jsonschema:"stdin text"`
	Env           map[string]string `json:"env,omitempty" jsonschema:"env vars"`
	EnvFile       string            `json:"env_file,omitempty" jsonschema:"dotenv file"`
	KeepStdinOpen *bool             `json:"keep_stdin_open,omitempty" jsonschema:"for send_input"`
	TimeoutS      *float64          `json:"timeout_s,omitempty"`
	WaitS         *float64          `json:"wait_s,omitempty"`
	Background    bool              `json:"background,omitempty" jsonschema:"return at once"`
	Output        string            `json:"output,omitempty"`
	MemoryMB      *int64            `json:"memory_mb,omitempty"`
	CPUs          *float64          `json:"cpus,omitempty"`
	Pids          *int64            `json:"pids,omitempty"`
	Dependencies  []string          `json:"dependencies,omitempty" jsonschema:"e.g. requests==2.31.0"`
	Mounts        []string          `json:"mounts,omitempty"`
	Egress        []string          `json:"egress,omitempty"`
	Secrets       []string          `json:"secrets,omitempty"`
	Returns       []string          `json:"returns,omitempty" jsonschema:"file globs to return"`
}

// DependenciesResult says how a script's dependencies were made ready.
type DependenciesResult struct {
	List      []string `json:"list" jsonschema:"the dependencies, sorted and deduplicated"`
	Cache     string   `json:"cache" jsonschema:"hit: an existing cache served them; installed: they were installed now"`
	InstallMS int64    `json:"install_ms" jsonschema:"how long the install took, in milliseconds (0 on a hit)"`
}

// RunScriptResult is run_script's result: run_command's plus the script's parts.
type RunScriptResult struct {
	RunResult
	LanguageVersion string              `json:"language_version,omitempty" jsonschema:"the interpreter or compiler that ran it"`
	Compile         *CompileResult      `json:"compile,omitempty" jsonschema:"the compile step of a compiled language (go, rust, typescript, solidity), once it ran; a failed one ends the job failed with reason compile_error"`
	Dependencies    *DependenciesResult `json:"dependencies,omitempty" jsonschema:"the script's dependencies and whether the cache had them"`
}

// CompileResult is a script's compile step.
type CompileResult struct {
	Stdout     string `json:"stdout" jsonschema:"the compiler's standard output (at most 64 KiB)"`
	Stderr     string `json:"stderr" jsonschema:"the compiler's messages (at most 64 KiB)"`
	ExitCode   int    `json:"exit_code" jsonschema:"the compiler's exit code"`
	DurationMS int64  `json:"duration_ms" jsonschema:"how long the compile step took, in milliseconds"`
	Truncated  bool   `json:"truncated,omitempty" jsonschema:"the compiler's output was longer than shown"`
}

// languageVersions remembers each image's runtime version: a tag names fixed content.
var languageVersions = &versionCache{v: map[string]string{}}

// scriptRun is a validated script ready to submit.
type scriptRun struct {
	req     job.Request
	wait    time.Duration
	version string
	deps    *DependenciesResult
}

func scriptLanguageNames() []string { return lang.ScriptNames() }

// scriptRequest validates a script's arguments into a job request, reusing
// run_command's request building for everything they share.
func (d Deps) scriptRequest(ctx context.Context, args RunScriptArgs) (*scriptRun, *mcp.CallToolResult) {
	if args.Language == "" {
		return nil, errorResult("language is required: one of %s", strings.Join(lang.ScriptNames(), ", "))
	}
	rec, ok := lang.Builtin(args.Language)
	if !ok { // a template runs as its language does
		l, _, problem := d.resolveLanguage(ctx, args.Language)
		if problem != nil {
			return nil, problem
		}
		rec, _ = lang.Builtin(l.Base)
	}
	if rec.Script.File == "" {
		return nil, errorResult("language %q is not one run_script knows: use one of %s", truncate(args.Language, 64), strings.Join(d.scriptLanguageNames(), ", "))
	}
	sl := rec.Script
	if strings.TrimSpace(args.Code) == "" {
		return nil, errorResult("code is empty: give the program's source")
	}
	if err := checkText("code", args.Code, script.MaxSourceBytes); err != nil {
		return nil, errorResult("%v", err)
	}
	if len(args.Args) > maxScriptArgs {
		return nil, errorResult("args has %d entries; the limit is %d", len(args.Args), maxScriptArgs)
	}
	for i, a := range args.Args {
		if err := checkText(fmt.Sprintf("args[%d]", i), a, maxScriptArgBytes); err != nil {
			return nil, errorResult("%v", err)
		}
	}
	if rec.Name == "bash" {
		if problem := d.checkBlocked(ctx, args.Code, nil, "script"); problem != nil {
			return nil, problem
		}
	}
	env, problem := d.scriptEnv(args.Env, args.EnvFile)
	if problem != nil {
		return nil, problem
	}
	if args.Stdin != nil && len(*args.Stdin) > maxStdinBytes {
		return nil, errorResult("stdin is %d bytes; the limit is %d", len(*args.Stdin), maxStdinBytes)
	}
	var depList []string
	if len(args.Dependencies) > 0 {
		list, err := deps.Normalise(rec.Name, args.Dependencies)
		if err != nil {
			return nil, errorResult("%v", err)
		}
		if d.Dependencies == nil {
			return nil, errorResult("dependencies cannot be installed: %s", d.lacks("dependency caches"))
		}
		depList = list
	}
	setup := ""
	if depList != nil {
		setup = deps.Setup(rec.Name)
	}
	driver := script.Driver(sl, setup)
	jr, wait, problem := d.commandRequest(ctx, RunCommandArgs{
		Command: driver, Language: scriptLanguageIn(args.Language, args.Workspace), Workspace: args.Workspace, Env: env, KeepStdinOpen: args.KeepStdinOpen,
		TimeoutS: args.TimeoutS, WaitS: args.WaitS, Background: args.Background, Output: args.Output,
		MemoryMB: args.MemoryMB, CPUs: args.CPUs, Pids: args.Pids, Mounts: args.Mounts, Egress: args.Egress, Secrets: args.Secrets,
		Returns: args.Returns,
	})
	if problem != nil {
		return nil, problem
	}
	// The source travels on stdin, ahead of the program's own input: the
	// spec frame stays small however large the source is.
	stdin := make([]byte, 0, len(args.Code)+len(derefString(args.Stdin)))
	stdin = append(append(stdin, args.Code...), derefString(args.Stdin)...)
	jr.Kind = job.KindScript
	jr.Command = scriptCommand(rec.Name, args.Args)
	jr.Cmd = append([]string{"bash", "-c", driver, "sandboxer-script"}, args.Args...)
	if sl.Main != nil && (depList == nil || sl.MainDeps) && args.Workspace == "" {
		// The image's own runner does the driver's work (and the dependency
		// setup) in the language's runtime, which a warm sandbox can then
		// start ahead. Workspaces keep the driver: one made from an older
		// image lacks the runner.
		jr.Cmd = append(slices.Clone(sl.Main), args.Args...)
		jr.Prestart = sl.Prestart()
		if depList != nil {
			jr.Env = append(jr.Env, script.DepsDirEnv+"="+deps.Dir)
		}
	}
	jr.Env = append(jr.Env, fmt.Sprintf("%s=%d", script.SourceBytesEnv, len(args.Code)))
	jr.Stdin = stdin
	if sl.Compiled() {
		jr.ExitReason = func(head []byte) string {
			if script.CompileFailed(head) {
				return record.ReasonCompileError
			}
			return ""
		}
	}
	var dr *DependenciesResult
	if depList != nil {
		// Last: everything else was checked before anything is installed.
		got, err := d.Dependencies.Ensure(ctx, rec.Name, jr.Image, depList)
		if err != nil {
			return nil, errorResult("%v", err)
		}
		jr.Mounts = append(jr.Mounts, got.Mount)
		jr.Env = append(jr.Env, deps.RunEnv(rec.Name)...)
		dr = &DependenciesResult{List: got.List, Cache: got.Cache, InstallMS: got.InstallMS}
	}
	version := d.languageVersion(ctx, rec.Name, jr.Image)
	jr.Details = record.Details{Script: &record.ScriptDetails{
		Source: args.Code, Args: args.Args, Version: version, Dependencies: depList,
	}}
	return &scriptRun{req: jr, wait: wait, version: version, deps: dr}, nil
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// scriptCommand is what a script job records as its command.
func scriptCommand(language string, args []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "run_script %s", language)
	for _, a := range args {
		b.WriteString(" " + shellQuote(truncate(a, 256)))
	}
	return truncate(b.String(), 4096)
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%()", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// languageVersion asks an image once for its runtime's version; "" when it
// cannot be asked (the run then reports none).
func (d Deps) languageVersion(ctx context.Context, language, image string) string {
	l, _, ok := d.Languages.Lookup(language)
	if !ok || l.VersionCmd == "" || d.Jobs == nil {
		return ""
	}
	key := image + " " + l.VersionCmd
	if v, ok := languageVersions.get(key); ok {
		return v
	}
	v, err := d.Jobs.Probe(ctx, image, l.VersionCmd, versionTimeout)
	if err != nil {
		return ""
	}
	languageVersions.put(key, v)
	return v
}

// scriptEnv merges env_file (read from an allowed host directory) under env;
// the result is validated by run_command's rules.
func (d Deps) scriptEnv(env map[string]string, envFile string) (map[string]string, *mcp.CallToolResult) {
	for k := range env {
		if strings.HasPrefix(k, "SANDBOXER_") {
			return nil, errorResult("env key %q is not allowed (SANDBOXER_* names are the sandbox's own)", truncate(k, 64))
		}
	}
	if envFile == "" {
		return env, nil
	}
	vars, err := d.readEnvFile(envFile)
	if err != nil {
		return nil, errorResult("%v", err)
	}
	merged := make(map[string]string, len(vars)+len(env))
	for k, v := range vars {
		if strings.HasPrefix(k, "SANDBOXER_") {
			return nil, errorResult("env_file sets %q, which is not allowed (SANDBOXER_* names are the sandbox's own)", truncate(k, 64))
		}
		merged[k] = v
	}
	for k, v := range env {
		merged[k] = v
	}
	if _, err := validateEnv(merged); err != nil {
		return nil, errorResult("env and env_file together: %v", err)
	}
	return merged, nil
}

// readEnvFile parses a dotenv file that lies under one of the policy's
// scripts.env_file_dirs (symbolic links resolved before the check).
func (d Deps) readEnvFile(p string) (map[string]string, error) {
	if err := checkText("env_file", p, maxCwdBytes); err != nil {
		return nil, err
	}
	dirs := d.Policy.Scripts.EnvFileDirs
	if len(dirs) == 0 {
		return nil, fmt.Errorf("env_file %q: this server allows no host env files (policy scripts.env_file_dirs is empty); pass the variables in env instead", truncate(p, 256))
	}
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("env_file %q must be an absolute path under one of: %s", truncate(p, 256), strings.Join(dirs, ", "))
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return nil, fmt.Errorf("env_file %q: %v", truncate(p, 256), cleanMessage(err.Error()))
	}
	allowed := false
	for _, dir := range dirs {
		rd, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(rd, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && rel != "." {
			allowed = true
			break
		}
	}
	if !allowed {
		return nil, fmt.Errorf("env_file %q is not under a directory the policy allows (scripts.env_file_dirs: %s)", truncate(p, 256), strings.Join(dirs, ", "))
	}
	f, err := os.Open(real)
	if err != nil {
		return nil, fmt.Errorf("env_file %q: %v", truncate(p, 256), cleanMessage(err.Error()))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("env_file %q is not a regular file", truncate(p, 256))
	}
	if st.Size() > maxEnvFileBytes {
		return nil, fmt.Errorf("env_file %q is %d bytes; the limit is %d", truncate(p, 256), st.Size(), maxEnvFileBytes)
	}
	vars, err := parseDotenv(f)
	if err != nil {
		return nil, fmt.Errorf("env_file %q: %v", truncate(p, 256), err)
	}
	return vars, nil
}

// parseDotenv parses dotenv text with godotenv (no variable expansion of the
// server's own environment: a value naming $HOME stays as written).
func parseDotenv(r interface{ Read([]byte) (int, error) }) (map[string]string, error) {
	return godotenv.Parse(r)
}

func RunScript(d Deps) Tool {
	pol := d.policyOrDefault()
	l := pol.Limits
	in := inputSchema[RunScriptArgs](map[string]param{
		"language": oneOf(d.scriptLanguageNames()...).checkedByHandler().describe("language"),
		"timeout_s": between(minTimeoutS, float64(l.TimeoutS.Max)).checkedByHandler().describe(
			"seconds until killed; default %d", l.TimeoutS.Default),
		"wait_s": waitParam(pol, "seconds to wait", float64(pol.Jobs.DefaultWaitS)),
		"output": oneOf("both", "stdout", "stderr").describe("streams inline; default both"),
		"memory_mb": between(minMemoryMB, float64(l.MemoryMB.Max)).checkedByHandler().describe(
			"memory MiB; default %d", l.MemoryMB.Default),
		"cpus": between(minCPUs, l.CPUs.Max).checkedByHandler().describe(
			"CPU cores; default %s", num(l.CPUs.Default)),
		"pids": between(minPids, float64(l.Pids.Max)).checkedByHandler().describe(
			"process limit; default %d", l.Pids.Default),
		"mounts":  d.mountsParam(),
		"egress":  d.egressParam(),
		"secrets": d.secretsParam(),
	})
	def := mcp.NewTool("run_script",
		mcp.WithDescription("Run source code in a fresh sandbox; waits as run_command."),
		mcp.WithToolTitle("Run a script in a sandbox"),
		annotations("Run a script in a sandbox", false, true, false, false),
		mcp.WithTaskSupport(mcp.TaskSupportOptional),
		withInput(in),
		withOutput[RunScriptResult](),
	)
	return Tool{Toolset: ToolsetExec, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args RunScriptArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		bctx, stopBuild := d.withBuildProgress(ctx, req)
		run, problem := d.scriptRequest(bctx, args)
		stopBuild()
		if problem != nil {
			return problem, nil
		}
		render := scriptRender{Output: args.Output, Version: run.version, Deps: run.deps}
		task, err := asTask(ctx, req, &run.req, render)
		if err != nil {
			return failure(err), nil
		}
		rec, problem := d.submitAndWait(ctx, req, run.req, args.Background || task.now(), run.wait)
		if problem != nil {
			return problem, nil
		}
		if task.becomes(rec) {
			return taskStarted(ctx, rec), nil
		}
		return d.scriptCallResult(ctx, rec, render), nil
	}, TaskResult: taskResult(d.scriptCallResult)}
}

// scriptRender is what run_script's result depends on beside the job.
type scriptRender struct {
	Output  string              `json:"output,omitempty"`
	Version string              `json:"version,omitempty"`
	Deps    *DependenciesResult `json:"deps,omitempty"`
}

// scriptCallResult is run_script's result for the job it started.
func (d Deps) scriptCallResult(ctx context.Context, rec *record.Job, r scriptRender) *mcp.CallToolResult {
	res, text, err := d.scriptResult(ctx, rec, r.Output, r.Version)
	if err != nil {
		return failure(err)
	}
	if r.Deps != nil {
		res.Dependencies = r.Deps
		text += fmt.Sprintf("\n(dependencies: %s, %s", strings.Join(r.Deps.List, " "), r.Deps.Cache)
		if r.Deps.Cache == deps.CacheInstalled {
			text += fmt.Sprintf(" in %d ms", r.Deps.InstallMS)
		}
		text += ")"
	}
	return d.withReturned(ctx, structured(res, text), rec)
}

// scriptResult is runResult plus the compile step, which is taken out of the
// inline stderr (it starts there) and returned on its own.
func (d Deps) scriptResult(ctx context.Context, rec *record.Job, which, version string) (RunScriptResult, string, error) {
	res, text, err := d.runResult(ctx, rec, which)
	if err != nil {
		return RunScriptResult{}, "", err
	}
	out := RunScriptResult{RunResult: res, LanguageVersion: version}
	if c, block, ok := d.compileOf(ctx, rec.ID); ok {
		out.Compile = c
		// The block starts stderr; it is shown as compile, not twice.
		shown, _ := output.ToText(output.StripANSI(block))
		if len(block) > 0 && strings.HasPrefix(out.Stderr, shown) && !omitted(res, "stderr", len(block)) {
			out.Stderr = out.Stderr[len(shown):]
		}
		text = runText(rec, out.RunResult)
	}
	var b strings.Builder
	b.WriteString(text)
	if out.Compile != nil {
		fmt.Fprintf(&b, "\n--- compile: exit code %d, %d ms ---", out.Compile.ExitCode, out.Compile.DurationMS)
		if s := strings.TrimSpace(out.Compile.Stdout + out.Compile.Stderr); s != "" {
			b.WriteString("\n" + s)
		}
	}
	if version != "" {
		fmt.Fprintf(&b, "\n(%s)", version)
	}
	return out, b.String(), nil
}

// omitted says whether part of stream's first n bytes was left out inline.
func omitted(res RunResult, stream string, n int) bool {
	for _, r := range res.OmittedRanges {
		if r.Stream == stream && r.Start < int64(n) {
			return true
		}
	}
	return false
}

// compileOf reads a script job's compile block from the start of its stderr.
func (d Deps) compileOf(ctx context.Context, id string) (*CompileResult, []byte, bool) {
	zero := int64(0)
	head, err := d.Jobs.Read(ctx, id, job.ReadRequest{Stream: output.StderrOnly, Cursor: &zero, MaxBytes: script.MaxHeaderBytes, Peek: true})
	if err != nil {
		return nil, nil, false
	}
	_, _, blockLen, ok := script.HeaderSize(head.Data)
	if !ok {
		return nil, nil, false
	}
	limit := blockLen
	if limit > 2*maxCompileBytes+1024 {
		limit = 2*maxCompileBytes + 1024
	}
	whole, err := d.Jobs.Read(ctx, id, job.ReadRequest{Stream: output.StderrOnly, Cursor: &zero, MaxBytes: int(limit), Peek: true})
	if err != nil {
		return nil, nil, false
	}
	c, n, ok := script.ParseCompile(whole.Data)
	if !ok {
		// Too long to carry whole: the header's figures, the messages by cursor.
		h, _, _, _ := script.HeaderSize(head.Data)
		return &CompileResult{ExitCode: h.ExitCode, DurationMS: h.DurationMS, Truncated: true,
			Stderr: "(the compiler's output is longer than 128 KiB: read_output with stream stderr from cursor 0 returns it)"}, nil, true
	}
	cr := &CompileResult{ExitCode: c.ExitCode, DurationMS: c.DurationMS}
	cr.Stdout, cr.Truncated = capText(c.Stdout, maxCompileBytes)
	var t bool
	cr.Stderr, t = capText(c.Stderr, maxCompileBytes)
	cr.Truncated = cr.Truncated || t
	return cr, whole.Data[:n], true
}

func capText(s string, n int) (string, bool) {
	if len(s) <= n {
		text, _ := output.ToText([]byte(s))
		return text, false
	}
	text, _ := output.ToText(output.TrimRunes([]byte(s[:n])))
	return text, true
}

// scriptLanguageIn is the language a script asks of its sandbox: in a
// workspace, a bash script runs whatever the workspace's language is (every
// image has bash); other languages must match the workspace's.
func scriptLanguageIn(language, workspace string) string {
	if workspace != "" && language == "bash" {
		return ""
	}
	return language
}

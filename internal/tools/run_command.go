package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// timeoutSlack is how long past a job's timeout a call waits for its end.
const timeoutSlack = 5 * time.Second

// RunCommandArgs are run_command's arguments. Descriptions that depend on the
// policy or the language registry are set in RunCommand.
type RunCommandArgs struct {
	Command       string            `json:"command" jsonschema:"shell command line, run with bash -c"`
	Language      string            `json:"language,omitempty"`
	Workspace     string            `json:"workspace,omitempty" jsonschema:"run in this workspace"`
	Cwd           string            `json:"cwd,omitempty" jsonschema:"working directory under /workspace; default /workspace"`
	Env           map[string]string `json:"env,omitempty" jsonschema:"env vars (at most 64; LD_* refused)"`
	Stdin         *string           `json:"stdin,omitempty" jsonschema:"text for stdin"`
	KeepStdinOpen *bool             `json:"keep_stdin_open,omitempty" jsonschema:"for send_input"`
	TimeoutS      *float64          `json:"timeout_s,omitempty"`
	WaitS         *float64          `json:"wait_s,omitempty"`
	Background    bool              `json:"background,omitempty" jsonschema:"return job_id at once"`
	Output        string            `json:"output,omitempty"`
	MemoryMB      *int64            `json:"memory_mb,omitempty"`
	CPUs          *float64          `json:"cpus,omitempty"`
	Pids          *int64            `json:"pids,omitempty"`
	Mounts        []string          `json:"mounts,omitempty"`
	Egress        []string          `json:"egress,omitempty"`
	Secrets       []string          `json:"secrets,omitempty"`
	Returns       []string          `json:"returns,omitempty" jsonschema:"file globs to return"`
}

// RunResult is run_command's result.
type RunResult struct {
	JobID         string         `json:"job_id" jsonschema:"the job's id, for read_output, get_job, send_input and kill_job"`
	Status        string         `json:"status" jsonschema:"queued, running, completed, failed, timed_out or killed"`
	Reason        string         `json:"reason,omitempty" jsonschema:"why it ended: exit_code, compile_error, oom_killed, start_error, lost, timeout, requested, cancelled, server_shutdown"`
	ExitCode      *int           `json:"exit_code,omitempty" jsonschema:"the command's exit code, once it ended"`
	Error         string         `json:"error,omitempty" jsonschema:"what went wrong starting or running the sandbox"`
	Stdout        string         `json:"stdout" jsonschema:"standard output so far (head and tail when truncated)"`
	Stderr        string         `json:"stderr" jsonschema:"standard error so far (head and tail when truncated)"`
	Truncated     bool           `json:"truncated" jsonschema:"inline output was cut to head and tail; the rest is readable with read_output"`
	Omitted       int64          `json:"omitted_bytes,omitempty" jsonschema:"bytes left out of the inline output"`
	OmittedRanges []OmittedRange `json:"omitted,omitempty" jsonschema:"left out, per stream: read_output from that stream at cursor = start"`
	Dropped       int64          `json:"dropped_bytes,omitempty" jsonschema:"bytes past the per-job output cap, not stored"`
	Lossy         bool           `json:"lossy,omitempty" jsonschema:"output held invalid UTF-8 or NUL bytes, replaced"`
	NextCursor    int64          `json:"next_cursor" jsonschema:"read_output cursor (combined stream) after this result"`
	Usage         *Usage         `json:"usage,omitempty" jsonschema:"what the job's whole process tree used, once it ended"`
	DurationMS    int64          `json:"duration_ms" jsonschema:"run time so far, or in all once the job ended, in milliseconds"`
	QueuedMS      int64          `json:"queued_ms,omitempty" jsonschema:"ms it waited in the queue (the text says why)"`
	queue         string         // why it waits, while queued (in the text)
}

// OmittedRange is a byte range of one stream left out of inline output.
type OmittedRange struct {
	Stream string `json:"stream" jsonschema:"stdout or stderr"`
	Start  int64  `json:"start" jsonschema:"first byte left out: the cursor for read_output with this stream"`
	End    int64  `json:"end" jsonschema:"byte after the last one left out"`
}

func RunCommand(d Deps) Tool {
	pol := d.policyOrDefault()
	l := pol.Limits
	in := inputSchema[RunCommandArgs](map[string]param{
		"language": oneOf(d.languageNames()...).checkedByHandler().describe(
			"default %s", lang.DefaultLanguage),
		"timeout_s": between(minTimeoutS, float64(l.TimeoutS.Max)).checkedByHandler().describe(
			"seconds until killed; default %d", l.TimeoutS.Default),
		"wait_s": waitParam(pol, "seconds to wait", float64(pol.Jobs.DefaultWaitS)),
		"output": oneOf("both", "stdout", "stderr").describe("inline streams; default both"),
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
	def := mcp.NewTool("run_command",
		mcp.WithDescription("Run a shell command in a fresh sandbox (no network, non-root, capped). Returns its output within wait_s, and a job_id while it still runs; a non-zero exit is a result."),
		mcp.WithToolTitle("Run a command in a sandbox"),
		annotations("Run a command in a sandbox", false, true, false, false),
		mcp.WithTaskSupport(mcp.TaskSupportOptional),
		withInput(in),
		withOutput[RunResult](),
	)
	return Tool{Toolset: ToolsetExec, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args RunCommandArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		observe.MarkCtx(ctx, "args_bound")
		bctx, stopBuild := d.withBuildProgress(ctx, req)
		jr, wait, problem := d.commandRequest(bctx, args)
		stopBuild()
		if problem != nil {
			return problem, nil
		}
		observe.MarkCtx(ctx, "request_built")
		if problem := d.checkBlocked(ctx, args.Command, args.Stdin, "command"); problem != nil {
			return problem, nil
		}
		observe.MarkCtx(ctx, "block_checked")
		task, err := asTask(ctx, req, &jr, commandRender{Output: args.Output})
		if err != nil {
			return failure(err), nil
		}
		rec, problem := d.submitAndWait(ctx, req, jr, args.Background || task.now(), wait)
		if problem != nil {
			return problem, nil
		}
		if task.becomes(rec) {
			return taskStarted(ctx, rec), nil
		}
		return d.commandResult(ctx, rec, commandRender{Output: args.Output}), nil
	}, TaskResult: taskResult(d.commandResult)}
}

// commandRender is what run_command's result depends on beside the job.
type commandRender struct {
	Output string `json:"output,omitempty"`
}

// commandResult is run_command's result for the job it started.
func (d Deps) commandResult(ctx context.Context, rec *record.Job, r commandRender) *mcp.CallToolResult {
	res, text, err := d.runResult(ctx, rec, r.Output)
	if err != nil {
		return failure(err)
	}
	observe.MarkCtx(ctx, "result_built")
	return d.withReturned(ctx, structured(res, text), rec)
}

// checkImage turns an unreachable engine or a missing image into a tool error.
func (d Deps) checkImage(ctx context.Context, image string) *mcp.CallToolResult {
	ok, err := d.Runtime.ImageExists(ctx, image)
	if err != nil {
		return failure(err)
	}
	if !ok {
		return failure(&sandbox.ImageError{Image: image})
	}
	return nil
}

// commandRequest validates run_command's arguments into a job request.
func (d Deps) commandRequest(ctx context.Context, args RunCommandArgs) (job.Request, time.Duration, *mcp.CallToolResult) {
	if err := validateCommand("command", args.Command); err != nil {
		return job.Request{}, 0, errorResult("%v", err)
	}
	switch args.Output {
	case "", "both", "stdout", "stderr":
	default:
		return job.Request{}, 0, errorResult("output %q is not one of stdout, stderr, both", args.Output)
	}
	name := args.Language
	if name == "" {
		name = lang.DefaultLanguage
	}
	language, image, problem := d.resolveLanguage(ctx, name)
	if problem != nil {
		return job.Request{}, 0, problem
	}
	var wsName string
	if args.Workspace != "" {
		w, problem := d.workspaceFor(ctx, args.Workspace, args.Language)
		if problem != nil {
			return job.Request{}, 0, problem
		}
		language.Name, language.Base, image, wsName = w.Language, w.Language, w.Image, w.Name
	}
	if problem := noWorkspaceMounts(args.Mounts, wsName); problem != nil {
		return job.Request{}, 0, problem
	}
	if problem := noWorkspaceEgress(args.Egress, wsName); problem != nil {
		return job.Request{}, 0, problem
	}
	if problem := noWorkspaceSecrets(args.Secrets, wsName); problem != nil {
		return job.Request{}, 0, problem
	}
	network, allow, problem := d.egressFor(args.Egress)
	if problem != nil {
		return job.Request{}, 0, problem
	}
	secrets, problem := d.secretsFor(ctx, args.Secrets, args.Env)
	if problem != nil {
		return job.Request{}, 0, problem
	}
	mounts, problem := d.mountsFor(args.Mounts)
	if problem != nil {
		return job.Request{}, 0, problem
	}
	cwd, err := validateCwd(args.Cwd)
	if err != nil {
		return job.Request{}, 0, errorResult("%v", err)
	}
	if err := validateReturns(args.Returns); err != nil {
		return job.Request{}, 0, errorResult("%v", err)
	}
	env, err := validateEnv(args.Env)
	if err != nil {
		return job.Request{}, 0, errorResult("%v", err)
	}
	var stdin []byte
	if args.Stdin != nil {
		if len(*args.Stdin) > maxStdinBytes {
			return job.Request{}, 0, errorResult("stdin is %d bytes; the limit is %d", len(*args.Stdin), maxStdinBytes)
		}
		stdin = []byte(*args.Stdin)
	}
	limits, err := d.Policy.Resolve(policy.Request{TimeoutS: args.TimeoutS, MemoryMB: args.MemoryMB, CPUs: args.CPUs, Pids: args.Pids})
	if err != nil {
		return job.Request{}, 0, failure(err)
	}
	wait, err := d.Policy.ResolveWait(args.WaitS)
	if err != nil {
		return job.Request{}, 0, failure(err)
	}
	if wait >= limits.Timeout {
		// The job ends by its timeout anyway: wait for that end (and the
		// container's removal) rather than return "running" a moment before it.
		wait = limits.Timeout + timeoutSlack
	}
	keepOpen := args.Background
	if args.KeepStdinOpen != nil {
		keepOpen = *args.KeepStdinOpen
	}
	return job.Request{
		Kind: job.KindCommand, Command: args.Command, Cmd: []string{"bash", "-c", args.Command},
		Language: language.Name, Image: image, Runtime: language.Runtime, Workspace: wsName, Cwd: cwd, Env: env,
		Stdin: stdin, KeepStdinOpen: keepOpen,
		Limits:  limits,
		Network: network, Egress: allow, Secrets: secrets,
		Mounts:  mounts,
		Figures: capturesFigures(language.Base), Returns: args.Returns,
	}, wait, nil
}

// runResult builds the result of a call that ran (or started) a job: status
// plus inline output capped to head and tail.
func (d Deps) runResult(ctx context.Context, rec *record.Job, which string) (RunResult, string, error) {
	res := RunResult{
		JobID: rec.ID, Status: rec.Status, Reason: rec.Reason, ExitCode: rec.ExitCode, Error: rec.Error,
		Dropped: rec.DroppedBytes, DurationMS: durationOf(rec), QueuedMS: queuedOf(rec), Usage: usageOf(rec),
	}
	if rec.Status == record.StatusQueued {
		res.queue = d.Jobs.QueueReason(ctx, rec.ID)
	}
	// What is returned counts as read: read_output continues after it.
	in, err := d.Jobs.InlineOutput(ctx, rec.ID, int(d.Policy.Output.InlineBytes))
	if err != nil {
		return res, "", err
	}
	res.NextCursor = in.Cursor
	streams := []struct {
		name    string
		data    []byte
		omitted job.Range
		dst     *string
	}{{"stdout", in.Stdout, in.StdoutOmitted, &res.Stdout}, {"stderr", in.Stderr, in.StderrOmitted, &res.Stderr}}
	for _, s := range streams {
		if which != "" && which != "both" && which != s.name {
			continue
		}
		text, lossy := output.ToText(output.StripANSI(s.data))
		*s.dst = text
		if n := s.omitted.Len(); n > 0 {
			res.Omitted += n
			res.Truncated = true
			res.OmittedRanges = append(res.OmittedRanges, OmittedRange{Stream: s.name, Start: s.omitted.Start, End: s.omitted.End})
		}
		res.Lossy = res.Lossy || lossy
	}
	return res, runText(rec, res), nil
}

// runText is the human-readable text of a run result.
func runText(rec *record.Job, res RunResult) string {
	var b strings.Builder
	b.WriteString(statusLine(rec))
	for _, s := range []struct{ name, text string }{{"stdout", res.Stdout}, {"stderr", res.Stderr}} {
		if s.text != "" {
			fmt.Fprintf(&b, "\n--- %s ---\n%s", s.name, s.text)
		}
	}
	if res.queue != "" {
		fmt.Fprintf(&b, "\n(queued: %s)", res.queue)
	}
	if !record.Finished(rec.Status) {
		fmt.Fprintf(&b, "\n(still %s: read_output, get_job or kill_job with job_id %s)", rec.Status, rec.ID)
	}
	for _, r := range res.OmittedRanges {
		fmt.Fprintf(&b, "\n(%s bytes %d to %d left out: read_output with stream %q and cursor %d returns them)", r.Stream, r.Start, r.End, r.Stream, r.Start)
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// submitAndWait submits a job and, unless it runs in the background, waits
// up to wait for its end with progress notifications. A cancelled wait kills
// the job, unless the client cancelled only because its own request timed
// out: then the job goes on, findable with list_jobs.
func (d Deps) submitAndWait(ctx context.Context, req mcp.CallToolRequest, jr job.Request, background bool, wait time.Duration) (*record.Job, *mcp.CallToolResult) {
	if background {
		// The start happens after the call returns: say now what would make it fail.
		if problem := d.checkImage(ctx, jr.Image); problem != nil {
			return nil, problem
		}
		jr.Detach = true
	}
	rec, err := d.Jobs.Submit(ctx, jr)
	if err != nil {
		if rec != nil {
			return nil, errorResult("job %s could not start: %s", rec.ID, cleanMessage(err.Error()))
		}
		return nil, failure(err)
	}
	if background {
		return rec, nil
	}
	stop := d.startProgress(ctx, req, rec.ID)
	rec, err = d.Jobs.Wait(ctx, rec.ID, wait)
	stop()
	observe.MarkCtx(ctx, "waited")
	if err != nil {
		return nil, failure(err)
	}
	if ctx.Err() != nil && !record.Finished(rec.Status) {
		if why, keep := keepsJob(ctx); keep {
			return nil, errorResult("call cancelled by %s; job %s goes on: read_output, get_job or kill_job with its job_id", why, rec.ID)
		}
		id := rec.ID
		if _, err := d.Jobs.Kill(context.Background(), id, "KILL", 0, record.ReasonCancelled); err != nil {
			return nil, errorResult("call cancelled; killing job %s: %v", id, err)
		}
		return nil, errorResult("call cancelled; job %s killed", id)
	}
	return rec, nil
}

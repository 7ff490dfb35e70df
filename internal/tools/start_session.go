package tools

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/terminal"
)

// Session bounds and defaults.
const (
	defaultRows      = 24
	defaultCols      = 80
	maxArgs          = 256
	maxNameBytes     = 128
	maxProgramBytes  = 4096
	sessionWaitS     = 3.0
	sessionSettle    = 150 * time.Millisecond
	maxSettleMS      = 10000
	sessionTermValue = "xterm-256color"
)

// StartSessionArgs are start_session's arguments.
type StartSessionArgs struct {
	Command      string            `json:"command,omitempty" jsonschema:"program on PATH; default the language's shell or REPL"`
	Args         []string          `json:"args,omitempty" jsonschema:"arguments of command"`
	Language     string            `json:"language,omitempty"`
	Mode         string            `json:"mode,omitempty"`
	Rows         *int              `json:"rows,omitempty"`
	Cols         *int              `json:"cols,omitempty"`
	Name         string            `json:"name,omitempty" jsonschema:"a name for the session"`
	Workspace    string            `json:"workspace,omitempty" jsonschema:"run in this workspace"`
	Cwd          string            `json:"cwd,omitempty" jsonschema:"working directory under /workspace; default /workspace"`
	Env          map[string]string `json:"env,omitempty" jsonschema:"env vars (at most 64; LD_* refused)"`
	WaitS        *float64          `json:"wait_s,omitempty"`
	Until        string            `json:"until,omitempty" jsonschema:"RE2 regex, e.g. a prompt: wait until it matches"`
	IdleTimeoutS *float64          `json:"idle_timeout_s,omitempty"`
	TimeoutS     *float64          `json:"timeout_s,omitempty"`
	Mounts       []string          `json:"mounts,omitempty"`
	Egress       []string          `json:"egress,omitempty"`
	Secrets      []string          `json:"secrets,omitempty"`
}

// StartSessionResult is start_session's result.
type StartSessionResult struct {
	JobID      string   `json:"job_id" jsonschema:"the session's job id, for send_input, read_output, resize_terminal, get_job and kill_job"`
	Status     string   `json:"status" jsonschema:"running, or queued when every slot is taken; failed or completed when the program ended at once"`
	Reason     string   `json:"reason,omitempty" jsonschema:"why it ended, if it did"`
	ExitCode   *int     `json:"exit_code,omitempty" jsonschema:"exit code, if it ended"`
	Error      string   `json:"error,omitempty" jsonschema:"what went wrong starting the sandbox"`
	Output     string   `json:"output" jsonschema:"the initial output (the program's banner and first prompt), escape sequences stripped"`
	NextCursor int64    `json:"next_cursor" jsonschema:"cursor for read_output after the initial output"`
	Matched    bool     `json:"matched" jsonschema:"until matched"`
	Lossy      bool     `json:"lossy,omitempty" jsonschema:"output held invalid UTF-8 or NUL bytes, replaced"`
	Session    *Session `json:"session" jsonschema:"the session's mode, terminal size, name and idle deadline"`
}

// replOf is the interactive program of a language (its record's
// lang.Language.Session): argv for pty and pipe mode; bash when it has none.
func replOf(l lang.Language) (pty, pipe []string) {
	if l.Session.PTY == nil {
		return []string{"bash"}, []string{"bash"}
	}
	return l.Session.PTY, l.Session.Pipe
}

func StartSession(d Deps) Tool {
	pol := d.policyOrDefault()
	l, idle := pol.Limits, pol.Sessions.IdleTimeoutS
	in := inputSchema[StartSessionArgs](map[string]param{
		"language": oneOf(d.languageNames()...).checkedByHandler().describe(
			"default %s", lang.DefaultLanguage),
		"mode": oneOf(job.ModePTY, job.ModePipe).describe(
			"pty (default, a terminal) or pipe"),
		"rows":   between(terminal.MinRows, terminal.MaxRows).describe("default %d", defaultRows),
		"cols":   between(terminal.MinCols, terminal.MaxCols).describe("default %d", defaultCols),
		"wait_s": waitParam(pol, "seconds to wait for the first output", sessionWaitS),
		"idle_timeout_s": between(1, float64(idle.Max)).checkedByHandler().describe(
			"end after this many idle seconds; default %d", idle.Default),
		"timeout_s": between(minTimeoutS, float64(l.TimeoutS.Max)).checkedByHandler().describe(
			"end this many seconds after start; default %d", l.TimeoutS.Max),
		"mounts":  d.mountsParam(),
		"egress":  d.egressParam(),
		"secrets": d.secretsParam(),
	})
	def := mcp.NewTool("start_session",
		mcp.WithDescription("Start an interactive program (shell, REPL) on a terminal or pipes in a fresh sandbox; drive it with send_input."),
		mcp.WithToolTitle("Start an interactive session"),
		annotations("Start an interactive session", false, true, false, false),
		withInput(in),
		withOutput[StartSessionResult](),
	)
	return Tool{Toolset: ToolsetExec, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args StartSessionArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		bctx, stopBuild := d.withBuildProgress(ctx, req)
		jr, rr, problem := d.sessionRequest(bctx, args)
		stopBuild()
		if problem != nil {
			return problem, nil
		}
		// The program a session starts is held to the block list as a
		// command line is (each line sent to it later is checked too).
		if problem := d.checkBlocked(ctx, jr.Command, nil, "session"); problem != nil {
			return problem, nil
		}
		rec, err := d.Jobs.Submit(ctx, jr)
		if err != nil {
			if rec != nil {
				return errorResult("session %s could not start: %s", rec.ID, cleanMessage(err.Error())), nil
			}
			return failure(err), nil
		}
		res := StartSessionResult{JobID: rec.ID}
		if rec.Status != record.StatusQueued {
			stop := func() {}
			if rr.Wait > 0 {
				stop = d.startProgress(ctx, req, rec.ID)
			}
			r, err := d.Jobs.Read(ctx, rec.ID, rr)
			stop()
			if err != nil {
				return failure(err), nil
			}
			res.Output, res.Lossy = output.ToText(r.Data)
			res.NextCursor, res.Matched = r.NextCursor, r.Matched
			rec = r.Job
		}
		res.Status, res.Reason, res.ExitCode, res.Error = rec.Status, rec.Reason, rec.ExitCode, rec.Error
		res.Session = sessionOf(rec)
		text := fmt.Sprintf("session %s", statusLine(rec)[len("job "):])
		if res.Output != "" {
			text += "\n" + res.Output
		}
		if !record.Finished(rec.Status) {
			text += fmt.Sprintf("\n(send_input with job_id %s to type; read_output to read more)", rec.ID)
		}
		return structured(res, text), nil
	}}
}

// sessionRequest validates start_session's arguments into a job request and
// the read of the initial output.
func (d Deps) sessionRequest(ctx context.Context, args StartSessionArgs) (job.Request, job.ReadRequest, *mcp.CallToolResult) {
	fail := func(format string, a ...any) (job.Request, job.ReadRequest, *mcp.CallToolResult) {
		return job.Request{}, job.ReadRequest{}, errorResult(format, a...)
	}
	name := args.Language
	if name == "" {
		name = lang.DefaultLanguage
	}
	language, image, problem := d.resolveLanguage(ctx, name)
	if problem != nil {
		return job.Request{}, job.ReadRequest{}, problem
	}
	mode := args.Mode
	switch mode {
	case "":
		mode = job.ModePTY
	case job.ModePTY, job.ModePipe:
	default:
		return fail("mode %q is not one of pty, pipe", truncate(mode, 16))
	}
	rows, cols := defaultRows, defaultCols
	if args.Rows != nil {
		rows = *args.Rows
	}
	if args.Cols != nil {
		cols = *args.Cols
	}
	if rows < terminal.MinRows || rows > terminal.MaxRows {
		return fail("rows %d is out of range: %d to %d", rows, terminal.MinRows, terminal.MaxRows)
	}
	if cols < terminal.MinCols || cols > terminal.MaxCols {
		return fail("cols %d is out of range: %d to %d", cols, terminal.MinCols, terminal.MaxCols)
	}
	if mode == job.ModePipe && (args.Rows != nil || args.Cols != nil) {
		return fail("rows and cols are for mode pty; a pipe session has no terminal")
	}
	var argv []string
	switch {
	case args.Command == "" && len(args.Args) > 0:
		return fail("args given without command: name the program they are for")
	case args.Command == "":
		pty, pipe := replOf(language)
		argv = pty
		if mode == job.ModePipe {
			argv = pipe
		}
	default:
		if err := checkText("command", args.Command, maxProgramBytes); err != nil {
			return fail("%v", err)
		}
		if strings.TrimSpace(args.Command) == "" {
			return fail("command is blank: name a program, or leave command out for the language's interactive program")
		}
		if len(args.Args) > maxArgs {
			return fail("args has %d entries; the limit is %d", len(args.Args), maxArgs)
		}
		total := 0
		for i, a := range args.Args {
			if err := checkText(fmt.Sprintf("args[%d]", i), a, maxCommandBytes); err != nil {
				return fail("%v", err)
			}
			total += len(a)
		}
		if total > maxCommandBytes {
			return fail("args add up to %d bytes; the limit is %d", total, maxCommandBytes)
		}
		if len(args.Args) == 0 && strings.ContainsAny(strings.TrimSpace(args.Command), " \t\n") {
			argv = []string{"bash", "-c", args.Command}
		} else {
			argv = append([]string{args.Command}, args.Args...)
		}
	}
	if err := checkText("name", args.Name, maxNameBytes); err != nil {
		return fail("%v", err)
	}
	var wsName string
	if args.Workspace != "" {
		w, problem := d.workspaceFor(ctx, args.Workspace, args.Language)
		if problem != nil {
			return job.Request{}, job.ReadRequest{}, problem
		}
		language.Name, language.Base, image, wsName = w.Language, w.Language, w.Image, w.Name
	}
	if problem := noWorkspaceMounts(args.Mounts, wsName); problem != nil {
		return job.Request{}, job.ReadRequest{}, problem
	}
	if problem := noWorkspaceEgress(args.Egress, wsName); problem != nil {
		return job.Request{}, job.ReadRequest{}, problem
	}
	if problem := noWorkspaceSecrets(args.Secrets, wsName); problem != nil {
		return job.Request{}, job.ReadRequest{}, problem
	}
	network, allow, problem := d.egressFor(args.Egress)
	if problem != nil {
		return job.Request{}, job.ReadRequest{}, problem
	}
	secrets, problem := d.secretsFor(ctx, args.Secrets, args.Env)
	if problem != nil {
		return job.Request{}, job.ReadRequest{}, problem
	}
	mounts, problem := d.mountsFor(args.Mounts)
	if problem != nil {
		return job.Request{}, job.ReadRequest{}, problem
	}
	cwd, err := validateCwd(args.Cwd)
	if err != nil {
		return fail("%v", err)
	}
	env, err := validateEnv(args.Env)
	if err != nil {
		return fail("%v", err)
	}
	if _, ok := args.Env["TERM"]; !ok && mode == job.ModePTY {
		env = append(env, "TERM="+sessionTermValue)
	}
	timeoutS := args.TimeoutS
	if timeoutS == nil {
		// A session lives until it idles, ends or is killed: its timeout is the ceiling.
		most := float64(d.Policy.Limits.TimeoutS.Max)
		timeoutS = &most
	}
	limits, err := d.Policy.Resolve(policy.Request{TimeoutS: timeoutS})
	if err != nil {
		return job.Request{}, job.ReadRequest{}, failure(err)
	}
	idle, err := d.Policy.ResolveIdle(args.IdleTimeoutS)
	if err != nil {
		return job.Request{}, job.ReadRequest{}, failure(err)
	}
	waitS := args.WaitS
	if waitS == nil {
		def := sessionWaitS
		waitS = &def
	}
	wait, err := d.Policy.ResolveWait(waitS)
	if err != nil {
		return job.Request{}, job.ReadRequest{}, failure(err)
	}
	rr := job.ReadRequest{Stream: output.Both, MaxBytes: defaultReadBytes, Wait: wait, StripANSI: true, Settle: sessionSettle}
	if args.Until != "" {
		if len(args.Until) > maxUntilLen {
			return fail("until is %d bytes; the limit is %d", len(args.Until), maxUntilLen)
		}
		re, err := regexp.Compile(args.Until)
		if err != nil {
			return fail("until is not a valid regular expression: %v", err)
		}
		rr.Until = re
	}
	details := &record.SessionDetails{Mode: mode, Name: args.Name, IdleTimeoutMS: idle.Milliseconds()}
	var tty *sandbox.TTY
	if mode == job.ModePTY {
		details.Rows, details.Cols = rows, cols
		tty = &sandbox.TTY{Rows: uint16(rows), Cols: uint16(cols)}
	}
	return job.Request{
		Kind: job.KindSession, Command: commandLine(argv), Cmd: argv,
		Language: language.Name, Image: image, Runtime: language.Runtime, Workspace: wsName, Cwd: cwd, Env: env,
		KeepStdinOpen: true, Limits: limits, Network: network, Egress: allow, Secrets: secrets,
		TTY: tty, Details: record.Details{Session: details}, Mounts: mounts,
		Figures: capturesFigures(language.Base),
	}, rr, nil
}

// commandLine shows an argv as a shell would read it.
func commandLine(argv []string) string {
	if len(argv) == 3 && argv[0] == "bash" && argv[1] == "-c" {
		return argv[2]
	}
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;&|<>()*?[]{}~!#") {
			parts[i] = a
			continue
		}
		parts[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(parts, " ")
}

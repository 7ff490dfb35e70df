package tools

import (
	"context"
	"strings"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/sandboxer/sandboxer/internal/record"
)

// KillJobArgs are kill_job's arguments.
type KillJobArgs struct {
	JobID  string   `json:"job_id" jsonschema:"job id"`
	Signal string   `json:"signal,omitempty"`
	GraceS *float64 `json:"grace_s,omitempty"`
}

// killSignalNames are the signals kill_job sends, the default first.
var killSignalNames = []string{"TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "KILL"}

var killSignals = map[string]bool{"TERM": true, "INT": true, "HUP": true, "QUIT": true, "USR1": true, "USR2": true, "KILL": true}

const (
	defaultGraceS = 5
	maxGraceS     = 60
)

func KillJob(d Deps) Tool {
	in := inputSchema[KillJobArgs](map[string]param{
		// The handler also takes lower case and a SIG prefix (sigterm).
		"signal": oneOf(killSignalNames...).checkedByHandler().describe(
			"signal sent first; default TERM"),
		"grace_s": between(0, maxGraceS).describe(
			"seconds before the sandbox is removed; default %d", defaultGraceS),
	})
	def := mcp.NewTool("kill_job",
		mcp.WithDescription("Stop a job: a signal (TERM), then after grace_s its sandbox is removed with every process."),
		mcp.WithToolTitle("Kill a job"),
		annotations("Kill a job", false, true, true, false),
		withInput(in),
		withOutput[JobRecord](withoutFields()),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args KillJobArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if err := validateJobID(args.JobID); err != nil {
			return errorResult("%v", err), nil
		}
		sig := strings.TrimPrefix(strings.ToUpper(args.Signal), "SIG")
		if sig == "" {
			sig = "TERM"
		}
		if !killSignals[sig] {
			return errorResult("signal %q is not one of TERM, INT, HUP, QUIT, USR1, USR2, KILL", truncate(args.Signal, 16)), nil
		}
		grace := float64(defaultGraceS)
		if args.GraceS != nil {
			grace = *args.GraceS
		}
		if !(grace >= 0 && grace <= maxGraceS) {
			return errorResult("grace_s %s is out of range: 0 to %d", num(grace), maxGraceS), nil
		}
		rec, err := d.Jobs.Kill(ctx, args.JobID, sig, time.Duration(grace*float64(time.Second)), record.ReasonRequested)
		if err != nil {
			return failure(err), nil
		}
		return structured(RecordOf(rec), statusLine(rec)), nil
	}}
}

package tools

import (
	"context"
	"fmt"
	"regexp"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/policy"
)

const (
	defaultReadBytes = 64 << 10
	maxReadBytes     = 1 << 20
	maxTailLines     = 10000
	maxUntilLen      = 1024
)

// ReadOutputArgs are read_output's arguments.
type ReadOutputArgs struct {
	JobID     string   `json:"job_id" jsonschema:"job id"`
	Cursor    *int64   `json:"cursor,omitempty"`
	TailLines int      `json:"tail_lines,omitempty"`
	Stream    string   `json:"stream,omitempty"`
	WaitS     *float64 `json:"wait_s,omitempty"`
	Until     string   `json:"until,omitempty" jsonschema:"RE2 regex: wait until the output matches"`
	MaxBytes  int      `json:"max_bytes,omitempty"`
	StripANSI *bool    `json:"strip_ansi,omitempty" jsonschema:"strip escape sequences; default true"`
	Screen    bool     `json:"screen,omitempty" jsonschema:"pty sessions: return the rendered screen instead of the stream"`
}

// ReadOutputResult is read_output's (and send_input's) result.
type ReadOutputResult struct {
	JobID      string `json:"job_id" jsonschema:"the job's id"`
	Output     string `json:"output" jsonschema:"the output read, as text"`
	Stream     string `json:"stream" jsonschema:"the stream read: both, stdout or stderr"`
	Cursor     int64  `json:"cursor" jsonschema:"byte offset where output starts"`
	NextCursor int64  `json:"next_cursor" jsonschema:"pass as cursor to continue after this output"`
	HasMore    bool   `json:"has_more" jsonschema:"more output is already stored past next_cursor"`
	Dropped    int64  `json:"dropped_bytes" jsonschema:"bytes of this stream past the per-job cap, counted but not stored"`
	Matched    bool   `json:"matched" jsonschema:"until matched"`
	Lossy      bool   `json:"lossy,omitempty" jsonschema:"output held invalid UTF-8 or NUL bytes, replaced"`
	Status     string `json:"status" jsonschema:"the job's status: queued, running, completed, failed, timed_out or killed"`
	Reason     string `json:"reason,omitempty" jsonschema:"why it ended"`
	ExitCode   *int   `json:"exit_code,omitempty" jsonschema:"exit code, once it ended"`
	// Written is set by send_input: the bytes of input the job took.
	Written *int `json:"bytes_written,omitempty" jsonschema:"send_input only: bytes of the input written to the job's stdin"`
	// Screen is set by read_output with screen: true.
	Screen *ScreenResult `json:"screen,omitempty" jsonschema:"with screen: true, the terminal's screen (output then holds its lines as text)"`
}

// ScreenResult is a terminal's screen.
type ScreenResult struct {
	Rows      int      `json:"rows" jsonschema:"terminal rows"`
	Cols      int      `json:"cols" jsonschema:"terminal columns"`
	Lines     []string `json:"lines" jsonschema:"the screen's rows, top to bottom (always rows of them), trailing blanks removed"`
	CursorRow int      `json:"cursor_row" jsonschema:"the cursor's row, from 0"`
	CursorCol int      `json:"cursor_col" jsonschema:"the cursor's column, from 0"`
	AltScreen bool     `json:"alt_screen" jsonschema:"a full-screen program (top, vim, less) is showing its own screen"`
}

// readArgs are the reading arguments shared by read_output and send_input.
type readArgs struct {
	cursor    *int64
	tailLines int
	stream    string
	waitS     *float64
	until     string
	maxBytes  int
	stripANSI *bool
}

func (d Deps) readRequest(a readArgs) (job.ReadRequest, error) {
	stream := a.stream
	if stream == "" {
		stream = "both"
	}
	sel, err := output.ParseSelector(stream)
	if err != nil {
		return job.ReadRequest{}, fmt.Errorf("stream %q is not one of both, stdout, stderr", truncate(stream, 16))
	}
	if a.cursor != nil && *a.cursor < 0 {
		return job.ReadRequest{}, fmt.Errorf("cursor must be >= 0, got %d", *a.cursor)
	}
	if a.tailLines < 0 || a.tailLines > maxTailLines {
		return job.ReadRequest{}, fmt.Errorf("tail_lines must be between 1 and %d, got %d", maxTailLines, a.tailLines)
	}
	if a.tailLines > 0 && a.cursor != nil {
		return job.ReadRequest{}, fmt.Errorf("give cursor or tail_lines, not both")
	}
	maxBytes := a.maxBytes
	if maxBytes == 0 {
		maxBytes = defaultReadBytes
	}
	if maxBytes < 1 || maxBytes > maxReadBytes {
		return job.ReadRequest{}, fmt.Errorf("max_bytes must be between 1 and %d, got %d", maxReadBytes, a.maxBytes)
	}
	wait, err := d.Policy.ResolveWait(orZero(a.waitS))
	if err != nil {
		return job.ReadRequest{}, err
	}
	req := job.ReadRequest{Stream: sel, Cursor: a.cursor, TailLines: a.tailLines, MaxBytes: maxBytes, Wait: wait, StripANSI: true}
	if a.stripANSI != nil {
		req.StripANSI = *a.stripANSI
	}
	if a.until != "" {
		if len(a.until) > maxUntilLen {
			return job.ReadRequest{}, fmt.Errorf("until is %d bytes; the limit is %d", len(a.until), maxUntilLen)
		}
		re, err := regexp.Compile(a.until)
		if err != nil {
			return job.ReadRequest{}, fmt.Errorf("until is not a valid regular expression: %v", err)
		}
		req.Until = re
	}
	return req, nil
}

func (d Deps) readResult(r *job.ReadResult, stream string) (ReadOutputResult, string) {
	if stream == "" {
		stream = "both"
	}
	text, lossy := output.ToText(r.Data)
	rec := r.Job
	res := ReadOutputResult{
		JobID: rec.ID, Output: text, Stream: stream, Cursor: r.Start, NextCursor: r.NextCursor,
		HasMore: r.HasMore, Dropped: r.Dropped, Matched: r.Matched, Lossy: lossy,
		Status: rec.Status, Reason: rec.Reason, ExitCode: rec.ExitCode,
	}
	summary := fmt.Sprintf("%s [bytes %d-%d", statusLine(rec), r.Start, r.NextCursor)
	if r.HasMore {
		summary += ", more stored"
	}
	if r.Matched {
		summary += ", until matched"
	}
	summary += "]"
	if text != "" {
		summary += "\n" + text
	}
	return res, summary
}

// readParams are the schema refinements of the reading arguments.
func readParams(pol *policy.Policy, waitWhat string, defaultWait float64) map[string]param {
	return map[string]param{
		"cursor": atLeast(0).describe("a next_cursor to read from; default: what is new since the last read"),
		"tail_lines": between(1, maxTailLines).describe(
			"the last N lines instead of a cursor"),
		"stream": oneOf("both", "stdout", "stderr").describe("default both (interleaved)"),
		"wait_s": waitParam(pol, waitWhat, defaultWait),
		"max_bytes": between(1, maxReadBytes).describe(
			"default %d", defaultReadBytes),
	}
}

func ReadOutput(d Deps) Tool {
	in := inputSchema[ReadOutputArgs](readParams(d.policyOrDefault(),
		"seconds to wait for new output (or until)", 0))
	def := mcp.NewTool("read_output",
		mcp.WithDescription("Read a job's output: new since the last read, from a cursor or the last lines; may wait for more or for a regex."),
		mcp.WithToolTitle("Read a job's output"),
		annotations("Read a job's output", true, false, false, false),
		withInput(in),
		withOutput[ReadOutputResult](),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ReadOutputArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if err := validateJobID(args.JobID); err != nil {
			return errorResult("%v", err), nil
		}
		rr, err := d.readRequest(readArgs{args.Cursor, args.TailLines, args.Stream, args.WaitS, args.Until, args.MaxBytes, args.StripANSI})
		if err != nil {
			return failure(err), nil
		}
		if args.Screen {
			if args.Cursor != nil || args.TailLines > 0 || (args.Stream != "" && args.Stream != "both") {
				return errorResult("screen shows the whole terminal: cursor, tail_lines and stream do not apply with it"), nil
			}
			return d.readScreen(ctx, req, args.JobID, rr)
		}
		return d.read(ctx, req, args.JobID, rr, args.Stream)
	}}
}

func (d Deps) read(ctx context.Context, req mcp.CallToolRequest, id string, rr job.ReadRequest, stream string) (*mcp.CallToolResult, error) {
	res, text, err := d.readOutput(ctx, req, id, rr, stream)
	if err != nil {
		return failure(err), nil
	}
	return d.withNewFigures(ctx, structured(res, text), id), nil
}

func (d Deps) readOutput(ctx context.Context, req mcp.CallToolRequest, id string, rr job.ReadRequest, stream string) (ReadOutputResult, string, error) {
	var stop func() = func() {}
	if rr.Wait > 0 {
		stop = d.startProgress(ctx, req, id)
	}
	r, err := d.Jobs.Read(ctx, id, rr)
	stop()
	if err != nil {
		return ReadOutputResult{}, "", err
	}
	res, text := d.readResult(r, stream)
	return res, text, nil
}

// readScreen waits as rr says (for new output, or until it matches), then
// returns the terminal's screen.
func (d Deps) readScreen(ctx context.Context, req mcp.CallToolRequest, id string, rr job.ReadRequest) (*mcp.CallToolResult, error) {
	rec, err := d.Jobs.Get(ctx, id)
	if err != nil {
		return failure(err), nil
	}
	if rec.Kind != job.KindSession || rec.Details.Session == nil || rec.Details.Session.Mode != job.ModePTY {
		return errorResult("job %s has no terminal (it is not a pty session), so it has no screen: read its output without screen", id), nil
	}
	res, _, err := d.readOutput(ctx, req, id, rr, "both")
	if err != nil {
		return failure(err), nil
	}
	scr, rec, err := d.Jobs.Screen(ctx, id)
	if err != nil {
		return failure(err), nil
	}
	res.Status, res.Reason, res.ExitCode = rec.Status, rec.Reason, rec.ExitCode
	res.Output, res.Lossy = output.ToText([]byte(scr.Text()))
	res.Screen = &ScreenResult{Rows: scr.Rows, Cols: scr.Cols, Lines: scr.Lines, CursorRow: scr.CursorRow, CursorCol: scr.CursorCol, AltScreen: scr.AltScreen}
	return d.withNewFigures(ctx, structured(res, fmt.Sprintf("%s, screen %d x %d\n%s", statusLine(rec), scr.Rows, scr.Cols, res.Output)), id), nil
}

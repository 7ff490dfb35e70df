package tools

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/job"
)

// inputWriteSlack is how long past wait_s a write to a job's stdin may take
// at most; then send_input returns what was written.
const inputWriteSlack = 500 * time.Millisecond

// SendInputArgs are send_input's arguments.
type SendInputArgs struct {
	JobID     string   `json:"job_id" jsonschema:"job id"`
	Text      string   `json:"text,omitempty" jsonschema:"text to write"`
	Keys      []string `json:"keys,omitempty"`
	Enter     bool     `json:"enter,omitempty" jsonschema:"press Enter after text and keys"`
	EOF       bool     `json:"eof,omitempty" jsonschema:"close stdin after writing"`
	Read      *bool    `json:"read,omitempty" jsonschema:"read the answer; default true"`
	WaitS     *float64 `json:"wait_s,omitempty"`
	Until     string   `json:"until,omitempty" jsonschema:"RE2 regex: wait until the answer matches"`
	SettleMS  *int     `json:"settle_ms,omitempty"`
	MaxBytes  int      `json:"max_bytes,omitempty"`
	StripANSI *bool    `json:"strip_ansi,omitempty" jsonschema:"strip escape sequences; default true"`
}

// sendInputWaitS is how long send_input waits for an answer by default.
const sendInputWaitS = 1.0

func SendInput(d Deps) Tool {
	params := readParams(d.policyOrDefault(), "seconds to wait for an answer", sendInputWaitS)
	in := inputSchema[SendInputArgs](map[string]param{
		"wait_s":    params["wait_s"],
		"max_bytes": params["max_bytes"],
		"keys": oneOf(keyNames...).checkedByHandler().describe(
			"keys typed after text, in order"),
		"settle_ms": between(0, maxSettleMS).describe(
			"return once output is quiet this long; default %d for sessions, else 0", sessionSettle.Milliseconds()),
	})
	def := mcp.NewTool("send_input",
		mcp.WithDescription("Type text and keys (ctrl_c, up, tab…) into a session or a job's stdin; returns the answer as read_output."),
		mcp.WithToolTitle("Send input to a job"),
		annotations("Send input to a job", false, false, false, false),
		withInput(in),
		withOutput[ReadOutputResult](),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args SendInputArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if err := validateJobID(args.JobID); err != nil {
			return errorResult("%v", err), nil
		}
		if len(args.Text) > maxStdinBytes {
			return errorResult("text is %d bytes; the limit is %d", len(args.Text), maxStdinBytes), nil
		}
		keys, err := encodeKeys(args.Keys)
		if err != nil {
			return errorResult("%v", err), nil
		}
		if args.Text == "" && len(keys) == 0 && !args.Enter && !args.EOF {
			return errorResult("nothing to send: give text, keys, enter or eof"), nil
		}
		rec, err := d.Jobs.Get(ctx, args.JobID)
		if err != nil {
			return failure(err), nil
		}
		pty := rec.Details.Session != nil && rec.Details.Session.Mode == job.ModePTY
		if problem := d.checkInput(ctx, args.Text); problem != nil {
			return problem, nil
		}
		wait := args.WaitS
		if wait == nil {
			one := sendInputWaitS
			wait = &one
		}
		rr, err := d.readRequest(readArgs{nil, 0, "both", wait, args.Until, args.MaxBytes, args.StripANSI})
		if err != nil {
			return failure(err), nil
		}
		if rec.Kind == job.KindSession {
			rr.Settle = sessionSettle
		}
		if args.SettleMS != nil {
			rr.Settle = time.Duration(*args.SettleMS) * time.Millisecond
		}
		data := args.Text + string(keys)
		if args.Enter {
			if pty {
				data += "\r"
			} else {
				data += "\n"
			}
		}
		if len(data) > maxStdinBytes {
			return errorResult("text and keys are %d bytes; the limit is %d", len(data), maxStdinBytes), nil
		}
		// The whole call, writing included, ends within wait_s: a job that
		// does not read its stdin cannot hold it.
		start := time.Now()
		writeCtx, cancel := context.WithTimeout(ctx, rr.Wait+inputWriteSlack)
		n, err := d.Jobs.SendInput(writeCtx, args.JobID, []byte(data), args.EOF)
		cancel()
		stalled := errors.Is(err, job.ErrInputStalled)
		if err != nil && !stalled {
			return failure(err), nil
		}
		var res ReadOutputResult
		var text string
		if args.Read != nil && !*args.Read || stalled {
			rec, err := d.Jobs.Get(ctx, args.JobID)
			if err != nil {
				return failure(err), nil
			}
			res = ReadOutputResult{JobID: rec.ID, Stream: "both", Status: rec.Status, Reason: rec.Reason, ExitCode: rec.ExitCode}
			text = fmt.Sprintf("sent %d bytes to job %s", n, rec.ID)
		} else {
			rr.Wait = max(0, rr.Wait-time.Since(start))
			if res, text, err = d.readOutput(ctx, req, args.JobID, rr, "both"); err != nil {
				return failure(err), nil
			}
		}
		res.Written = &n
		if stalled {
			text = fmt.Sprintf("%v; %d bytes are unsent: read its output, then send the rest", err, len(data)-n)
		}
		return d.withNewFigures(ctx, structured(res, text), args.JobID), nil
	}}
}

package tools

import (
	"context"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"
)

// SendInputArgs are send_input's arguments.
type SendInputArgs struct {
	JobID     string   `json:"job_id" jsonschema:"the job's id (a uuid from run_command or list_jobs)"`
	Text      string   `json:"text,omitempty" jsonschema:"text written to the job's stdin (at most 1 MiB)"`
	Enter     bool     `json:"enter,omitempty" jsonschema:"append a newline; default false"`
	EOF       bool     `json:"eof,omitempty" jsonschema:"close stdin after writing (end of input); default false"`
	Read      *bool    `json:"read,omitempty" jsonschema:"read what the job answers afterwards, as read_output does; default true"`
	WaitS     *float64 `json:"wait_s,omitempty"`
	Until     string   `json:"until,omitempty" jsonschema:"regular expression (RE2, at most 1024 bytes): wait until the answer matches it"`
	MaxBytes  int      `json:"max_bytes,omitempty"`
	StripANSI *bool    `json:"strip_ansi,omitempty" jsonschema:"remove terminal escape sequences and control characters from the answer; default true"`
}

// sendInputWaitS is how long send_input waits for an answer by default.
const sendInputWaitS = 1.0

func SendInput(d Deps) Tool {
	params := readParams(d.policyOrDefault(), "wait up to this many seconds for the answer, returning as soon as there is some", sendInputWaitS)
	in := inputSchema[SendInputArgs](map[string]param{"wait_s": params["wait_s"], "max_bytes": params["max_bytes"]})
	def := mcp.NewTool("send_input",
		mcp.WithDescription("Write text to a running job's stdin (jobs started with background or keep_stdin_open), optionally close it (eof), then read what the job answers, as read_output does."),
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
		if args.Text == "" && !args.Enter && !args.EOF {
			return errorResult("nothing to send: give text, enter or eof"), nil
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
		data := args.Text
		if args.Enter {
			data += "\n"
		}
		if err := d.Jobs.SendInput(ctx, args.JobID, []byte(data), args.EOF); err != nil {
			return failure(err), nil
		}
		if args.Read != nil && !*args.Read {
			rec, err := d.Jobs.Get(ctx, args.JobID)
			if err != nil {
				return failure(err), nil
			}
			return structured(ReadOutputResult{JobID: rec.ID, Stream: "both", Status: rec.Status, Reason: rec.Reason, ExitCode: rec.ExitCode},
				fmt.Sprintf("sent %d bytes to job %s", len(data), rec.ID)), nil
		}
		return d.read(ctx, req, args.JobID, rr, "both")
	}}
}

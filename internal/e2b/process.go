package e2b

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"github.com/sandboxer/sandboxer/internal/e2b/envd/process"
	"github.com/sandboxer/sandboxer/internal/e2b/envd/process/processconnect"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/record"
)

// readChunk is the most output one data event carries.
const readChunk = 64 << 10

// processService is envd's Process service: a process is a job of
// run_command in the sandbox's workspace, its pid a number of the sandbox.
type processService struct {
	processconnect.UnimplementedProcessHandler
	s *Server
}

// Start runs a process and streams its events: start, its output as it
// comes (stdout and stderr apart), its end.
func (p *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	sb := sandboxOf(ctx)
	pc := req.Msg.GetProcess()
	if pc == nil || pc.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("process.cmd is required"))
	}
	if req.Msg.Pty != nil {
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("PTY processes are not served by sandboxer's E2B API yet: use commands.run"))
	}
	args := map[string]any{"workspace": sb.id, "command": commandLine(pc.GetCmd(), pc.GetArgs()), "background": true}
	if cwd := pc.GetCwd(); cwd != "" {
		rel, err := workspacePath(cwd)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("process.cwd: %w", err))
		}
		args["cwd"] = "/workspace/" + strings.TrimPrefix(rel, ".")
	}
	env := map[string]string{}
	for k, v := range sb.envs {
		env[k] = v
	}
	for k, v := range pc.GetEnvs() {
		env[k] = v
	}
	if len(env) > 0 {
		args["env"] = env
	}
	out, err := p.s.tool(ctx, "run_command", args)
	if err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	id, _ := out["job_id"].(string)
	if id == "" {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("run_command started no job"))
	}
	pid := sb.newPid(id)
	if err := stream.Send(&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}}); err != nil {
		return err
	}
	return p.follow(ctx, id, func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) })
}

// follow sends a job's output as data events, then its end.
func (p *processService) follow(ctx context.Context, id string, send func(*process.ProcessEvent) error) error {
	jobs := p.s.jobs
	var seen int64
	cursors := map[output.Selector]int64{}
	drain := func() error {
		for _, sel := range []output.Selector{output.StdoutOnly, output.StderrOnly} {
			for {
				from := cursors[sel]
				res, err := jobs.Read(ctx, id, job.ReadRequest{Stream: sel, Cursor: &from, MaxBytes: readChunk, Peek: true})
				if err != nil {
					return err
				}
				cursors[sel] = res.NextCursor
				if len(res.Data) == 0 {
					break
				}
				data := &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: res.Data}}
				if sel == output.StderrOnly {
					data.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: res.Data}
				}
				if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: data}}); err != nil {
					return err
				}
				if !res.HasMore {
					break
				}
			}
		}
		return nil
	}
	for {
		size, ended, err := jobs.WaitOutput(ctx, id, seen)
		if err != nil {
			return err
		}
		seen = size
		if err := drain(); err != nil {
			return err
		}
		if ended {
			break
		}
	}
	rec, err := jobs.Get(ctx, id)
	if err != nil {
		return err
	}
	end := &process.ProcessEvent_EndEvent{Exited: true, Status: rec.Status}
	if rec.ExitCode != nil {
		end.ExitCode = int32(*rec.ExitCode)
		end.Status = fmt.Sprintf("exit status %d", *rec.ExitCode)
	}
	if rec.Status != record.StatusCompleted && rec.Status != record.StatusFailed {
		msg := fmt.Sprintf("the job %s %s (%s)", id, rec.Status, rec.Reason)
		end.Error = &msg
	}
	return send(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}})
}

// newPid numbers a sandbox's process.
func (sb *sandbox) newPid(jobID string) uint32 {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.next++
	sb.pids[sb.next] = jobID
	return sb.next
}

// commandLine is the shell command line of a process: bash -c's script
// as it is, anything else quoted word by word.
func commandLine(cmd string, args []string) string {
	if (cmd == "/bin/bash" || cmd == "bash" || cmd == "/bin/sh" || cmd == "sh") && len(args) >= 2 && args[len(args)-2] == "-c" {
		return args[len(args)-1]
	}
	words := []string{shellQuote(cmd)}
	for _, a := range args {
		words = append(words, shellQuote(a))
	}
	return strings.Join(words, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

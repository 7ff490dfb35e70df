package e2b

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxer/sandboxer/images"
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
	pty := req.Msg.Pty != nil
	tool := "run_command"
	args := map[string]any{"workspace": sb.ID, "command": commandLine(pc.GetCmd(), pc.GetArgs()), "background": true}
	if req.Msg.GetStdin() {
		args["keep_stdin_open"] = true
	}
	if limit := p.s.commandLimit(ctx); limit > 0 {
		args["timeout_s"] = limit
	}
	if pty {
		// A terminal is a session (start_session, mode pty): a program on
		// PATH with its arguments, resized with resize_terminal.
		tool = "start_session"
		args = map[string]any{"workspace": sb.ID, "command": path.Base(pc.GetCmd()), "args": pc.GetArgs(), "mode": "pty", "wait_s": 0}
		if size := req.Msg.GetPty().GetSize(); size != nil && size.GetRows() > 0 && size.GetCols() > 0 {
			args["rows"], args["cols"] = int(size.GetRows()), int(size.GetCols())
		}
	}
	if cwd := pc.GetCwd(); cwd != "" {
		rel, err := workspacePath(cwd)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("process.cwd: %w", err))
		}
		args["cwd"] = "/workspace/" + strings.TrimPrefix(rel, ".")
	}
	// E2B's home is where its scripts' paths point: every built-in image
	// links it to /workspace (images.HomeUser).
	env := map[string]string{"HOME": images.HomeUser}
	for k, v := range sb.Envs {
		env[k] = v
	}
	for k, v := range pc.GetEnvs() {
		env[k] = v
	}
	args["env"] = env
	out, err := p.s.tool(ctx, tool, args)
	if err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	id, _ := out["job_id"].(string)
	if id == "" {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("%s started no job", tool))
	}
	pid := sb.newProc(&proc{job: id, tag: req.Msg.GetTag(), config: pc, pty: pty})
	if err := stream.Send(&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}}); err != nil {
		return err
	}
	return p.follow(ctx, id, pty, keepaliveOf(req.Header()), func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) })
}

// commandLimit is a command's time limit in seconds: what the client's
// deadline leaves (the SDK's timeoutMs, 60 s unless given, sent as
// Connect-Timeout-Ms), at most the policy's limits.timeout_s.max; that max
// without a deadline (timeoutMs 0); 0 (the policy's default) without a policy.
func (s *Server) commandLimit(ctx context.Context) float64 {
	most := 0.0
	if s.pol != nil {
		most = float64(s.pol.Limits.TimeoutS.Max)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return most
	}
	left := max(time.Until(dl).Seconds(), 0.1)
	if most > 0 && left > most {
		return most
	}
	return left
}

// keepaliveOf is how often a quiet stream sends a keepalive event: the
// SDK's Keepalive-Ping-Interval header, in seconds (at least 1, at most an
// hour); none without it.
func keepaliveOf(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(min(n, 3600)) * time.Second
}

// follow sends a job's output as data events (a terminal's as pty data),
// then its end.
func (p *processService) follow(ctx context.Context, id string, pty bool, keepalive time.Duration, send func(*process.ProcessEvent) error) error {
	jobs := p.s.jobs
	var seen int64
	cursors := map[output.Selector]int64{}
	streams := []output.Selector{output.StdoutOnly, output.StderrOnly}
	if pty {
		streams = []output.Selector{output.Both}
	}
	drain := func() error {
		for _, sel := range streams {
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
				switch {
				case pty:
					data.Output = &process.ProcessEvent_DataEvent_Pty{Pty: res.Data}
				case sel == output.StderrOnly:
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
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if keepalive > 0 {
			wctx, cancel = context.WithTimeout(ctx, keepalive)
		}
		size, ended, err := jobs.WaitOutput(wctx, id, seen)
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// Quiet for a while: a keepalive keeps proxies from closing the stream.
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			continue
		}
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

// running are a sandbox's processes whose jobs still run, by pid.
func (s *Server) running(ctx context.Context, sb *sandbox) map[uint32]*proc {
	sb.mu.Lock()
	all := maps.Clone(sb.procs)
	sb.mu.Unlock()
	for pid, pr := range all {
		if rec, err := s.jobs.Get(ctx, pr.job); err != nil || record.Finished(rec.Status) {
			delete(all, pid)
		}
	}
	return all
}

// newProc numbers a sandbox's process.
func (sb *running) newProc(p *proc) uint32 {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.next++
	sb.procs[sb.next] = p
	return sb.next
}

// selected is the process a selector names (by pid or tag), or an error
// the SDK reads as not found.
func (sb *running) selected(sel *process.ProcessSelector) (uint32, *proc, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if tag := sel.GetTag(); tag != "" {
		for pid, p := range sb.procs {
			if p.tag == tag {
				return pid, p, nil
			}
		}
		return 0, nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", tag))
	}
	if p, ok := sb.procs[sel.GetPid()]; ok {
		return sel.GetPid(), p, nil
	}
	return 0, nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", sel.GetPid()))
}

// List lists the sandbox's processes that still run.
func (p *processService) List(ctx context.Context, _ *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	res := &process.ListResponse{}
	for pid, pr := range p.s.running(ctx, sandboxOf(ctx)) {
		info := &process.ProcessInfo{Config: pr.config, Pid: pid}
		if pr.tag != "" {
			info.Tag = &pr.tag
		}
		res.Processes = append(res.Processes, info)
	}
	return connect.NewResponse(res), nil
}

// Connect streams a running process's events from now on.
func (p *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	pid, pr, err := sandboxOf(ctx).selected(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	if err := stream.Send(&process.ConnectResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}}); err != nil {
		return err
	}
	return p.follow(ctx, pr.job, pr.pty, keepaliveOf(req.Header()), func(ev *process.ProcessEvent) error { return stream.Send(&process.ConnectResponse{Event: ev}) })
}

// SendInput writes to a process's stdin (send_input).
func (p *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	_, pr, err := sandboxOf(ctx).selected(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.input(ctx, pr, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

// input writes stdin or terminal bytes to a process (send_input).
func (p *processService) input(ctx context.Context, pr *proc, in *process.ProcessInput) error {
	data := in.GetStdin()
	if pty := in.GetPty(); pty != nil {
		data = pty
	}
	if _, err := p.s.tool(ctx, "send_input", map[string]any{"job_id": pr.job, "text": string(data), "read": false}); err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return nil
}

// StreamInput writes a client stream's input to a process: its first
// message names the process, each data message is a send_input.
func (p *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	var pr *proc
	for stream.Receive() {
		msg := stream.Msg()
		switch {
		case msg.GetStart() != nil:
			var err error
			if _, pr, err = sandboxOf(ctx).selected(msg.GetStart().GetProcess()); err != nil {
				return nil, err
			}
		case msg.GetData() != nil:
			if pr == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the stream's first message must name the process (start)"))
			}
			if err := p.input(ctx, pr, msg.GetData().GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

// CloseStdin closes a process's stdin (send_input with eof).
func (p *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	_, pr, err := sandboxOf(ctx).selected(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if _, err := p.s.tool(ctx, "send_input", map[string]any{"job_id": pr.job, "eof": true, "read": false}); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

// Update resizes a terminal (resize_terminal).
func (p *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	_, pr, err := sandboxOf(ctx).selected(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	size := req.Msg.GetPty().GetSize()
	if !pr.pty || size == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("only a terminal (pty) process can be resized"))
	}
	if _, err := p.s.tool(ctx, "resize_terminal", map[string]any{"job_id": pr.job, "rows": int(size.GetRows()), "cols": int(size.GetCols())}); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// SendSignal signals a process (kill_job: SIGTERM with a grace, SIGKILL at once).
func (p *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	_, pr, err := sandboxOf(ctx).selected(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	args := map[string]any{"job_id": pr.job, "signal": "KILL"}
	if req.Msg.GetSignal() == process.Signal_SIGNAL_SIGTERM {
		args["signal"] = "TERM"
	}
	if _, err := p.s.tool(ctx, "kill_job", args); err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
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

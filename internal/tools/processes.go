package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/audit"
	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// ListProcessesArgs are list_processes' arguments.
type ListProcessesArgs struct {
	JobID string `json:"job_id,omitempty" jsonschema:"one running job; default all"`
}

// ProcessInfo is one process inside a sandbox.
type ProcessInfo struct {
	PID         int     `json:"pid" jsonschema:"the process id inside the sandbox (not the host's)"`
	PPID        int     `json:"ppid" jsonschema:"its parent's pid inside the sandbox"`
	User        string  `json:"user" jsonschema:"the user it runs as"`
	CPUPercent  float64 `json:"cpu_percent" jsonschema:"CPU time over its lifetime, percent of one core"`
	MemoryBytes int64   `json:"memory_bytes" jsonschema:"resident memory"`
	ElapsedS    int64   `json:"elapsed_s" jsonschema:"seconds since it started"`
	Command     string  `json:"command" jsonschema:"its command line"`
	Role        string  `json:"role" jsonschema:"init (the sandbox's pid 1), supervisor (the sandbox's own agent) or job (kill_process can signal these)"`
}

// JobProcesses are the processes of one job's sandbox.
type JobProcesses struct {
	JobID     string        `json:"job_id" jsonschema:"the job"`
	Processes []ProcessInfo `json:"processes" jsonschema:"its sandbox's processes, by pid"`
	Error     string        `json:"error,omitempty" jsonschema:"why they could not be listed"`
}

// ListProcessesResult is list_processes' result.
type ListProcessesResult struct {
	Jobs []JobProcesses `json:"jobs" jsonschema:"each running job asked about"`
}

// KillProcessArgs are kill_process' arguments.
type KillProcessArgs struct {
	JobID  string `json:"job_id" jsonschema:"running job id"`
	PID    int    `json:"pid" jsonschema:"pid as list_processes shows it"`
	Signal string `json:"signal,omitempty"`
}

// KillProcessResult is kill_process' result.
type KillProcessResult struct {
	JobID  string `json:"job_id" jsonschema:"the job"`
	PID    int    `json:"pid" jsonschema:"the process signalled"`
	Signal string `json:"signal" jsonschema:"the signal sent"`
}

var processSignalNames = []string{"TERM", "KILL", "INT", "HUP", "QUIT", "USR1", "USR2", "STOP", "CONT"}

const maxPID = 1 << 22

const (
	roleInit       = "init"
	roleSupervisor = "supervisor"
	roleJob        = "job"
)

// supervisorCommand is how the sandbox supervisor shows in ps.
const supervisorCommand = "/usr/local/bin/sandboxer-supervisor"

func processRole(p sandbox.Process) string {
	switch {
	case p.PID == 1 && strings.HasPrefix(p.Command, supervisorCommand):
		return roleSupervisor // no init (e.g. under gVisor): the supervisor is pid 1
	case p.PID == 1:
		return roleInit
	case strings.HasPrefix(p.Command, supervisorCommand):
		return roleSupervisor
	}
	return roleJob
}

// runningJob returns a job this server runs, with its container, or a tool
// error saying why not.
func (d Deps) runningJob(ctx context.Context, id string) (*record.Job, *mcp.CallToolResult) {
	if err := validateJobID(id); err != nil {
		return nil, errorResult("%v", err)
	}
	rec, err := d.Jobs.Get(ctx, id)
	if err != nil {
		return nil, failure(err)
	}
	if rec.Status != record.StatusRunning {
		return nil, errorResult("job %s is %s, not running: only a running job's sandbox has processes", id, rec.Status)
	}
	if rec.ServerID != d.Jobs.Server() {
		return nil, errorResult("job %s is run by another sandboxer server on this state directory; only that server can list or signal its processes", id)
	}
	if rec.ContainerID == "" {
		return nil, errorResult("job %s has no sandbox yet (it is starting); try again in a moment", id)
	}
	return rec, nil
}

func (d Deps) processes(ctx context.Context, rec *record.Job) JobProcesses {
	jp := JobProcesses{JobID: rec.ID, Processes: []ProcessInfo{}}
	if d.Processes == nil {
		jp.Error = d.lacks("process listing and signals")
		return jp
	}
	ps, err := d.Processes.Processes(ctx, rec.ContainerID)
	if err != nil {
		jp.Error = cleanMessage(err.Error())
		return jp
	}
	for _, p := range ps {
		jp.Processes = append(jp.Processes, ProcessInfo{PID: p.PID, PPID: p.PPID, User: p.User, CPUPercent: p.CPUPercent,
			MemoryBytes: p.RSSBytes, ElapsedS: p.ElapsedS, Command: truncate(p.Command, 1024), Role: processRole(p)})
	}
	return jp
}

func ListProcesses(d Deps) Tool {
	in := inputSchema[ListProcessesArgs](nil)
	def := mcp.NewTool("list_processes",
		mcp.WithDescription("Processes in one running job's sandbox, or in all of this server's."),
		mcp.WithToolTitle("List processes in sandboxes"),
		annotations("List processes in sandboxes", true, false, false, false),
		withInput(in),
		withOutput[ListProcessesResult](),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args ListProcessesArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		res := ListProcessesResult{Jobs: []JobProcesses{}}
		if args.JobID != "" {
			rec, problem := d.runningJob(ctx, args.JobID)
			if problem != nil {
				return problem, nil
			}
			res.Jobs = append(res.Jobs, d.processes(ctx, rec))
		} else {
			recs, _, err := d.Jobs.List(ctx, record.ListFilter{Status: []string{record.StatusRunning}, Limit: record.MaxListLimit})
			if err != nil {
				return failure(err), nil
			}
			for _, rec := range recs {
				if rec.ServerID == d.Jobs.Server() && rec.ContainerID != "" {
					res.Jobs = append(res.Jobs, d.processes(ctx, rec))
				}
			}
		}
		n := 0
		for _, j := range res.Jobs {
			n += len(j.Processes)
		}
		return structured(res, fmt.Sprintf("%d processes in %d running jobs", n, len(res.Jobs))), nil
	}}
}

func KillProcess(d Deps) Tool {
	in := inputSchema[KillProcessArgs](map[string]param{
		"pid":    between(1, maxPID),
		"signal": oneOf(processSignalNames...).checkedByHandler().describe("default TERM"),
	})
	def := mcp.NewTool("kill_process",
		mcp.WithDescription("Signal one process inside a running job's sandbox."),
		mcp.WithToolTitle("Signal a process in a sandbox"),
		annotations("Signal a process in a sandbox", false, true, false, false),
		withInput(in),
		withOutput[KillProcessResult](),
	)
	return Tool{Toolset: ToolsetJobs, Def: def, args: in, Handler: func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args KillProcessArgs
		if err := in.bind(req, &args); err != nil {
			return errorResult("%v", err), nil
		}
		sig := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(args.Signal)), "SIG")
		if sig == "" {
			sig = "TERM"
		}
		known := false
		for _, s := range processSignalNames {
			known = known || s == sig
		}
		if !known {
			return errorResult("signal %q is not one of %s", truncate(args.Signal, 32), strings.Join(processSignalNames, ", ")), nil
		}
		if args.PID < 1 || args.PID > maxPID {
			return errorResult("pid %d is not a process id (1 to %d)", args.PID, maxPID), nil
		}
		rec, problem := d.runningJob(ctx, args.JobID)
		if problem != nil {
			return problem, nil
		}
		audit.NoteJob(ctx, rec.ID)
		if d.Processes == nil {
			return errorResult("%s", d.lacks("process listing and signals")), nil
		}
		// The pid must be one of this sandbox's own: a host pid, or another
		// job's, is refused before anything is sent.
		ps, err := d.Processes.Processes(ctx, rec.ContainerID)
		if err != nil {
			return failure(err), nil
		}
		var target *sandbox.Process
		for i := range ps {
			if ps[i].PID == args.PID {
				target = &ps[i]
			}
		}
		if target == nil {
			return errorResult("pid %d is not a process in job %s's sandbox (pids are the sandbox's own: list_processes with this job_id shows them; host processes and other jobs' cannot be signalled)", args.PID, rec.ID), nil
		}
		switch processRole(*target) {
		case roleInit:
			return errorResult("pid 1 is the sandbox's init: it reaps orphaned processes and forwards signals, and the sandbox ends with it; use kill_job to end the job"), nil
		case roleSupervisor:
			return errorResult("pid %d is the sandbox supervisor: it relays the job's output and reports its exit code and usage, which would be lost; use kill_job to end the job", args.PID), nil
		}
		if err := d.Processes.KillProcess(ctx, rec.ContainerID, args.PID, sig); err != nil {
			if errors.Is(err, sandbox.ErrNoSuchProcess) {
				return errorResult("pid %d is no longer running in job %s's sandbox", args.PID, rec.ID), nil
			}
			return failure(err), nil
		}
		return structured(KillProcessResult{JobID: rec.ID, PID: args.PID, Signal: sig}, fmt.Sprintf("sent %s to pid %d in job %s", sig, args.PID, rec.ID)), nil
	}}
}

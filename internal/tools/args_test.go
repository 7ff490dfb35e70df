package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/record"
)

const someJob = "123e4567-e89b-12d3-a456-426614174000"

// refusalDeps are enough for calls that are refused before any job-manager
// use: no Jobs, no Runtime.
func refusalDeps() Deps {
	pol := policy.Default()
	return Deps{Policy: pol, Languages: lang.NewRegistry(pol.Image, nil)}
}

func toolByName(t *testing.T, d Deps, name string) Tool {
	t.Helper()
	for _, tool := range All(d) {
		if tool.Def.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s", name)
	return Tool{}
}

func call(t *testing.T, tool Tool, args any) *mcp.CallToolResult {
	t.Helper()
	var req mcp.CallToolRequest
	req.Params.Name = tool.Def.Name
	req.Params.Arguments = args
	res, err := tool.Handler(context.Background(), req)
	if err != nil {
		t.Fatalf("%s(%v): Go error %v; want a tool result", tool.Def.Name, args, err)
	}
	if res == nil {
		t.Fatalf("%s(%v): nil result", tool.Def.Name, args)
	}
	return res
}

func resultText(res *mcp.CallToolResult) string { return ResultText(res) }

// TestArgumentRefusals calls the handlers with arguments as agents get them
// wrong: each is a tool result with isError whose text is a sentence naming
// the argument, never a Go struct dump or a package prefix.
func TestArgumentRefusals(t *testing.T) {
	tests := []struct {
		tool string
		args any
		want []string // all must appear
		not  []string // none may appear
	}{
		// types
		{"run_command", map[string]any{"command": "echo", "timeout_s": "x"},
			[]string{"argument timeout_s must be a number, not the string \"x\""}, nil},
		{"run_command", map[string]any{"command": "echo", "background": "yes"},
			[]string{"argument background must be a boolean, not the string \"yes\""}, nil},
		{"run_command", map[string]any{"command": 5},
			[]string{"argument command must be a string, not the number 5"}, nil},
		{"run_command", map[string]any{"command": "echo", "env": []any{"A=1"}},
			[]string{"argument env must be an object", "not a list"}, nil},
		{"run_command", map[string]any{"command": "echo", "env": map[string]any{"PORT": 8080}},
			[]string{`env value of "PORT" must be a string, not the number 8080`}, nil},
		{"run_command", map[string]any{"command": "echo", "memory_mb": 256.5},
			[]string{"argument memory_mb must be a whole number, not 256.5"}, nil},
		{"list_jobs", map[string]any{"limit": "10"},
			[]string{"argument limit must be an integer", `not the string "10"`}, nil},
		{"list_jobs", map[string]any{"status": 3},
			[]string{"argument status must be a string or a list of strings, not the number 3"}, nil},
		{"list_jobs", map[string]any{"status": []any{"running", true}},
			[]string{"argument status must be a string or a list of strings, not true"}, nil},
		{"get_job", map[string]any{"job_id": 7},
			[]string{"argument job_id must be a string, not the number 7"}, nil},
		{"read_output", map[string]any{"job_id": someJob, "strip_ansi": "false"},
			[]string{"argument strip_ansi must be a boolean"}, nil},
		// required and unknown
		{"run_command", map[string]any{},
			[]string{"argument command is required (shell command line"}, nil},
		{"run_command", nil,
			[]string{"argument command is required"}, nil},
		{"get_job", map[string]any{"wait_s": 1},
			[]string{"argument job_id is required"}, nil},
		{"run_command", map[string]any{"command": "echo", "foo": 1},
			[]string{`argument "foo" is not known; known: command, language, workspace, cwd, env, stdin`}, nil},
		{"run_command", map[string]any{"command": "echo", "foo": 1, "bar": 2},
			[]string{`arguments "bar", "foo" are not known; known: command`}, nil},
		{"list_jobs", map[string]any{"workspace": "../w"},
			[]string{`workspace: workspace name "../w" is not valid`}, nil},
		{"list_jobs", map[string]any{"space": "w"},
			[]string{`argument "space" is not known; known: status, kind, workspace, limit, cursor`}, nil},
		{"create_workspace", map[string]any{"name": "Bad Name"},
			[]string{`workspaces are not available`}, nil},
		{"run_command", map[string]any{"command": "true", "workspace": "w"},
			[]string{`workspaces are not available`}, nil},
		{"list_languages", map[string]any{"verbose": true},
			[]string{`this tool takes no arguments; "verbose" given`}, nil},
		{"run_command", []any{"echo hi"},
			[]string{"the arguments must be an object of named arguments, not a list"}, nil},
		// several problems at once
		{"run_command", map[string]any{"timeout_s": "x", "foo": 1},
			[]string{`argument "foo" is not known`, "argument command is required", "argument timeout_s must be a number"}, nil},
		// ranges
		{"list_jobs", map[string]any{"limit": 0},
			[]string{"limit 0 is out of range: 1 to 500"}, nil},
		{"list_jobs", map[string]any{"limit": 501},
			[]string{"limit 501 is out of range: 1 to 500"}, nil},
		{"list_jobs", map[string]any{"status": "running", "limit": 0},
			[]string{"limit 0 is out of range"}, []string{"status"}},
		{"read_output", map[string]any{"job_id": someJob, "cursor": -1},
			[]string{"cursor -1 is out of range: it must be at least 0"}, nil},
		{"read_output", map[string]any{"job_id": someJob, "tail_lines": 20000},
			[]string{"tail_lines 20000 is out of range: 1 to 10000"}, nil},
		{"send_input", map[string]any{"job_id": someJob, "text": "x", "max_bytes": 0},
			[]string{"max_bytes 0 is out of range: 1 to 1048576"}, nil},
		{"kill_job", map[string]any{"job_id": someJob, "grace_s": 61},
			[]string{"grace_s 61 is out of range: 0 to 60"}, nil},
		{"prune_jobs", map[string]any{"older_than_s": -1},
			[]string{"older_than_s -1 is out of range: 0 to 315360000"}, nil},
		// ranges the policy checks, naming its ceiling and key
		{"run_command", map[string]any{"command": "echo", "memory_mb": 99999999},
			[]string{"memory_mb 99999999 is over the policy ceiling of 4096 (limits.memory_mb.max)"}, nil},
		{"run_command", map[string]any{"command": "echo", "timeout_s": -1},
			[]string{"timeout_s", "> 0"}, nil},
		{"get_job", map[string]any{"job_id": someJob, "wait_s": 100000},
			[]string{"wait_s 100000 is over the policy ceiling", "jobs.max_wait_s"}, nil},
		// enums
		{"kill_job", map[string]any{"job_id": someJob, "signal": "FOO"},
			[]string{`signal "FOO" is not one of TERM, INT, HUP, QUIT, USR1, USR2, KILL`}, nil},
		{"read_output", map[string]any{"job_id": someJob, "stream": "out"},
			[]string{`stream "out" is not one of both, stdout, stderr`}, nil},
		{"run_command", map[string]any{"command": "echo", "output": "all"},
			[]string{`output "all" is not one of both, stdout, stderr`}, nil},
		{"list_jobs", map[string]any{"kind": "shell"},
			[]string{`kind "shell" is not one of command, script, session`}, nil},
		{"list_jobs", map[string]any{"status": "done"},
			[]string{`status "done" is not one of queued, running, completed, failed, timed_out, killed`}, nil},
		{"list_jobs", map[string]any{"status": []any{"running", "done"}},
			[]string{`status "done" is not one of`}, nil},
		{"run_command", map[string]any{"command": "echo", "language": "cobol"},
			[]string{`unknown language "cobol"`, "python", "list_languages"}, nil},
		{"prune_jobs", map[string]any{"status": "running"},
			[]string{`status "running": only finished jobs can be pruned (kill_job first)`}, nil},
		{"prune_jobs", map[string]any{"status": []any{"failed", "bogus"}},
			[]string{`status "bogus" is not one of completed, failed, timed_out, killed`}, nil},
	}
	d := refusalDeps()
	for _, tt := range tests {
		name := fmt.Sprintf("%s %v", tt.tool, tt.args)
		t.Run(name, func(t *testing.T) {
			res := call(t, toolByName(t, d, tt.tool), tt.args)
			text := resultText(res)
			if !res.IsError {
				t.Fatalf("not a tool error: %s", text)
			}
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("error %q does not contain %q", text, w)
				}
			}
			for _, n := range append(tt.not, "&{", "Got:", "Want:", "json:", "store:", "input schema validation") {
				if strings.Contains(text, n) {
					t.Errorf("error %q contains %q", text, n)
				}
			}
		})
	}
}

// TestArgumentsAsAgentsWriteThem checks what bind accepts and how it
// normalises it, without running anything.
func TestArgumentsAsAgentsWriteThem(t *testing.T) {
	d := refusalDeps()
	tests := []struct {
		tool string
		args map[string]any
		want map[string]any // the normalised arguments
	}{
		{"list_jobs", map[string]any{"status": "running"}, map[string]any{"status": []any{"running"}}},
		{"list_jobs", map[string]any{"status": []any{"running", "queued"}, "limit": 5.0},
			map[string]any{"status": []any{"running", "queued"}, "limit": int64(5)}},
		{"prune_jobs", map[string]any{"status": "failed"}, map[string]any{"status": []any{"failed"}}},
		{"run_command", map[string]any{"command": "echo", "timeout_s": nil, "language": nil, "memory_mb": 512.0},
			map[string]any{"command": "echo", "memory_mb": int64(512)}},
		{"kill_job", map[string]any{"job_id": someJob, "signal": "sigkill"}, map[string]any{"job_id": someJob, "signal": "sigkill"}},
		{"list_languages", nil, map[string]any{}},
	}
	for _, tt := range tests {
		tool := toolByName(t, d, tt.tool)
		got, err := tool.args.check(tt.args)
		if err != nil {
			t.Errorf("%s %v: refused: %v", tt.tool, tt.args, err)
			continue
		}
		// Numbers other than integers stay json.Number: compare as JSON.
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(tt.want)
		if string(gj) != string(wj) {
			t.Errorf("%s %v: normalised to %s, want %s", tt.tool, tt.args, gj, wj)
		}
	}

	// Into the struct the handler uses.
	var la ListJobsArgs
	var req mcp.CallToolRequest
	req.Params.Arguments = map[string]any{"status": "running", "limit": 10}
	if err := toolByName(t, d, "list_jobs").args.bind(req, &la); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(la, ListJobsArgs{Status: []string{"running"}, Limit: 10}) {
		t.Errorf("list_jobs {status: running, limit: 10} bound to %+v", la)
	}
	var ra RunCommandArgs
	req.Params.Arguments = json.RawMessage(`{"command":"echo","timeout_s":1e2,"cpus":0.5,"pids":64.0,"stdin":null}`)
	if err := toolByName(t, d, "run_command").args.bind(req, &ra); err != nil {
		t.Fatal(err)
	}
	if ra.TimeoutS == nil || *ra.TimeoutS != 100 || *ra.CPUs != 0.5 || *ra.Pids != 64 || ra.Stdin != nil {
		t.Errorf("run_command bound to %+v", ra)
	}
}

// TestFailureText: errors from below reach the agent as sentences, without
// internal package prefixes.
func TestFailureText(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: malformed", record.ErrBadCursor), "cursor is not one list_jobs gave"},
		{fmt.Errorf("%w: x", record.ErrJobNotFound), "no such job: x: list_jobs shows the known ones"},
		{fmt.Errorf("%w: %q (create_workspace makes it; list_workspaces shows those that exist)", record.ErrWorkspaceNotFound, "w"), `no such workspace: "w" (create_workspace makes it`},
		{fmt.Errorf("%w %q: list_jobs shows the known ones", record.ErrJobNotFound, "x"), `no such job "x": list_jobs shows the known ones`},
		{fmt.Errorf("record job: %w", fmt.Errorf("store: create job x: %w", errors.New("disk full"))), "record job: create job x: disk full"},
		{errors.New("output: read /s/x: EOF"), "read /s/x: EOF"},
		{&policy.LimitError{Field: "cpus", Message: "cpus 9 is over the policy ceiling of 2 (limits.cpus.max)"}, "cpus 9 is over the policy ceiling of 2 (limits.cpus.max)"},
	}
	for err, want := range map[error]string{
		fmt.Errorf("%w: w", record.ErrWorkspaceNotFound): "no such workspace: w: list_workspaces shows those that exist",
		fmt.Errorf("%w: %q (create_workspace makes it; list_workspaces shows those that exist)", record.ErrWorkspaceNotFound, "w"): `no such workspace: "w" (create_workspace makes it; list_workspaces shows those that exist)`,
	} {
		if got := resultText(workspaceFailure(err)); got != want {
			t.Errorf("workspaceFailure(%v) = %q, want %q", err, got, want)
		}
	}
	for _, tt := range tests {
		res := failure(tt.err)
		if got := resultText(res); !res.IsError || !strings.HasPrefix(got, tt.want) {
			t.Errorf("failure(%v) = %q (isError %v), want %q", tt.err, got, res.IsError, tt.want)
		}
	}
}

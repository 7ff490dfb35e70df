package tools

import (
	"fmt"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
)

// JobRecord is a job as get_job and the job:// resource show it.
type JobRecord struct {
	JobID          string      `json:"job_id" jsonschema:"the job's id"`
	Kind           string      `json:"kind" jsonschema:"command, script or session"`
	Status         string      `json:"status" jsonschema:"queued, running, completed, failed, timed_out or killed"`
	Reason         string      `json:"reason,omitempty" jsonschema:"why it ended: exit_code, compile_error, oom_killed, start_error, lost, timeout, requested, cancelled, idle, server_shutdown"`
	ExitCode       *int        `json:"exit_code,omitempty" jsonschema:"exit code, once it ended"`
	Signal         string      `json:"signal,omitempty" jsonschema:"the signal that ended it, if one did"`
	Error          string      `json:"error,omitempty" jsonschema:"what went wrong starting or running the sandbox"`
	Command        string      `json:"command" jsonschema:"the command line"`
	Language       string      `json:"language" jsonschema:"the language it runs in"`
	Image          string      `json:"image" jsonschema:"the image it runs in"`
	Cwd            string      `json:"cwd" jsonschema:"its working directory"`
	EnvKeys        []string    `json:"env_keys,omitempty" jsonschema:"the environment variables it was given (values are not shown)"`
	StdinOpen      bool        `json:"stdin_open" jsonschema:"its stdin is open for send_input"`
	CreatedAt      string      `json:"created_at" jsonschema:"when it was submitted (RFC 3339, UTC)"`
	StartedAt      string      `json:"started_at,omitempty" jsonschema:"when its sandbox started"`
	EndedAt        string      `json:"ended_at,omitempty" jsonschema:"when it ended"`
	DurationMS     int64       `json:"duration_ms" jsonschema:"run time so far, or in all once it ended, in milliseconds"`
	QueuedMS       int64       `json:"queued_ms,omitempty" jsonschema:"ms it waited in the queue"`
	TimeoutMS      int64       `json:"timeout_ms" jsonschema:"its timeout in milliseconds"`
	MemoryBytes    int64       `json:"memory_bytes" jsonschema:"its memory limit in bytes"`
	CPUs           float64     `json:"cpus" jsonschema:"its CPU quota in cores"`
	Pids           int64       `json:"pids" jsonschema:"its limit of processes and threads"`
	StdoutBytes    int64       `json:"stdout_bytes" jsonschema:"bytes of standard output stored"`
	StderrBytes    int64       `json:"stderr_bytes" jsonschema:"bytes of standard error stored"`
	DroppedBytes   int64       `json:"dropped_bytes" jsonschema:"output bytes past the per-job cap, counted but not stored"`
	ContainerID    string      `json:"container_id,omitempty" jsonschema:"its sandbox container, while it has one"`
	OutputResource string      `json:"output_resource" jsonschema:"the resource URI of its output"`
	Usage          *Usage      `json:"usage,omitempty" jsonschema:"what its whole process tree used, once it ended"`
	Script         *ScriptInfo `json:"script,omitempty" jsonschema:"a script job's source, args, dependencies and language version"`
	Session        *Session    `json:"session,omitempty" jsonschema:"a session's terminal and idle deadline (sessions only)"`
}

// ScriptInfo is what a script job ran.
type ScriptInfo struct {
	Source          string   `json:"source" jsonschema:"the source (its first 16 KiB; job://{job_id}/source has all of it)"`
	SourceTruncated bool     `json:"source_truncated,omitempty" jsonschema:"the source is longer than shown"`
	SourceBytes     int      `json:"source_bytes" jsonschema:"the source's size in bytes"`
	SourceResource  string   `json:"source_resource" jsonschema:"the resource URI of the whole source"`
	Path            string   `json:"path,omitempty" jsonschema:"the workspace file it came from"`
	Args            []string `json:"args,omitempty" jsonschema:"the program's arguments"`
	Dependencies    []string `json:"dependencies,omitempty" jsonschema:"the packages it asked for"`
	LanguageVersion string   `json:"language_version,omitempty" jsonschema:"the interpreter or compiler that ran it"`
}

func scriptInfoOf(rec *record.Job) *ScriptInfo {
	sd := rec.Details.Script
	if sd == nil {
		return nil
	}
	src, cut := capText(sd.Source, maxSourceShown)
	return &ScriptInfo{Source: src, SourceTruncated: cut, SourceBytes: len(sd.Source), SourceResource: "job://" + rec.ID + "/source",
		Path: sd.Path, Args: sd.Args, Dependencies: sd.Dependencies, LanguageVersion: sd.Version}
}

// Session is what a session's record adds.
type Session struct {
	Mode         string  `json:"mode" jsonschema:"pty (a terminal) or pipe (plain stdin and stdout)"`
	Rows         int     `json:"rows,omitempty" jsonschema:"terminal rows (pty only)"`
	Cols         int     `json:"cols,omitempty" jsonschema:"terminal columns (pty only)"`
	Name         string  `json:"name,omitempty" jsonschema:"the name start_session was given"`
	IdleTimeoutS float64 `json:"idle_timeout_s" jsonschema:"the session ends (killed, reason idle) after this many seconds without input"`
	IdleDeadline string  `json:"idle_deadline,omitempty" jsonschema:"when it ends unless it gets input first (RFC 3339, UTC; while it runs)"`
}

// sessionOf presents a session's details; nil for other jobs.
func sessionOf(rec *record.Job) *Session {
	d := rec.Details.Session
	if d == nil {
		return nil
	}
	s := &Session{Mode: d.Mode, Rows: d.Rows, Cols: d.Cols, Name: d.Name, IdleTimeoutS: float64(d.IdleTimeoutMS) / 1000}
	if !record.Finished(rec.Status) {
		s.IdleDeadline = stamp(d.IdleDeadline)
	}
	return s
}

// Usage is what a job's whole process tree used.
type Usage struct {
	CPUMS           int64 `json:"cpu_ms" jsonschema:"user + system CPU time of every process of the job, in milliseconds"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes" jsonschema:"peak memory of the job's sandbox (all its processes), in bytes"`
	WallMS          int64 `json:"wall_ms" jsonschema:"from the job's start to its main process's end, in milliseconds"`
}

// usageOf presents a finished job's usage; nil while it runs or when unknown.
func usageOf(rec *record.Job) *Usage {
	u := rec.Usage
	if !record.Finished(rec.Status) || u == (record.Usage{}) {
		return nil
	}
	return &Usage{CPUMS: u.CPUMS, PeakMemoryBytes: u.PeakMemoryBytes, WallMS: u.WallMS}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// durationOf is run time so far, or in all once the job ended.
func durationOf(rec *record.Job) int64 {
	if rec.StartedAt.IsZero() {
		return 0
	}
	end := rec.EndedAt
	if end.IsZero() {
		end = time.Now()
	}
	return end.Sub(rec.StartedAt).Milliseconds()
}

// queuedOf is how long a job waited for a slot: so far while it is queued.
func queuedOf(rec *record.Job) int64 {
	if rec.Status == record.StatusQueued {
		return time.Since(rec.CreatedAt).Milliseconds()
	}
	return rec.QueuedMS
}

// RecordOf presents a job record.
func RecordOf(rec *record.Job) JobRecord {
	return JobRecord{
		JobID: rec.ID, Kind: rec.Kind, Status: rec.Status, Reason: rec.Reason, ExitCode: rec.ExitCode,
		Signal: rec.Signal, Error: rec.Error, Command: rec.Command, Language: rec.Language, Image: rec.Image,
		Cwd: rec.Cwd, EnvKeys: rec.Env, StdinOpen: rec.StdinOpen,
		CreatedAt: stamp(rec.CreatedAt), StartedAt: stamp(rec.StartedAt), EndedAt: stamp(rec.EndedAt),
		DurationMS: durationOf(rec), QueuedMS: queuedOf(rec), TimeoutMS: rec.Limits.TimeoutMS, MemoryBytes: rec.Limits.MemoryBytes,
		CPUs: float64(rec.Limits.NanoCPUs) / 1e9, Pids: rec.Limits.Pids,
		StdoutBytes: rec.StdoutBytes, StderrBytes: rec.StderrBytes, DroppedBytes: rec.DroppedBytes,
		ContainerID: rec.ContainerID, OutputResource: "job://" + rec.ID + "/output",
		Usage: usageOf(rec), Script: scriptInfoOf(rec), Session: sessionOf(rec),
	}
}

// statusLine is the one-line human summary of a job's state.
func statusLine(rec *record.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s %s", rec.ID, rec.Status)
	if rec.Reason != "" && rec.Reason != record.ReasonExitCode {
		fmt.Fprintf(&b, " (%s)", rec.Reason)
	}
	if rec.ExitCode != nil {
		fmt.Fprintf(&b, ", exit code %d", *rec.ExitCode)
	}
	if d := durationOf(rec); d > 0 {
		fmt.Fprintf(&b, ", %d ms", d)
	}
	if q := queuedOf(rec); q > 0 {
		if rec.Status == record.StatusQueued {
			fmt.Fprintf(&b, " for %d ms", q)
		} else {
			fmt.Fprintf(&b, " after %d ms in the queue", q)
		}
	}
	if u := usageOf(rec); u != nil {
		fmt.Fprintf(&b, ", cpu %d ms, peak memory %.1f MiB", u.CPUMS, float64(u.PeakMemoryBytes)/(1<<20))
	}
	if rec.Error != "" {
		fmt.Fprintf(&b, ": %s", rec.Error)
	}
	return b.String()
}

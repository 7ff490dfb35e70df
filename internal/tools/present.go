package tools

import (
	"fmt"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/job"
)

// JobRecord is a job as get_job and the job:// resource show it.
type JobRecord struct {
	JobID          string   `json:"job_id"`
	Kind           string   `json:"kind"`
	Status         string   `json:"status" jsonschema:"queued, running, completed, failed, timed_out or killed"`
	Reason         string   `json:"reason,omitempty" jsonschema:"why it ended: exit_code, oom_killed, start_error, lost, timeout, requested, cancelled, server_shutdown"`
	ExitCode       *int     `json:"exit_code,omitempty"`
	Signal         string   `json:"signal,omitempty"`
	Error          string   `json:"error,omitempty"`
	Command        string   `json:"command"`
	Language       string   `json:"language"`
	Image          string   `json:"image"`
	Workspace      string   `json:"workspace,omitempty"`
	Cwd            string   `json:"cwd"`
	EnvKeys        []string `json:"env_keys,omitempty"`
	StdinOpen      bool     `json:"stdin_open"`
	CreatedAt      string   `json:"created_at"`
	StartedAt      string   `json:"started_at,omitempty"`
	EndedAt        string   `json:"ended_at,omitempty"`
	DurationMS     int64    `json:"duration_ms"`
	TimeoutMS      int64    `json:"timeout_ms"`
	MemoryBytes    int64    `json:"memory_bytes"`
	CPUs           float64  `json:"cpus"`
	Pids           int64    `json:"pids"`
	StdoutBytes    int64    `json:"stdout_bytes"`
	StderrBytes    int64    `json:"stderr_bytes"`
	DroppedBytes   int64    `json:"dropped_bytes" jsonschema:"output bytes past the per-job cap, counted but not stored"`
	ContainerID    string   `json:"container_id,omitempty"`
	OutputResource string   `json:"output_resource"`
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// durationOf is run time so far, or in all once the job ended.
func durationOf(rec *job.Job) int64 {
	if rec.StartedAt.IsZero() {
		return 0
	}
	end := rec.EndedAt
	if end.IsZero() {
		end = time.Now()
	}
	return end.Sub(rec.StartedAt).Milliseconds()
}

// RecordOf presents a job record.
func RecordOf(rec *job.Job) JobRecord {
	return JobRecord{
		JobID: rec.ID, Kind: rec.Kind, Status: rec.Status, Reason: rec.Reason, ExitCode: rec.ExitCode,
		Signal: rec.Signal, Error: rec.Error, Command: rec.Command, Language: rec.Language, Image: rec.Image,
		Workspace: rec.Workspace, Cwd: rec.Cwd, EnvKeys: rec.Env, StdinOpen: rec.StdinOpen,
		CreatedAt: stamp(rec.CreatedAt), StartedAt: stamp(rec.StartedAt), EndedAt: stamp(rec.EndedAt),
		DurationMS: durationOf(rec), TimeoutMS: rec.Limits.TimeoutMS, MemoryBytes: rec.Limits.MemoryBytes,
		CPUs: float64(rec.Limits.NanoCPUs) / 1e9, Pids: rec.Limits.Pids,
		StdoutBytes: rec.StdoutBytes, StderrBytes: rec.StderrBytes, DroppedBytes: rec.DroppedBytes,
		ContainerID: rec.ContainerID, OutputResource: "job://" + rec.ID + "/output",
	}
}

// statusLine is the one-line human summary of a job's state.
func statusLine(rec *job.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s %s", rec.ID, rec.Status)
	if rec.Reason != "" && rec.Reason != job.ReasonExitCode {
		fmt.Fprintf(&b, " (%s)", rec.Reason)
	}
	if rec.ExitCode != nil {
		fmt.Fprintf(&b, ", exit code %d", *rec.ExitCode)
	}
	if d := durationOf(rec); d > 0 {
		fmt.Fprintf(&b, ", %d ms", d)
	}
	if rec.Error != "" {
		fmt.Fprintf(&b, ": %s", rec.Error)
	}
	return b.String()
}

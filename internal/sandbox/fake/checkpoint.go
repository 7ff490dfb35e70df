package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// The fake's checkpoints (sandbox.WorkspaceCheckpointer), as gVisor's
// behave through the engines: the image is a file in the directory it is
// given (mode 0600), holding each job's script, the statement it is at and
// its output so far. A checkpoint that stops the workspace ends its main
// process and freezes its jobs (the server holds them); a restore into the
// same container thaws them, and one into another container starts copies
// of them there, at the statement they were at, with their output, under
// the same keys.

var _ sandbox.WorkspaceCheckpointer = (*Runtime)(nil)

// imageFile is the image's one file.
const imageFile = "checkpoint.json"

// checkpointImage is what the fake's image holds.
type checkpointImage struct {
	Source string     `json:"source"` // the container it was taken from
	Jobs   []imageJob `json:"jobs"`
}

type imageJob struct {
	Key    string   `json:"key"`
	Script string   `json:"script"`
	At     int      `json:"at"`
	Env    []string `json:"env"`
	Stdout string   `json:"stdout"`
	Stderr string   `json:"stderr"`
	Stdin  bool     `json:"stdin"` // its stdin still open
}

// CheckpointRefusal: every fake runtime can be checkpointed.
func (r *Runtime) CheckpointRefusal(ctx context.Context, runtime string) string { return "" }

func (r *Runtime) CheckpointWorkspace(ctx context.Context, id, dir string, leaveRunning bool) error {
	c, err := r.existing(id)
	if err != nil {
		return err
	}
	if !c.isRunning() {
		return fmt.Errorf("container %.12s is not running: it cannot be checkpointed", id)
	}
	jobs := r.jobsOf(id)
	img := checkpointImage{Source: id}
	for _, j := range jobs {
		j.mu.Lock()
		ended := j.ended
		job := imageJob{Key: strings.TrimPrefix(j.info.ID, id+"/"), Script: j.script, At: j.pc, Env: j.env}
		for _, ch := range j.log {
			if ch.stream == sandbox.Stderr {
				job.Stderr += string(ch.data)
			} else {
				job.Stdout += string(ch.data)
			}
		}
		j.mu.Unlock()
		j.stdin.mu.Lock()
		job.Stdin = !j.stdin.eof
		j.stdin.mu.Unlock()
		if !ended {
			img.Jobs = append(img.Jobs, job)
		}
	}
	b, err := json.Marshal(img)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, imageFile), b, 0o600); err != nil {
		return err
	}
	if leaveRunning {
		return nil
	}
	for _, j := range jobs {
		j.freeze() // held: they go on if this container is restored
	}
	c.kill()
	<-c.exited
	return nil
}

func (r *Runtime) RestoreWorkspace(ctx context.Context, id, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, imageFile))
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	var img checkpointImage
	if err := json.Unmarshal(b, &img); err != nil {
		return fmt.Errorf("restore: the image is not one of the fake's: %w", err)
	}
	if c, err := r.existing(id); err != nil {
		return err
	} else if c.isRunning() {
		return fmt.Errorf("container %.12s is running: only a stopped one is restored", id)
	}
	held := map[string]*container{}
	for _, j := range r.jobsOf(id) {
		if j.frozen() {
			held[strings.TrimPrefix(j.info.ID, id+"/")] = j
		}
	}
	if err := r.startMain(id); err != nil {
		return err
	}
	for _, job := range img.Jobs {
		if j := held[job.Key]; j != nil && img.Source == id {
			j.thaw()
			delete(held, job.Key)
			continue
		}
		if err := r.copyJob(id, job); err != nil {
			return err
		}
	}
	for _, j := range held { // not in the image: gone with the checkpoint
		j.kill()
	}
	return nil
}

// jobsOf are the job containers of workspace id.
func (r *Runtime) jobsOf(id string) []*container {
	r.mu.Lock()
	defer r.mu.Unlock()
	var jobs []*container
	for jid, j := range r.containers {
		if strings.HasPrefix(jid, id+"/") && !strings.HasSuffix(jid, "/exec") {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// copyJob starts a job of an image in workspace id, where the image left
// it; a Runtime.Adopt of "<id>/<key>" follows it.
func (r *Runtime) copyJob(id string, job imageJob) error {
	r.mu.Lock()
	ws := r.containers[id]
	if ws == nil {
		r.mu.Unlock()
		return sandbox.ErrNotFound
	}
	r.seq++
	c := newContainer(r.Engine, sandbox.Container{ID: id + "/" + job.Key, Instance: r.instance, Server: r.server},
		sandbox.Spec{Cmd: []string{"bash", "-c", job.Script}, Env: job.Env, OpenStdin: job.Stdin}, r.seq)
	c.fs, c.image, c.network, c.reach = ws.fs, ws.image, ws.network, ws.reach
	c.resumeAt = job.At
	if job.Stdout != "" {
		c.log = append(c.log, chunk{sandbox.Stdout, []byte(job.Stdout)})
	}
	if job.Stderr != "" {
		c.log = append(c.log, chunk{sandbox.Stderr, []byte(job.Stderr)})
	}
	if r.containers[c.info.ID] != nil {
		r.mu.Unlock()
		return errors.New("restore: a job of that key runs there already")
	}
	r.containers[c.info.ID] = c
	r.mu.Unlock()
	c.start()
	return nil
}

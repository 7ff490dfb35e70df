package fake

import (
	"context"
	"fmt"
	"strings"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// warm is a fake sandbox made before its job: a created container that
// runs nothing until Launch gives it the job's script.
type warm struct {
	r        *Runtime
	c        *container
	prepared sandbox.Spec
}

var _ sandbox.Warmer = (*Runtime)(nil)

// Prepare makes a container of spec's shape that waits for its job.
func (r *Runtime) Prepare(ctx context.Context, spec sandbox.Spec) (sandbox.Warm, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	spec.Kind, spec.JobID = sandbox.KindPool, ""
	c, err := r.create(spec)
	if err != nil {
		return nil, err
	}
	return &warm{r: r, c: c, prepared: spec}, nil
}

func (w *warm) ContainerID() string { return w.c.info.ID }

func (w *warm) Ended() <-chan struct{} { return w.c.exited }

func (w *warm) Discard(ctx context.Context) error {
	_, err := w.r.remove(ctx, w.c.info.ID, false)
	return err
}

// Launch hands the container its job: the job's script, labels and stdin.
func (w *warm) Launch(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if spec.PoolKey() != w.prepared.PoolKey() {
		return nil, fmt.Errorf("warm sandbox %.12s has another shape than the job", w.c.info.ID)
	}
	r := w.r
	r.mu.Lock()
	switch {
	case r.down:
		r.mu.Unlock()
		return nil, engineDown()
	case r.containers[w.c.info.ID] != w.c:
		r.mu.Unlock()
		return nil, fmt.Errorf("warm sandbox %.12s is gone", w.c.info.ID)
	}
	c := w.c
	c.info.JobID, c.info.Kind = spec.JobID, spec.Kind
	c.prog, c.command, c.jobFiles, c.collect = parse(scriptOf(spec.Cmd)), strings.Join(spec.Cmd, " "), spec.Files, spec.Collect
	c.env = spec.Env
	if spec.OpenStdin {
		c.stdin = newPipe()
	}
	downCh := r.downCh
	r.mu.Unlock()
	return r.run(c, downCh, spec.OpenStdin, out), nil
}

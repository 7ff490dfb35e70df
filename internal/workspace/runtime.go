package workspace

import (
	"context"
	"sync"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Runtime is a sandbox.Runtime in front of the job runtime: specs naming a
// workspace run in that workspace's container, the rest go to the runtime
// behind it. Every entry point that turns a job request into a spec (with
// job.SandboxSpec) gets workspaces through it: a request's Workspace is
// all it takes.
type Runtime struct {
	sandbox.Runtime
	ws *Manager
}

// NewRuntime puts workspaces in front of next.
func NewRuntime(next sandbox.Runtime, ws *Manager) *Runtime {
	return &Runtime{Runtime: next, ws: ws}
}

// Start runs spec in its workspace, or in a fresh sandbox when it names none.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if spec.Workspace == "" {
		return r.Runtime.Start(ctx, spec, out)
	}
	w, release, err := r.ws.Acquire(ctx, spec.Workspace)
	if err != nil {
		return nil, err
	}
	inner, err := r.ws.rt.StartIn(ctx, w.ContainerID, spec, out)
	if err != nil {
		release()
		return nil, err
	}
	h := &handle{Handle: inner}
	s := r.ws.ws(spec.Workspace)
	r.ws.mu.Lock()
	s.jobs[h] = struct{}{}
	r.ws.mu.Unlock()
	go func() {
		<-inner.Done()
		r.ws.mu.Lock()
		delete(s.jobs, h)
		r.ws.mu.Unlock()
		release()
	}()
	return h, nil
}

// List leaves workspace containers out: they are no job's, and restart
// recovery must never sweep them.
func (r *Runtime) List(ctx context.Context) ([]sandbox.Container, error) {
	all, err := r.Runtime.List(ctx)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, c := range all {
		if c.Kind != sandbox.KindWorkspace {
			out = append(out, c)
		}
	}
	return out, nil
}

// Close stops the workspace loop, then closes the runtime behind.
func (r *Runtime) Close() error {
	r.ws.Close()
	return r.Runtime.Close()
}

// handle is a job in a workspace; the runtime may stop it on its own (disk quota).
type handle struct {
	sandbox.Handle
	mu                  sync.Mutex
	stopReason, stopWhy string
}

func (h *handle) stopFor(ctx context.Context, reason, why string) {
	h.mu.Lock()
	if h.stopReason == "" {
		h.stopReason, h.stopWhy = reason, why
	}
	h.mu.Unlock()
	_ = h.Handle.Destroy(ctx)
}

// Status adds why the runtime stopped the job, if it did.
func (h *handle) Status() sandbox.ExitStatus {
	st := h.Handle.Status()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopReason != "" {
		st.Stopped, st.StoppedWhy = h.stopReason, h.stopWhy
	}
	return st
}

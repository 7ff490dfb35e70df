package workspace

import (
	"context"
	"fmt"
	"sync"

	"github.com/sandboxer/sandboxer/internal/record"
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
	start := func(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
		return r.ws.rt.StartIn(ctx, w.ContainerID, spec, out)
	}
	var inner sandbox.Handle
	if d := w.Details; len(d.Egress) > 0 || len(d.Secrets) > 0 {
		// A workspace made with its own allowlist or secrets: each job holds
		// a grant of them for its life.
		if r.ws.Through == nil {
			release()
			return nil, fmt.Errorf("workspace %q was made with egress %v and secrets %v, but the egress proxy is not running (the policy's egress.allow is empty now): delete_workspace it and create it again without them", w.Name, d.Egress, secretNames(d.Secrets))
		}
		spec.Network, spec.Egress = sandbox.NetworkEgress, append([]string{}, d.Egress...) // none of the policy's beyond its own
		for _, u := range d.Secrets {
			spec.Secrets = append(spec.Secrets, sandbox.SecretUse{Name: u.Name, Placeholder: u.Placeholder})
		}
		inner, err = r.ws.Through(ctx, spec, out, start)
		if err != nil {
			err = fmt.Errorf("workspace %q: %w (the policy changed since it was made: delete_workspace it and create it again)", w.Name, err)
		}
	} else {
		inner, err = start(ctx, spec, out)
	}
	if err != nil {
		release()
		return nil, err
	}
	return r.track(w.ID, inner, release), nil
}

// secretNames names a workspace's secrets for a message.
func secretNames(uses []record.SecretUse) []string {
	names := make([]string, len(uses))
	for i, u := range uses {
		names[i] = u.Name
	}
	return names
}

// track counts a job of a workspace until it ends: the workspace is busy
// (never stopped for idleness) and its quota can stop the job.
func (r *Runtime) track(id string, inner sandbox.Handle, release func()) *handle {
	h := &handle{Handle: inner}
	s := r.ws.ws(id)
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
	return h
}

// Adopt takes over a job a previous server started; a workspace's job is
// counted as its workspace's again.
func (r *Runtime) Adopt(ctx context.Context, containerID string, skipStdout, skipStderr int64, out sandbox.Output) (sandbox.Handle, error) {
	inner, err := r.Runtime.Adopt(ctx, containerID, skipStdout, skipStderr, out)
	if err != nil {
		return nil, err
	}
	cid, ok := sandbox.WorkspaceJob(containerID)
	if !ok {
		return inner, nil
	}
	id, err := r.ws.byContainer(ctx, cid)
	if err != nil || id == "" {
		return inner, nil // deleted meanwhile: the job ends with its container
	}
	return r.track(id, inner, r.ws.hold(id)), nil
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

package workspace

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
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
	if lost := r.ws.takeLost(w.ID); lost != "" {
		// Said once, before the job's own output, by the job that woke it.
		out.Write(sandbox.Stderr, []byte("sandboxer: "+lost+"\n"))
	}
	h := &handle{ws: r.ws, id: w.ID, session: spec.Kind == sandbox.KindSession}
	h.touch()
	if h.session { // its output is activity: never frozen mid-answer
		if fo, ok := out.(sandbox.FileOutput); ok {
			out = fileActivity{activity{fo, h}, fo}
		} else {
			out = activity{out, h}
		}
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
	h.Handle = inner
	return r.track(w.ID, h, release), nil
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
func (r *Runtime) track(id string, h *handle, release func()) *handle {
	inner := h.Handle
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
	cid, isWorkspaceJob := sandbox.WorkspaceJob(containerID)
	id := ""
	if isWorkspaceJob {
		var err error
		if id, err = r.ws.byContainer(ctx, cid); err == nil && id != "" {
			// A frozen supervisor cannot be reattached to: a workspace
			// paused with a session in it is thawed to adopt it (the idle
			// loop pauses it again).
			if err := r.ws.thawByID(ctx, id); err != nil {
				return nil, err
			}
		}
	}
	inner, err := r.Runtime.Adopt(ctx, containerID, skipStdout, skipStderr, out)
	if err != nil {
		return nil, err
	}
	if id == "" {
		return inner, nil // not a workspace's, or deleted meanwhile: the job ends with its container
	}
	h := &handle{Handle: inner, ws: r.ws, id: id}
	h.touch()
	return r.track(id, h, r.ws.hold(id)), nil
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

// handle is a job in a workspace; the runtime may stop it on its own (disk
// quota). Anything sent to its process thaws a paused workspace first.
type handle struct {
	sandbox.Handle
	ws                  *Manager
	id                  string // the workspace's
	session             bool   // an interactive session: frozen with the workspace when idle
	active              atomic.Int64
	mu                  sync.Mutex
	stopReason, stopWhy string
}

// touch records activity now (input, output, a signal).
func (h *handle) touch() { h.active.Store(time.Now().UnixNano()) }

// idleFor is how long the job has had no input or output.
func (h *handle) idleFor() time.Duration { return time.Since(time.Unix(0, h.active.Load())) }

// awake thaws the workspace before something reaches the job's process.
func (h *handle) awake(ctx context.Context) error {
	h.touch()
	if err := h.ws.thaw(ctx, h.id); err != nil {
		return fmt.Errorf("workspace paused and not thawed: %w", err)
	}
	return nil
}

func (h *handle) WriteStdin(ctx context.Context, p []byte) (int, error) {
	if err := h.awake(ctx); err != nil {
		return 0, err
	}
	return h.Handle.WriteStdin(ctx, p)
}

func (h *handle) CloseStdin() error {
	if err := h.awake(context.Background()); err != nil {
		return err
	}
	return h.Handle.CloseStdin()
}

func (h *handle) Signal(ctx context.Context, signal string) error {
	if err := h.awake(ctx); err != nil {
		return err
	}
	return h.Handle.Signal(ctx, signal)
}

func (h *handle) Resize(ctx context.Context, rows, cols uint16) error {
	if err := h.awake(ctx); err != nil {
		return err
	}
	return h.Handle.Resize(ctx, rows, cols)
}

// Destroy thaws first: a frozen supervisor could not end its job.
func (h *handle) Destroy(ctx context.Context) error {
	_ = h.awake(ctx)
	return h.Handle.Destroy(ctx)
}

// activity is a session's output, counted as activity of its handle.
type activity struct {
	sandbox.Output
	h *handle
}

func (a activity) Write(s sandbox.Stream, p []byte) {
	a.h.touch()
	a.Output.Write(s, p)
}

// fileActivity keeps a session's figures going to an Output that takes them.
type fileActivity struct {
	activity
	fo sandbox.FileOutput
}

func (a fileActivity) File(f proto.ReturnedFile) {
	a.h.touch()
	a.fo.File(f)
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

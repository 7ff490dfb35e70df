package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// The fake's workspaces (sandbox.WorkspaceRuntime): a workspace is a
// listed container of kind workspace, running until stopped, whose files
// (its volume) outlive its stops and are shared with its jobs (StartIn),
// its execs (fake scripts, run to their end) and its installer. Its jobs
// are containers "<workspace id>/<key>", never listed, as on the engines.

var _ sandbox.WorkspaceRuntime = (*Runtime)(nil)

// idleSpec is a long-lived fake container of kind: its main process sleeps
// until it is stopped or removed.
func idleSpec(kind, image string) sandbox.Spec {
	return sandbox.Spec{Kind: kind, Image: image, Cmd: []string{"bash", "-c", "sleep 1000000"}, EngineLog: "none"}
}

var jobKeys atomic.Int64

func (r *Runtime) CreateWorkspace(ctx context.Context, ws sandbox.WorkspaceSpec) (sandbox.WorkspaceRefs, error) {
	if ws.Network != "" && ws.Network != sandbox.NetworkEgress {
		return sandbox.WorkspaceRefs{}, fmt.Errorf("a workspace's network is none or %s, not %q", sandbox.NetworkEgress, ws.Network)
	}
	spec := idleSpec(sandbox.KindWorkspace, ws.Image)
	spec.Network, spec.Env = ws.Network, ws.Env
	c, err := r.create(spec)
	if err != nil {
		return sandbox.WorkspaceRefs{}, err
	}
	vol := "sandboxer-ws-" + ws.Name + "-" + c.info.ID[:12]
	if err := r.CreateVolume(ctx, vol, map[string]string{sandbox.LabelWorkspace: ws.Name}); err != nil {
		_, _ = r.remove(ctx, c.info.ID, false)
		return sandbox.WorkspaceRefs{}, err
	}
	return sandbox.WorkspaceRefs{ContainerID: c.info.ID, Volume: vol}, nil
}

// StartWorkspace starts a stopped workspace's container again: a new
// process in the same container, with the same files. Jobs a checkpoint
// held end: they are not restored.
func (r *Runtime) StartWorkspace(ctx context.Context, id string) error {
	if c, err := r.existing(id); err == nil && !c.isRunning() {
		for _, j := range r.jobsOf(id) {
			j.kill()
		}
	}
	return r.startMain(id)
}

// startMain starts a workspace's main process unless it runs.
func (r *Runtime) startMain(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return engineDown()
	}
	c := r.containers[id]
	if c == nil {
		return fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
	}
	c.mu.Lock()
	running, ended := c.running, c.ended
	c.mu.Unlock()
	switch {
	case running:
		return nil
	case ended:
		again := newContainer(r.Engine, c.info, idleSpec(c.info.Kind, c.image), c.seq)
		again.fs, again.network, again.env = c.fs, c.network, c.env
		again.reach = r.reachOf(c.network)
		r.containers[id] = again
		c = again
	}
	c.start()
	return nil
}

// StopWorkspace ends the workspace's process and its jobs; its files stay.
func (r *Runtime) StopWorkspace(ctx context.Context, id string) error {
	r.mu.Lock()
	c := r.containers[id]
	var jobs []*container
	for jid, j := range r.containers {
		if strings.HasPrefix(jid, id+"/") {
			jobs = append(jobs, j)
		}
	}
	down := r.down
	r.mu.Unlock()
	if down {
		return engineDown()
	}
	if c == nil {
		return fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
	}
	for _, j := range append(jobs, c) {
		j.kill()
		<-j.exited
	}
	return nil
}

// FreezeWorkspace freezes the workspace's container and its jobs: their
// scripts stop before their next statement, and nothing new runs in it.
func (r *Runtime) FreezeWorkspace(ctx context.Context, id string) error {
	return r.setFrozen(id, true)
}

// ThawWorkspace lets them go on.
func (r *Runtime) ThawWorkspace(ctx context.Context, id string) error {
	return r.setFrozen(id, false)
}

func (r *Runtime) WorkspaceFrozen(ctx context.Context, id string) (bool, error) {
	c, err := r.existing(id)
	if err != nil {
		return false, err
	}
	return c.frozen(), nil
}

func (r *Runtime) setFrozen(id string, frozen bool) error {
	r.mu.Lock()
	c := r.containers[id]
	var all []*container
	if c != nil {
		all = append(all, c)
	}
	for jid, j := range r.containers {
		if strings.HasPrefix(jid, id+"/") {
			all = append(all, j)
		}
	}
	down := r.down
	r.mu.Unlock()
	switch {
	case down:
		return engineDown()
	case c == nil:
		return fmt.Errorf("%w: %s", sandbox.ErrNotFound, id)
	case frozen && !c.isRunning():
		return fmt.Errorf("container %.12s is not running: it cannot be paused", id)
	}
	for _, x := range all {
		if frozen {
			x.freeze()
		} else {
			x.thaw()
		}
	}
	return nil
}

func (r *Runtime) WorkspaceRunning(ctx context.Context, id string) (bool, error) {
	c, err := r.existing(id)
	if err != nil {
		return false, err
	}
	return c.isRunning(), nil
}

// RemoveWorkspace removes the container (its jobs first) and the volume.
func (r *Runtime) RemoveWorkspace(ctx context.Context, refs sandbox.WorkspaceRefs) error {
	if refs.ContainerID != "" {
		if err := r.StopWorkspace(ctx, refs.ContainerID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return err
		}
		if _, err := r.remove(ctx, refs.ContainerID, true); err != nil {
			return err
		}
	}
	if refs.Volume != "" {
		return r.RemoveVolume(ctx, refs.Volume)
	}
	return nil
}

// StartInstaller is a running container that shares the workspace's files.
func (r *Runtime) StartInstaller(ctx context.Context, workspaceID, network string) (string, error) {
	ws, down := r.lookup(workspaceID)
	switch {
	case down:
		return "", engineDown()
	case ws == nil:
		return "", fmt.Errorf("%w: %s", sandbox.ErrNotFound, workspaceID)
	}
	spec := idleSpec("install", ws.image)
	spec.Network = network
	if r.InstallsThroughTunnel(network) {
		spec.Network = "none"
	}
	c, err := r.create(spec)
	if err != nil {
		return "", err
	}
	c.fs = ws.fs
	c.start()
	return c.info.ID, nil
}

// InstallsThroughTunnel: on a runtime that tunnels egress, every install
// network goes through the tunnel, as on Kubernetes (sandbox.TunnelInstaller).
func (r *Runtime) InstallsThroughTunnel(network string) bool { return r.egress == EgressTunnelled }

// RootExec: the fake's execs run as the user they name.
func (r *Runtime) RootExec() bool { return true }

// StartHelper is a running container with files of its own and the
// volumes mounts name (host directories are not modelled).
func (r *Runtime) StartHelper(ctx context.Context, image string, mounts []sandbox.Mount) (string, error) {
	spec := idleSpec(sandbox.KindHelper, image)
	spec.Mounts = mounts
	c, err := r.create(spec)
	if err != nil {
		return "", err
	}
	c.start()
	return c.info.ID, nil
}

func (r *Runtime) OOMKilled(ctx context.Context, id string) (bool, error) {
	c, err := r.existing(id)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.oom, nil
}

// StartIn runs spec as a job in a running workspace container, on its files.
func (r *Runtime) StartIn(ctx context.Context, id string, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	r.mu.Lock()
	ws := r.containers[id]
	switch {
	case r.down:
		r.mu.Unlock()
		return nil, engineDown()
	case ws == nil || !ws.isRunning():
		r.mu.Unlock()
		return nil, fmt.Errorf("workspace container %.12s is not running", id)
	case ws.frozen():
		r.mu.Unlock()
		return nil, fmt.Errorf("container %.12s is paused, unpause the container before exec", id)
	}
	r.seq++
	c := newContainer(r.Engine, sandbox.Container{ID: fmt.Sprintf("%s/%d", id, jobKeys.Add(1)), JobID: spec.JobID, Kind: spec.Kind,
		Instance: r.instance, Server: r.server}, spec, r.seq)
	c.fs, c.image, c.network, c.reach = ws.fs, ws.image, ws.network, ws.reach
	r.containers[c.info.ID] = c
	downCh := r.downCh
	r.mu.Unlock()
	return r.run(c, downCh, spec.OpenStdin, out), nil
}

// Exec runs a fake script (opts.Cmd) in a running container, on its files,
// until it ends or ctx does. With o.Proxy, its own tunnel serves the proxy
// and its proxy variables name it; all its output goes to Stderr (Stdout
// when nil), as through the supervisor's tunnel.
func (r *Runtime) Exec(ctx context.Context, id string, o sandbox.ExecOptions) (int, error) {
	host, down := r.lookup(id)
	switch {
	case down:
		return -1, engineDown()
	case host == nil:
		return -1, sandbox.ErrNotFound
	case !host.isRunning():
		return -1, fmt.Errorf("container %.12s is not running", id)
	case host.frozen():
		return -1, fmt.Errorf("container %.12s is paused, unpause the container before exec", id)
	}
	c := newContainer(r.Engine, sandbox.Container{ID: id + "/exec"}, sandbox.Spec{Cmd: o.Cmd, OpenStdin: o.Stdin != nil}, 0)
	c.fs, c.reach = host.fs, host.reach
	c.env = append(slices.Clone(host.env), o.Env...)
	if uid, _, _ := strings.Cut(o.User, ":"); uid != "" {
		c.uid = uid
	}
	stdout, stderr := o.Stdout, o.Stderr
	if stderr == nil {
		stderr = o.Stdout
	}
	if o.Proxy != nil {
		tunnel := serve(o.Proxy)
		defer tunnel.shutdown()
		c.reach = c.reach.with(execTunnelAddr, tunnel)
		url := "http://" + execTunnelAddr
		c.env = append(c.env, "HTTP_PROXY="+url, "HTTPS_PROXY="+url, "http_proxy="+url, "https_proxy="+url,
			"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
		stdout = stderr
	}
	if o.Stdin != nil {
		b, err := io.ReadAll(o.Stdin)
		if err != nil {
			return -1, err
		}
		_, _ = c.stdin.write(ctx, b)
		c.stdin.closeWrite()
	}
	code, err := runToEnd(ctx, c)
	if err != nil {
		return -1, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range c.log {
		w := stdout
		if ch.stream == sandbox.Stderr {
			w = stderr
		}
		if w != nil {
			_, _ = w.Write(ch.data)
		}
	}
	return code, nil
}

// CopyFrom is a tar of a path of the container's files.
func (r *Runtime) CopyFrom(ctx context.Context, id, path string) (io.ReadCloser, error) {
	c, err := r.existing(id)
	if err != nil {
		return nil, err
	}
	rc, ok := c.fs.tar(path)
	if !ok {
		return nil, fmt.Errorf("copy from container %.12s: no such file or directory: %s", id, path)
	}
	return rc, nil
}

// CopyTo writes an archive's files under dir of the container's files.
func (r *Runtime) CopyTo(ctx context.Context, id, dir string, archive io.Reader) error {
	c, err := r.existing(id)
	if err != nil {
		return err
	}
	return c.fs.untar(dir, archive)
}

// existing is container id, or why there is none.
func (r *Runtime) existing(id string) (*container, error) {
	c, down := r.lookup(id)
	switch {
	case down:
		return nil, engineDown()
	case c == nil:
		return nil, sandbox.ErrNotFound
	}
	return c, nil
}

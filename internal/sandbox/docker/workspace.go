package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/uuid"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

var _ sandbox.WorkspaceRuntime = (*Runtime)(nil)

// CreateWorkspace creates a workspace's volume and its container (not started).
func (r *Runtime) CreateWorkspace(ctx context.Context, ws sandbox.WorkspaceSpec) (sandbox.WorkspaceRefs, error) {
	if ws.Network != "" && ws.Network != sandbox.NetworkEgress {
		return sandbox.WorkspaceRefs{}, fmt.Errorf("a workspace's network is none or %s, not %q", sandbox.NetworkEgress, ws.Network)
	}
	suffix := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	name := "sandboxer-ws-" + ws.Name + "-" + suffix
	labels := map[string]string{
		sandbox.LabelManaged:   "true",
		sandbox.LabelInstance:  r.instance,
		sandbox.LabelServer:    r.server,
		sandbox.LabelKind:      sandbox.KindWorkspace,
		sandbox.LabelWorkspace: ws.Name,
		sandbox.LabelNetwork:   ws.Network,
	}
	vol, err := r.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: labels})
	if err != nil {
		return sandbox.WorkspaceRefs{}, r.engineErr(fmt.Errorf("create volume: %w", err))
	}
	refs := sandbox.WorkspaceRefs{Volume: vol.Volume.Name}
	l := ws.Limits
	init := true
	pids := l.Pids
	logBytes := l.LogBytes
	if logBytes <= 0 {
		logBytes = 1 << 20
	}
	tmp := l.TmpBytes
	if tmp <= 0 {
		tmp = 64 << 20
	}
	d := r.dialect(ctx)
	if err := d.enforce(); err != nil {
		_ = r.RemoveWorkspace(context.WithoutCancel(ctx), refs)
		return sandbox.WorkspaceRefs{}, err
	}
	cfg := &container.Config{
		Image: ws.Image,
		// The supervisor's daemon (under Docker's init, which reaps what
		// jobs leave behind) takes the workspace's jobs (see wsconn.go).
		Cmd:        daemonCmd,
		WorkingDir: defaultWorkDir,
		User:       sandboxUser,
		Labels:     labels,
		Env:        ws.Env,
	}
	host := &container.HostConfig{
		LogConfig: d.logConfig("local", logBytes),
		// No network (installs get theirs in an install container,
		// StartInstaller, so a job never sees one), but for a workspace
		// made with its own allowlist: the internal egress network, whose
		// only peer is the proxy.
		NetworkMode: container.NetworkMode(r.engineNetwork(ws.Network)),
		DNS:         r.resolvers(ws.Network),
		// No capability at all, root execs included: with no-new-privileges
		// an exec as root gets none either (seen on Engine 20.10), so
		// installs run as a capability-less root (apt's sandbox user off).
		CapDrop:     []string{"ALL"},
		SecurityOpt: d.securityOpts(),
		// Writable root (docs/architecture.md, "The hardening profile"): apt installs into it; it persists
		// while the container exists (stopped included).
		ReadonlyRootfs: false,
		Tmpfs:          map[string]string{tmpPath: "rw,exec,nosuid,nodev,mode=1777,size=" + strconv.FormatInt(tmp, 10)},
		Mounts:         append([]mount.Mount{{Type: mount.TypeVolume, Source: refs.Volume, Target: defaultWorkDir}}, engineMounts(ws.Mounts)...),
		ShmSize:        shmSize,
		IpcMode:        "private",
		CgroupnsMode:   "private",
		Init:           &init,
		Runtime:        d.runtime(ws.Runtime),
		OomScoreAdj:    500,
		Resources: container.Resources{
			Memory:     l.MemoryBytes,
			MemorySwap: l.MemoryBytes,
			NanoCPUs:   l.NanoCPUs,
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
	}
	if l.OpenFiles > 0 {
		host.Ulimits = append(host.Ulimits, &container.Ulimit{Name: "nofile", Soft: l.OpenFiles, Hard: l.OpenFiles})
	}
	host.Ulimits = d.ulimits(host.Ulimits)
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: host})
	if err != nil {
		_ = r.RemoveWorkspace(context.WithoutCancel(ctx), refs)
		if cerrdefs.IsNotFound(err) {
			if ierr := r.missingImage(ctx, ws.Image); ierr != nil {
				return sandbox.WorkspaceRefs{}, ierr
			}
		}
		return sandbox.WorkspaceRefs{}, r.engineErr(fmt.Errorf("create container: %w", err))
	}
	refs.ContainerID = created.ID
	return refs, nil
}

// StartWorkspace starts the container; a running one is left alone.
func (r *Runtime) StartWorkspace(ctx context.Context, id string) error {
	r.daemons.Release(id) // jobs held by a checkpoint it does not restore
	_, err := r.cli.ContainerStart(ctx, id, client.ContainerStartOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return sandbox.ErrNotFound
		}
		return r.engineErr(fmt.Errorf("start workspace container: %w", err))
	}
	return nil
}

// StopWorkspace stops the container at once: its jobs are gone by then.
func (r *Runtime) StopWorkspace(ctx context.Context, id string) error {
	r.wsTunnels.Drop(id)
	r.dropExec(id)
	r.daemons.Drop(id)
	// Podman refuses to stop a paused container ("container state
	// improper"); Docker stops it either way.
	_ = r.setPaused(ctx, id, false)
	timeout := 1
	_, err := r.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return r.engineErr(fmt.Errorf("stop workspace container: %w", err))
	}
	return nil
}

// FreezeWorkspace pauses the container (the cgroup freezer).
func (r *Runtime) FreezeWorkspace(ctx context.Context, id string) error {
	return r.setPaused(ctx, id, true)
}

// ThawWorkspace unpauses the container.
func (r *Runtime) ThawWorkspace(ctx context.Context, id string) error {
	return r.setPaused(ctx, id, false)
}

// setPaused pauses or unpauses the container unless it already is so.
func (r *Runtime) setPaused(ctx context.Context, id string, pause bool) error {
	if paused, err := r.WorkspaceFrozen(ctx, id); err != nil || paused == pause {
		return err
	}
	var err error
	what := "unpause"
	if pause {
		what = "pause"
		_, err = r.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
	} else {
		_, err = r.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
	}
	if cerrdefs.IsNotFound(err) {
		return sandbox.ErrNotFound
	}
	if err != nil {
		return r.engineErr(fmt.Errorf("%s workspace container: %w", what, err))
	}
	return nil
}

// WorkspaceFrozen says whether the container is paused.
func (r *Runtime) WorkspaceFrozen(ctx context.Context, id string) (bool, error) {
	st, err := r.workspaceState(ctx, id)
	return st != nil && st.Paused, err
}

// workspaceState is the container's state as the engine reports it.
func (r *Runtime) workspaceState(ctx context.Context, id string) (*container.State, error) {
	info, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, sandbox.ErrNotFound
		}
		return nil, r.engineErr(err)
	}
	return info.Container.State, nil
}

// WorkspaceRunning says whether the container runs; ErrNotFound when gone.
func (r *Runtime) WorkspaceRunning(ctx context.Context, id string) (bool, error) {
	if r.daemons.Live(id) != nil {
		return true, nil // its daemon's stream ends when it stops
	}
	st, err := r.workspaceState(ctx, id)
	return st != nil && st.Running && !st.Restarting, err
}

// RemoveWorkspace removes the container, then the volume; idempotent.
func (r *Runtime) RemoveWorkspace(ctx context.Context, refs sandbox.WorkspaceRefs) error {
	if refs.ContainerID != "" {
		r.wsTunnels.Drop(refs.ContainerID)
		r.dropExec(refs.ContainerID)
		r.daemons.Drop(refs.ContainerID)
		_ = r.setPaused(ctx, refs.ContainerID, false) // as in StopWorkspace
		if err := r.Remove(ctx, refs.ContainerID); err != nil {
			return err
		}
	}
	if refs.Volume != "" {
		// An install container still using the volume (a delete during an
		// install) goes first: the engine keeps a volume in use.
		if list, err := r.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
			Filters: make(client.Filters).Add("volume", refs.Volume).Add("label", sandbox.LabelKind+"="+sandbox.KindHelper)}); err == nil {
			for _, c := range list.Items {
				if err := r.Remove(ctx, c.ID); err != nil {
					return err
				}
			}
		}
		_, err := r.cli.VolumeRemove(ctx, refs.Volume, client.VolumeRemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			return r.engineErr(fmt.Errorf("remove volume %s: %w", refs.Volume, err))
		}
	}
	return nil
}

// StartIn runs spec as a job in a running workspace container: an exec of
// the supervisor, attached like a job container, which is handed the spec
// with kill mode "tree". Like the warm pool for fresh sandboxes, one exec per
// workspace is made and attached before its job comes (an exec's create and
// start are most of a workspace job's cost): a job takes it, and the next is
// made in the background.
func (r *Runtime) StartIn(ctx context.Context, containerID string, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if err := r.workspaceTunnel(ctx, containerID); err != nil {
		return nil, err
	}
	if ok, err := r.usesDaemon(ctx, containerID); err != nil {
		return nil, err
	} else if ok {
		return r.startDaemonJob(ctx, containerID, spec, out)
	}
	if h := r.takeExec(containerID); h != nil {
		go r.refillExec(containerID)
		if hh, err := h.launch(ctx, spec, out, false); err == nil {
			return hh, nil
		}
		h.conn.Close() // it could not take the job: a fresh exec will
	}
	h, err := r.attachExec(ctx, containerID)
	if err != nil {
		return nil, err
	}
	go r.refillExec(containerID)
	hh, err := h.launch(ctx, spec, out, false)
	if err != nil {
		h.conn.Close()
		return nil, err
	}
	return hh, nil
}

// takeExec takes the waiting exec of a workspace container, if it is alive.
func (r *Runtime) takeExec(containerID string) *handle {
	r.execMu.Lock()
	h := r.execs[containerID]
	delete(r.execs, containerID)
	r.execMu.Unlock()
	if h == nil || h.ended() {
		return nil
	}
	return h
}

// refillExec makes a workspace container's next waiting exec; one is kept
// per container, and none for a container that stopped.
func (r *Runtime) refillExec(containerID string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	h, err := r.attachExec(ctx, containerID)
	if err != nil {
		return // stopped or gone: the next job makes its own
	}
	r.execMu.Lock()
	if r.execs == nil {
		r.execs = map[string]*handle{}
	}
	old := r.execs[containerID]
	r.execs[containerID] = h
	r.execMu.Unlock()
	if old != nil {
		old.conn.Close() // its supervisor exits on end of input
	}
}

// dropExec closes a workspace container's waiting exec (it stops or goes).
func (r *Runtime) dropExec(containerID string) {
	r.execMu.Lock()
	h := r.execs[containerID]
	delete(r.execs, containerID)
	r.execMu.Unlock()
	if h != nil {
		h.conn.Close()
	}
}

// attachExec creates and attaches a supervisor exec in a workspace
// container, which then waits for its spec.
func (r *Runtime) attachExec(ctx context.Context, containerID string) (*handle, error) {
	ex, err := r.cli.ExecCreate(ctx, containerID, client.ExecCreateOptions{
		User: sandboxUser, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		WorkingDir: defaultWorkDir, Cmd: []string{supervisorPath},
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("workspace container %.12s: %w", containerID, sandbox.ErrNotFound)
		}
		return nil, r.engineErr(fmt.Errorf("create exec: %w", err))
	}
	attach, err := r.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("start exec: %w", err))
	}
	h := newHandle(r, containerID, func() {})
	h.execID = ex.ID
	h.setConn(attach.Conn)
	go h.readFrames(attach.Reader, attach.Close)
	go h.waitForEnd(client.ContainerWaitResult{}) // an exec's end is its stream's
	return h, nil
}

// execVerdict is how an exec'd supervisor ended without its report: the
// workspace's container stopped or went under it, or it failed.
func (h *handle) execVerdict(ctx context.Context) sandbox.ExitStatus {
	info, err := h.rt.cli.ExecInspect(ctx, h.execID, client.ExecInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return sandbox.ExitStatus{ExitCode: -1, Gone: true}
		}
		return sandbox.ExitStatus{ExitCode: -1, Err: h.rt.engineErr(err)}
	}
	if running, err := h.rt.WorkspaceRunning(ctx, h.id); errors.Is(err, sandbox.ErrNotFound) || err == nil && !running {
		return sandbox.ExitStatus{ExitCode: -1, Gone: true}
	}
	st := sandbox.ExitStatus{ExitCode: info.ExitCode}
	if d := h.C.Diag.String(); d != "" && info.ExitCode != 0 {
		st.StartErr = fmt.Errorf("the sandbox supervisor ended without a report: %s", d)
	}
	return st
}

// Exec runs a plain command in a running container until it ends (or ctx
// does: then the exec's connection is closed and its process gets EOF and
// SIGPIPE; callers use commands that end by themselves or have a deadline).
// With o.Proxy it runs through the tunnel (sandbox.ExecThroughTunnel).
func (r *Runtime) Exec(ctx context.Context, containerID string, o sandbox.ExecOptions) (int, error) {
	if o.Proxy != nil { // no network in the container: through the exec's own stream
		return sandbox.ExecThroughTunnel(ctx, o, func(ctx context.Context, o sandbox.ExecOptions) (int, error) {
			return r.Exec(ctx, containerID, o)
		})
	}
	user := o.User
	if user == "" {
		user = sandboxUser
	}
	if len(o.Cmd) > 0 && o.Cmd[0] != supervisorPath && r.underGVisor(ctx, containerID) {
		// Under gVisor's seccomp, clone3 must answer ENOSYS for threads to
		// start; the supervisor's processes have that already.
		o.Cmd = append([]string{supervisorPath, proto.ExecCommand}, o.Cmd...)
	}
	ex, err := r.cli.ExecCreate(ctx, containerID, client.ExecCreateOptions{
		User: user, AttachStdin: o.Stdin != nil, AttachStdout: true, AttachStderr: true,
		WorkingDir: defaultWorkDir, Cmd: o.Cmd, Env: o.Env,
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return -1, sandbox.ErrNotFound
		}
		return -1, r.engineErr(fmt.Errorf("create exec: %w", err))
	}
	attach, err := r.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return -1, r.engineErr(fmt.Errorf("start exec: %w", err))
	}
	defer attach.Close()
	stop := context.AfterFunc(ctx, func() { attach.Close() })
	defer stop()
	if o.Stdin != nil {
		go func() {
			_, _ = io.Copy(attach.Conn, o.Stdin)
			_ = attach.CloseWrite()
		}()
	}
	stdout, stderr := o.Stdout, o.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	if _, err := stdcopy.StdCopy(stdout, stderr, attach.Reader); err != nil && ctx.Err() == nil {
		return -1, fmt.Errorf("read exec output: %w", err)
	}
	if ctx.Err() != nil {
		return -1, ctx.Err()
	}
	// The stream can end a moment before the engine records the exit.
	for i := 0; ; i++ {
		info, err := r.cli.ExecInspect(context.WithoutCancel(ctx), ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return -1, r.engineErr(err)
		}
		if !info.Running || i >= 100 {
			return info.ExitCode, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

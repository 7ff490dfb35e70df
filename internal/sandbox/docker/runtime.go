// Package docker implements sandbox.Runtime on the Docker Engine API. It is the
// only package that imports the Docker client.
package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// Paths inside every sandbox that get a size-capped tmpfs, since the root is read-only.
const (
	tmpPath  = "/tmp"
	homePath = "/home/sandbox"
	homeSize = 64 << 20
	shmSize  = 64 << 20 // /dev/shm stays writable under a read-only root: cap it
	// supervisorPath is where every image carries the supervisor.
	supervisorPath = "/usr/local/bin/sandboxer-supervisor"
	defaultWorkDir = "/workspace"
	// sandboxUser is the image's non-root user (uid 1000).
	sandboxUser = "1000:1000"
	// drainTimeout bounds how long we wait for output after the process ended.
	drainTimeout = 5 * time.Second
	// cleanupTimeout bounds the calls made after the caller's context is gone.
	cleanupTimeout = 30 * time.Second
	// removePoll is how often remove asks again while another removal is in progress.
	removePoll = 50 * time.Millisecond
)

// Runtime runs sandboxes as Docker containers.
type Runtime struct {
	cli      *client.Client
	endpoint Endpoint
	instance string // value of sandbox.LabelInstance on everything this server makes
	server   string // value of sandbox.LabelServer: this server process

	removeMu   sync.Mutex
	removing   int           // removals under way (removeLater)
	removeIdle chan struct{} // closed while removing == 0
	// logReaders counts, per container, the handles of this runtime that
	// still read its engine log (adopted): a removal waits for them, so
	// an engine whose log follower lags (Podman's) is not cut off.
	logReaders map[string]int

	// execs are supervisor execs already attached in running workspaces,
	// each waiting for its job (see StartIn).
	execMu sync.Mutex
	execs  map[string]*handle // workspace container id -> a waiting exec
	// daemons are the streams to workspace daemons (see wsconn.go);
	// daemonMode says which workspace containers run one.
	daemons    *supervisor.Daemons
	daemonMode map[string]bool
	gvisor     map[string]bool // workspace containers on runsc (underGVisor)

	onError func(operation string) // WithErrorHook

	product   Product // WithProduct: what the backend says the engine is
	dialectMu sync.Mutex
	dial      *dialect // the engine's, once known

	// pending are the images BuildMissingImages is still building.
	pending pendingImages

	// egressProxy serves the egress tunnels (tunnel.go; Podman only); nil: none.
	egressProxy http.Handler
	wsTunnels   sandbox.WorkspaceTunnels // workspace containers' egress tunnels
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithServer labels everything this runtime makes with the server process's
// identity, so other servers on the same state directory leave it alone while
// that server lives.
func WithServer(id string) Option { return func(r *Runtime) { r.server = id } }

// Product is the engine behind the Docker Engine API. The backend names it
// (policy backend: docker or podman), so the runtime's parts are known
// before the engine answers, and a server that starts while its engine is
// down has the right ones (Podman's egress is the tunnel).
type Product string

// The products.
const (
	ProductDocker Product = "Docker"
	ProductPodman Product = "Podman"
)

// WithProduct says which engine this is (default ProductDocker). An engine
// that turns out to be another starts no sandbox, and says which backend
// to name.
func WithProduct(p Product) Option { return func(r *Runtime) { r.product = p } }

// WithErrorHook tells f of each failed engine call, by operation (the
// error's leading words, e.g. "create container"), for the metrics.
func WithErrorHook(f func(operation string)) Option { return func(r *Runtime) { r.onError = f } }

var _ sandbox.Runtime = (*Runtime)(nil)

// New connects to the engine the Docker CLI would use (DOCKER_HOST with its
// TLS variables, else DOCKER_CONTEXT or the CLI's current context, else the
// local socket), negotiating the API version on first use. It refuses a TCP
// engine without TLS verification unless SANDBOXER_ENGINE_INSECURE=1. It
// succeeds even when the engine is down, so a server can start and recover
// once the engine is back.
func New(instance string, opts ...Option) (*Runtime, error) {
	ep, copts, err := resolveEndpoint(os.Getenv)
	if err != nil {
		return nil, err
	}
	cli, err := client.New(append(copts, client.WithAPIVersionNegotiation())...)
	if err != nil {
		return nil, fmt.Errorf("docker client for %s: %w", ep.Host, err)
	}
	r := &Runtime{cli: cli, endpoint: ep, instance: instance, product: ProductDocker}
	for _, o := range opts {
		o(r)
	}
	r.initDaemons()
	return r, nil
}

// Client exposes the Engine client to this package's other files (image builds, doctor).
func (r *Runtime) Client() *client.Client { return r.cli }

// Host is where the engine is looked for.
func (r *Runtime) Host() string { return r.endpoint.Host }

// Endpoint says where the engine is and how it is reached.
func (r *Runtime) Endpoint() Endpoint { return r.endpoint }

// Close waits (bounded) for container removals under way, then closes the client.
func (r *Runtime) Close() error {
	r.execMu.Lock()
	for id, h := range r.execs {
		h.conn.Close() // a waiting supervisor exits at the end of its input
		delete(r.execs, id)
	}
	r.execMu.Unlock()
	r.wsTunnels.CloseAll() // their egress goes with this server
	r.daemons.Close()      // the daemons keep the jobs for the next server
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = r.Flush(ctx)
	return r.cli.Close()
}

// engineErr turns connection failures into the typed error callers act on.
func (r *Runtime) engineErr(err error) error {
	if err == nil {
		return nil
	}
	if r.onError != nil {
		op, _, _ := strings.Cut(err.Error(), ":")
		r.onError(op)
	}
	if client.IsErrConnectionFailed(err) || errors.Is(err, context.DeadlineExceeded) && strings.Contains(err.Error(), "dial") {
		return &sandbox.EngineError{Host: r.endpoint.Host, Err: err}
	}
	return err
}

func (r *Runtime) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := r.cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		return &sandbox.EngineError{Host: r.endpoint.Host, Err: err}
	}
	return nil
}

func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	if r.pending.has(ref) {
		return false, &sandbox.ImageError{Image: ref, Building: true}
	}
	_, err := r.cli.ImageInspect(ctx, ref)
	if err == nil {
		return true, nil
	}
	if cerrdefs.IsNotFound(err) {
		return false, nil
	}
	return false, r.engineErr(err)
}

func (r *Runtime) labels(spec sandbox.Spec) map[string]string {
	return map[string]string{
		sandbox.LabelManaged:  "true",
		sandbox.LabelInstance: r.instance,
		sandbox.LabelServer:   r.server,
		sandbox.LabelJobID:    spec.JobID,
		sandbox.LabelKind:     spec.Kind,
		sandbox.LabelNetwork:  spec.Network,
	}
}

// containerConfig applies every default of the hardening profile
// (docs/architecture.md, "The hardening profile").
func (r *Runtime) containerConfig(d dialect, spec sandbox.Spec) (*container.Config, *container.HostConfig) {
	l := spec.Limits
	workdir := spec.WorkDir
	if workdir == "" {
		workdir = defaultWorkDir
	}
	cfg := &container.Config{
		Image: spec.Image,
		// The supervisor waits for the job (argv, env, stdin, deadline) on
		// its stdin; the job's own command is never the container's.
		Cmd:          []string{supervisorPath},
		WorkingDir:   workdir,
		User:         sandboxUser,
		Labels:       r.labels(spec),
		AttachStdout: true,
		AttachStderr: true,
		AttachStdin:  true,
		OpenStdin:    true,
		// StdinOnce: when the server goes, the supervisor sees its input end
		// (and keeps the job running).
		StdinOnce: true,
	}
	if spec.Kind == sandbox.KindPool && spec.Prestart != nil {
		// A warm sandbox starts its job's program ahead (proto.Prestart).
		pre, err := json.Marshal(proto.Prestart{Argv: spec.Prestart.Argv, EarlyEnv: spec.Prestart.EarlyEnv, LateEnv: spec.Prestart.LateEnv})
		if err == nil {
			cfg.Cmd = []string{supervisorPath, proto.PrestartCommand, string(pre)}
		}
	}
	network := r.engineNetwork(spec.Network)
	init := true
	pids := l.Pids
	tmpfsOpts := d.tmpfsOptions
	tmpfs := map[string]string{
		tmpPath:  tmpfsOpts(l.TmpBytes, false),
		homePath: tmpfsOpts(homeSize, true),
	}
	if workdir != tmpPath && workdir != homePath {
		tmpfs[workdir] = tmpfsOpts(l.WorkdirBytes, true)
	}
	logBytes := l.LogBytes
	if logBytes <= 0 {
		logBytes = 16 << 20
	}
	host := &container.HostConfig{
		LogConfig:      d.logConfig(spec.EngineLog, logBytes),
		NetworkMode:    container.NetworkMode(network),
		DNS:            r.resolvers(spec.Network),
		CapDrop:        []string{"ALL"},
		SecurityOpt:    d.securityOpts(),
		ReadonlyRootfs: true,
		Tmpfs:          tmpfs,
		ShmSize:        shmSize,
		IpcMode:        "private",
		CgroupnsMode:   "private", // its own cgroup tree only, not the host's
		Init:           &init,
		Runtime:        d.runtime(spec.Runtime),
		OomScoreAdj:    500, // the kernel should pick a sandbox before the host's own processes
		Resources: container.Resources{
			Memory:     l.MemoryBytes,
			MemorySwap: l.MemoryBytes, // swap = memory: no swap at all
			NanoCPUs:   l.NanoCPUs,
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: l.OpenFiles, Hard: l.OpenFiles},
				{Name: "fsize", Soft: l.FileSizeBytes, Hard: l.FileSizeBytes},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
	}
	host.Mounts = append(host.Mounts, engineMounts(spec.Mounts)...)
	host.Ulimits = d.ulimits(host.Ulimits)
	return cfg, host
}

// engineMounts are a spec's mounts as the engine takes them: volumes, and
// the host directories the operator granted, always read-only and private
// (no mount made under them later on the host shows inside).
func engineMounts(ms []sandbox.Mount) []mount.Mount {
	var out []mount.Mount
	for _, m := range ms {
		if m.Source != "" {
			out = append(out, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
			continue
		}
		out = append(out, mount.Mount{Type: mount.TypeVolume, Source: m.Volume, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	return out
}

// Start runs spec in a fresh sandbox: Prepare, then Launch at once.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	w, err := r.prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	h, err := w.launch(ctx, spec, out, false)
	if err != nil {
		r.removeQuietly(w.id)
		return nil, err
	}
	return h, nil
}

// Prepare starts a sandbox whose supervisor waits for its job (a warm pool's).
func (r *Runtime) Prepare(ctx context.Context, spec sandbox.Spec) (sandbox.Warm, error) {
	spec.Kind, spec.JobID = sandbox.KindPool, ""
	w, err := r.prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &warm{h: w}, nil
}

// prepare creates the container with the supervisor as its main process,
// attaches to it and registers the wait before it starts it, so no output
// and no exit can be missed.
func (r *Runtime) prepare(ctx context.Context, spec sandbox.Spec) (*handle, error) {
	d := r.dialect(ctx)
	if err := d.enforce(); err != nil {
		return nil, err
	}
	cfg, hostCfg := r.containerConfig(d, spec)
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hostCfg})
	if err != nil {
		// NotFound can name other things than the image (a runtime, a
		// network): say "image missing" only when it is.
		if cerrdefs.IsNotFound(err) {
			if ierr := r.missingImage(ctx, spec.Image); ierr != nil {
				return nil, ierr
			}
		}
		return nil, r.engineErr(fmt.Errorf("create container: %w", err))
	}
	id := created.ID
	fail := func(err error) (*handle, error) {
		r.removeQuietly(id)
		return nil, r.engineErr(err)
	}
	attach, err := r.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return fail(fmt.Errorf("attach: %w", err))
	}
	// The wait and the output outlive the caller's context: the job goes on after
	// the call that started it returns.
	waitCtx, cancelWait := context.WithCancel(context.Background())
	wait := r.cli.ContainerWait(waitCtx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := r.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		attach.Close()
		cancelWait()
		return fail(fmt.Errorf("start container: %w", err))
	}
	h := newHandle(r, id, cancelWait)
	h.setConn(attach.Conn)
	h.prepared = spec
	go h.readFrames(attach.Reader, attach.Close)
	go h.waitForEnd(wait)
	return h, nil
}

// launch hands a prepared sandbox its job: limits first (when they differ
// from those it was made with), then the spec frame.
func (h *handle) launch(ctx context.Context, spec sandbox.Spec, out sandbox.Output, resize bool) (sandbox.Handle, error) {
	if resize && spec.Limits != h.prepared.Limits {
		observe.MarkCtx(ctx, "limits_update")
		l := spec.Limits
		pids := l.Pids
		_, err := h.rt.cli.ContainerUpdate(ctx, h.id, client.ContainerUpdateOptions{Resources: &container.Resources{
			Memory: l.MemoryBytes, MemorySwap: l.MemoryBytes, NanoCPUs: l.NanoCPUs, PidsLimit: &pids,
		}})
		if err != nil {
			return nil, h.rt.engineErr(fmt.Errorf("set the sandbox's limits: %w", err))
		}
	}
	ps := supervisor.JobSpec(spec, defaultWorkDir)
	ps.TimeoutMS, ps.KillMode = backstop(spec.Timeout), proto.KillContainer
	if h.shared() {
		// A workspace's container is shared: kill the job's tree only. An
		// exec cannot be re-joined after a restart, so its job dies with
		// this server's stream to it; a daemon's job waits for the next.
		ps.KillMode, ps.KillOnDetach = proto.KillTree, h.execID != ""
		ps.Seed = false // a workspace got its template's files when made
		ps.Rlimits = supervisor.JobRlimits(spec.Limits)
	}
	h.C.HasStdin, h.C.TTY = spec.OpenStdin, spec.TTY != nil
	if err := ps.Validate(); err != nil {
		return nil, err
	}
	payload, err := json.Marshal(ps)
	if err != nil {
		return nil, err
	}
	if err := h.openJobTunnel(ctx, spec.Network); err != nil {
		return nil, err
	}
	h.C.Out.Set(out, 0, 0)
	close(h.launched)
	if err := h.C.WriteFrame(ctx, proto.TypeSpec, payload); err != nil {
		return nil, h.rt.engineErr(fmt.Errorf("hand the sandbox its job: %w", err))
	}
	observe.MarkCtx(ctx, "spec_sent")
	if resize && spec.JobID != "" {
		// Off the job's path: the rename never competes with a short job.
		time.AfterFunc(renameDelay, func() { h.renameForJob(spec.JobID, spec.Kind) })
	}
	return h, nil
}

// jobNamePrefix names a pooled container once it runs a job:
// sandboxer-job-<job id>.<job kind> (claimedName, parseClaimedName).
const jobNamePrefix = "sandboxer-job-"

func claimedName(jobID, kind string) string { return jobNamePrefix + jobID + "." + kind }

// parseClaimedName reads a container name made by claimedName; a name
// without a kind (a server before kinds were in it) gives only the id.
func parseClaimedName(name string) (jobID, kind string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimPrefix(name, "/"), jobNamePrefix)
	if !ok {
		return "", "", false
	}
	jobID, kind, _ = strings.Cut(rest, ".")
	return jobID, kind, jobID != ""
}

// renameDelay: a claimed container is renamed only if its job still runs
// then, so the rename never competes with a short job.
const renameDelay = 200 * time.Millisecond

// warm is a prepared sandbox waiting in a pool.
type warm struct{ h *handle }

func (w *warm) ContainerID() string { return w.h.id }

func (w *warm) Ended() <-chan struct{} { return w.h.C.Drained() }

func (w *warm) Launch(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if spec.PoolKey() != w.h.prepared.PoolKey() {
		return nil, fmt.Errorf("warm sandbox %.12s has another shape than the job", w.h.id)
	}
	select {
	case <-w.h.C.Hello():
		if w.h.C.HelloErr() != nil {
			return nil, w.h.C.HelloErr()
		}
	default:
		// Not yet heard from: the spec frame waits in its stdin.
	}
	if w.h.ended() {
		return nil, fmt.Errorf("warm sandbox %.12s ended before its job came", w.h.id)
	}
	return w.h.launch(ctx, spec, out, true)
}

func (w *warm) Discard(ctx context.Context) error {
	return w.h.Destroy(ctx)
}

// Adopt resumes a container started by a previous server process: the
// supervisor's frames are read back from the engine's log (the local driver
// keeps it) from the start, skipping job output already captured, and
// followed until the end. With the engine log off, only the end is known:
// the frames already written can't be read again and the live stream can't
// be joined mid-frame.
func (r *Runtime) Adopt(ctx context.Context, containerID string, skipStdout, skipStderr int64, out sandbox.Output) (sandbox.Handle, error) {
	if cid, key, ok := jobKey(containerID); ok {
		return r.adoptDaemonJob(ctx, cid, key, skipStdout, skipStderr, out)
	}
	info, err := r.cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, sandbox.ErrNotFound
		}
		return nil, r.engineErr(err)
	}
	if info.Container.Config == nil || info.Container.Config.Labels[sandbox.LabelInstance] != r.instance {
		return nil, fmt.Errorf("container %s does not belong to this server", containerID)
	}
	waitCtx, cancelWait := context.WithCancel(context.Background())
	wait := r.cli.ContainerWait(waitCtx, containerID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	h := newHandle(r, containerID, cancelWait)
	close(h.launched)
	h.C.Out.Set(out, skipStdout, skipStderr)
	// Once it is followed, an egress job gets a tunnel again (the former
	// server's went with it); one that cannot open leaves the job without
	// egress, not without its result.
	network := info.Container.Config.Labels[sandbox.LabelNetwork]
	if info.Container.HostConfig != nil && info.Container.HostConfig.LogConfig.Type == "none" {
		// No engine log to read back: follow the live output from now on,
		// joining the supervisor's frames where the stream starts; what was
		// printed while no server was attached is gone.
		attach, err := r.cli.ContainerAttach(ctx, containerID, client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
		if err != nil {
			cancelWait()
			return nil, r.engineErr(fmt.Errorf("attach: %w", err))
		}
		h.C.Out.Set(out, 0, 0)
		h.C.JoinMidStream = true
		go h.readFrames(attach.Reader, attach.Close)
		_ = h.openJobTunnel(ctx, network)
		go h.waitForEnd(wait)
		return h, nil
	}
	logs, err := r.cli.ContainerLogs(waitCtx, containerID, client.ContainerLogsOptions{
		ShowStdout: true, ShowStderr: true, Follow: true,
	})
	if err != nil {
		cancelWait()
		return nil, r.engineErr(fmt.Errorf("read logs: %w", err))
	}
	h.followsLog = true
	r.readsLog(h)
	go h.readFrames(logs, func() { logs.Close() })
	_ = h.openJobTunnel(ctx, network)
	go h.waitForEnd(wait)
	return h, nil
}

// removeLater removes an ended container in the background: a job's result
// does not wait for it. Flush (and Close) wait for removals under way.
// settle runs first (the handle's rename, if one is under way, ends).
func (r *Runtime) removeLater(id string, settle func()) {
	r.removeMu.Lock()
	if r.removing == 0 {
		r.removeIdle = make(chan struct{})
	}
	r.removing++
	r.removeMu.Unlock()
	go func() {
		defer func() {
			r.removeMu.Lock()
			if r.removing--; r.removing == 0 {
				close(r.removeIdle)
			}
			r.removeMu.Unlock()
		}()
		settle()
		r.waitLogReaders(id, drainTimeout)
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = r.Remove(ctx, id) // what fails here, the job manager's recovery pass sweeps later
	}()
}

// readsLog counts h as a reader of its container's engine log until its
// stream is drained.
func (r *Runtime) readsLog(h *handle) {
	r.removeMu.Lock()
	if r.logReaders == nil {
		r.logReaders = map[string]int{}
	}
	r.logReaders[h.id]++
	r.removeMu.Unlock()
	go func() {
		<-h.C.Drained()
		r.removeMu.Lock()
		if r.logReaders[h.id]--; r.logReaders[h.id] <= 0 {
			delete(r.logReaders, h.id)
		}
		r.removeMu.Unlock()
	}()
}

// waitLogReaders waits, at most bound, until no handle reads container
// id's engine log.
func (r *Runtime) waitLogReaders(id string, bound time.Duration) {
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r.removeMu.Lock()
		n := r.logReaders[id]
		r.removeMu.Unlock()
		if n == 0 {
			return
		}
	}
}

// Flush waits, bounded by ctx, until the containers of ended sandboxes are removed.
func (r *Runtime) Flush(ctx context.Context) error {
	r.removeMu.Lock()
	idle := r.removeIdle
	busy := r.removing > 0
	r.removeMu.Unlock()
	if !busy {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Runtime) List(ctx context.Context) ([]sandbox.Container, error) {
	// A runtime made without an instance (tools, tests) sees every server's sandboxes.
	label := sandbox.LabelManaged + "=true"
	if r.instance != "" {
		label = sandbox.LabelInstance + "=" + r.instance
	}
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("label", label),
	})
	if err != nil {
		return nil, r.engineErr(err)
	}
	var out []sandbox.Container
	for _, c := range res.Items {
		jobID, kind := c.Labels[sandbox.LabelJobID], c.Labels[sandbox.LabelKind]
		for _, name := range c.Names {
			if id, k, ok := parseClaimedName(name); ok && jobID == "" {
				// a pooled container, claimed by this job: the job's now
				jobID = id
				if k != "" {
					kind = k
				}
			}
		}
		out = append(out, sandbox.Container{
			ID:       c.ID,
			JobID:    jobID,
			Kind:     kind,
			Instance: c.Labels[sandbox.LabelInstance],
			Server:   c.Labels[sandbox.LabelServer],
			Running:  c.State == container.StateRunning,
		})
	}
	return out, nil
}

// Remove kills and removes a container; a container already gone is success.
func (r *Runtime) Remove(ctx context.Context, containerID string) error {
	_, err := r.remove(ctx, containerID)
	return err
}

// remove also says whether the container was already gone (or going). When
// another call is already removing it, remove waits for that to finish: on a
// nil error the container is gone, whoever removed it (Handle.Done relies on it).
func (r *Runtime) remove(ctx context.Context, containerID string) (alreadyGone bool, err error) {
	for {
		_, err = r.cli.ContainerRemove(ctx, containerID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil:
			return alreadyGone, nil
		case cerrdefs.IsNotFound(err):
			return true, nil
		case cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress"):
			alreadyGone = true
		case stoppingRace(err):
			// ended while being removed: the next try finds it stopped
		default:
			return alreadyGone, r.engineErr(err)
		}
		select {
		case <-ctx.Done():
			return alreadyGone, fmt.Errorf("container %s is still being removed: %w", containerID, ctx.Err())
		case <-time.After(removePoll):
		}
	}
}

func (r *Runtime) removeQuietly(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = r.Remove(ctx, id)
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 2000 {
		return time.Time{}
	}
	return t
}

// StartOrphan starts spec the way a server that then crashed leaves it:
// running, its job handed to the supervisor, nothing of this process
// watching, attached or removing it. Restart recovery tests use it.
func (r *Runtime) StartOrphan(ctx context.Context, spec sandbox.Spec) (string, error) {
	cfg, hostCfg := r.containerConfig(r.dialect(ctx), spec)
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: cfg, HostConfig: hostCfg})
	if err != nil {
		return "", r.engineErr(fmt.Errorf("create container: %w", err))
	}
	attach, err := r.cli.ContainerAttach(ctx, created.ID, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		r.removeQuietly(created.ID)
		return "", r.engineErr(err)
	}
	defer attach.Close()
	if _, err := r.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		r.removeQuietly(created.ID)
		return "", r.engineErr(err)
	}
	ps := proto.Spec{Argv: spec.Cmd, Env: spec.Env, InheritEnv: true, Cwd: cfg.WorkingDir,
		Stdin: proto.StdinClosed, TimeoutMS: backstop(spec.Timeout), KillMode: proto.KillContainer}
	if err := proto.WriteJSON(attach.Conn, proto.TypeSpec, ps); err != nil {
		r.removeQuietly(created.ID)
		return "", err
	}
	// Detach only once the job runs: closing at once could drop the spec.
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, attach.Reader)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	fr := proto.NewReader(pr)
	for {
		typ, _, err := fr.Next()
		if err != nil {
			r.removeQuietly(created.ID)
			return "", fmt.Errorf("orphan's supervisor did not start the job: %w", err)
		}
		if typ == proto.TypeStarted {
			// The engine keeps the container's output flowing (to its log) without us.
			return created.ID, nil
		}
	}
}

// deadlineBackstop is how long after a job's timeout its sandbox stops it by
// itself. The server stops it at the timeout (removing the container, so no
// process outlives the call's result); the sandbox's own deadline is for a
// server that is gone.
const deadlineBackstop = time.Second

func backstop(timeout time.Duration) int64 {
	if timeout <= 0 {
		return 0
	}
	return (timeout + deadlineBackstop).Milliseconds()
}

var _ sandbox.Engine = (*Runtime)(nil)

// Capabilities declares what Docker and Podman both have, and their egress:
// Docker's through its internal egress network; Podman 4's internal network
// has no gateway for the proxy to listen on, so there sandboxes reach the
// proxy as on Kubernetes, through a tunnel over an exec (EgressTunnel,
// TunnelInstalls; tunnel.go). The product is the backend's (WithProduct),
// never asked of the engine, so it holds whether or not the engine answers.
func (r *Runtime) Capabilities() sandbox.Capabilities {
	caps := sandbox.Capabilities{Warm: r, Workspaces: r, Freezer: r, Checkpointer: r, Volumes: r, Processes: r, EgressNetwork: r, Images: r, SandboxImages: r}
	if r.product == ProductPodman {
		caps.EgressNetwork, caps.EgressTunnel, caps.TunnelInstalls = nil, r, r
		caps.Checkpointer = nil // Podman's checkpoints are CRIU's, which fails on this kernel
	}
	return caps
}

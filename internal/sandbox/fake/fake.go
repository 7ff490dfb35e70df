// Package fake is an in-memory sandbox.Engine for tests: no Docker, no
// processes. A "container" is a goroutine that interprets a tiny shell-like
// script, so tests can shape what a sandbox does and when, deterministically.
// It keeps the contract exactly as internal/sandbox/docker does, and has
// every optional part (sandbox.Capabilities): the runtime contract and every
// capability suite of internal/sandbox/sandboxtest pass on it, the egress
// parts in both engine shapes (WithEgress: Docker's egress network, or the
// tunnel of Podman and Kubernetes, with installs and volume fills through
// it). Images, volumes and the network are modelled: see images.go,
// volumes.go and net.go.
//
// # Script grammar
//
// The script is the argument of `-c` in Spec.Cmd (["bash", "-c", script], as the
// job layer sends it), else Cmd joined by spaces. Statements are separated by
// ';' or newlines; '#' starts a comment; words split on blanks, with '...' and
// "..." quoting and no expansions. `>&2` on a statement sends its output to
// stderr. Every statement that is also valid bash behaves as in bash:
//
//	echo [-n] WORDS...   write WORDS joined by spaces (and "\n" unless -n)
//	printf FORMAT        write FORMAT with \n and \t interpreted
//	sleep N              N seconds (0.5 allowed) or a Go duration (150ms)
//	exit [N]             end with exit code N (default 0)
//	cat                  copy stdin to stdout until end-of-file
//	true, :, false       status 0, 0, 1
//	seq FIRST LAST       the numbers FIRST to LAST, one a line
//	cat FILE             write FILE (the container's files, below;
//	                     /proc/net/route has a default route only on a
//	                     network that leads out)
//	id -u, id -g         the process's user: 1000, or an exec's User
//	curl [-sSfvL] [-o FILE] [-x PROXY] [-m SECONDS] URL
//	                     fetch URL through what the sandbox reaches (net.go),
//	                     honouring http_proxy/https_proxy; failures say
//	                     what curl says, with its exit codes
//	A && B, A || B       B only after A's status is 0 / is not 0
//
// `> FILE`, `>> FILE`, `&&` and `||` are words of their own. `> FILE` and
// `>> FILE` send a statement's output to a file of the container instead:
// files live in memory, one set per container (a copy of its image's),
// shared by a workspace's container, its jobs, execs and installer (its
// volume); a volume a sandbox mounts is the volume's files under the
// mount's target (read-only mounts refuse writes).
//
//	trap '' SIG...       ignore those signals (e.g. trap '' TERM); trap - SIG... restores
//
// The script ends with the status of its last statement, as bash does. An
// unknown command writes "bash: X: command not found" to stderr (status 127)
// and the script goes on. Fake-only directives:
//
//	oom           end at once as the kernel's OOM killer would: exit 137, OOMKilled
//	ignore-term   same as trap '' TERM
//	hang-start    Start blocks, with the container created, until Gate(JobID).Release()
//	              or Start's ctx ends (then Start fails and the container is removed)
//
// Signals: Signal("KILL") ends the process with 137; any other signal ends it
// with 128+n unless the script ignores it. Removing the container (Destroy,
// Runtime.Remove) kills the process; the handle then reports ExitCode -1
// (the container was gone when its end was inspected, as with Docker), with
// Gone set unless the removal was the handle's own Destroy.
//
// # Hooks
//
// Hooks live on the Engine (shared by every Runtime made from it, like a
// Docker daemon shared by several servers) and are safe to change while
// sandboxes run: SetDown (Ping, Start, Adopt, List, Remove, Signal and
// ImageExists fail with *sandbox.EngineError, and handles that are waiting lose
// the engine: their Status has Err), SetBeforeStart (runs inside Start after
// create; may block or fail it), Gate (see hang-start), SetRemoveError
// (removals fail), SetImageMissing, and StartDetached (a container no handle
// watches, as a crashed server leaves it, for Adopt and Recover tests).
package fake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Host is what EngineErrors name as the engine's address.
const Host = "fake://engine"

const (
	// drainTimeout bounds how long a handle waits for output after the end (as docker).
	drainTimeout = 5 * time.Second
	// stdinBuffer is how many unread stdin bytes a container holds before writes block.
	stdinBuffer = 64 << 10
)

// Engine is the shared state of fake containers: one per "Docker daemon".
type Engine struct {
	mu         sync.Mutex
	containers map[string]*container
	seq        int // creation order, for List
	down       bool
	downCh     chan struct{}   // closed when the engine goes down; replaced when it comes back
	missing    map[string]bool // by ref: SetImageMissing's, builds' and removals' word
	// missingPrefixes are SetImageMissing's namespaces ("ref*").
	missingPrefixes map[string]bool
	beforeStart     func(ctx context.Context, spec sandbox.Spec) error
	removeErr       func(c sandbox.Container) error
	gates           map[string]*Gate
	volumes         Volumes
	images          map[string]*image // built or committed, by tag
	building        map[string]bool   // SetImageBuilding's
	capacity        int64             // SetCapacity's node, in nanoCPUs (0: no limit)
	roomFreed       chan struct{}     // closed and replaced when a container ends or goes
}

// NewEngine makes an empty engine that is up and has every image.
func NewEngine() *Engine {
	return &Engine{
		containers:      map[string]*container{},
		downCh:          make(chan struct{}),
		missing:         map[string]bool{},
		missingPrefixes: map[string]bool{},
		gates:           map[string]*Gate{},
		images:          map[string]*image{},
		building:        map[string]bool{},
	}
}

// Runtime is one server's view of an engine: it labels what it makes with its
// instance and server identity, and lists only its instance's containers.
type Runtime struct {
	*Engine
	instance string
	server   string
	egress   Egress
	// egressTunnel serves TunnelEgress's proxy to sandboxes on network
	// egress (EgressTunnelled).
	egressTunnel atomic.Pointer[served]
}

var _ sandbox.Engine = (*Runtime)(nil)

// Host is the fake engine's address.
func (r *Runtime) Host() string { return Host }

// Capabilities: every part an engine may have; the egress parts are those
// of the engine shape WithEgress chose.
func (r *Runtime) Capabilities() sandbox.Capabilities {
	c := sandbox.Capabilities{Warm: r, Workspaces: r, Freezer: r, Checkpointer: r, Volumes: r, Processes: r, Images: r, SandboxImages: r}
	r.mu.Lock()
	if r.capacity > 0 {
		c.Capacity = r
	}
	r.mu.Unlock()
	switch r.egress {
	case EgressGateway:
		c.EgressNetwork = r
	case EgressTunnelled:
		c.EgressTunnel, c.TunnelInstalls, c.VolumeFiller = r, r, r
	}
	return c
}

// WithEgress gives the runtime the egress parts of an engine shape (before
// its first use) and returns it.
func (r *Runtime) WithEgress(e Egress) *Runtime {
	r.egress = e
	return r
}

// New makes a runtime on a fresh engine.
func New(instance string) *Runtime { return NewEngine().Runtime(instance, "") }

// Runtime makes a runtime on this engine (another server process, or the same
// server after a restart).
func (e *Engine) Runtime(instance, server string) *Runtime {
	return &Runtime{Engine: e, instance: instance, server: server}
}

func engineDown() error {
	return &sandbox.EngineError{Host: Host, Err: errors.New("connection refused (fake engine is down)")}
}

// SetDown takes the engine down (true) or brings it back. Going down breaks
// every handle's connection: waiting handles end with Status().Err set, while
// their containers go on running, as with a daemon restarted with live-restore.
func (e *Engine) SetDown(down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if down == e.down {
		return
	}
	e.down = down
	if down {
		close(e.downCh)
	} else {
		e.downCh = make(chan struct{})
	}
}

// SetBeforeStart installs a hook run inside Start after the container is
// created and before it runs. An error fails the Start (the container is
// removed) and is returned wrapped; the hook may block, honouring ctx. nil removes it.
func (e *Engine) SetBeforeStart(f func(ctx context.Context, spec sandbox.Spec) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.beforeStart = f
}

// SetRemoveError makes every removal of an existing container (Remove,
// Destroy, a handle's cleanup after the end) fail with f's error when f
// returns one; the container stays. nil removes the hook.
func (e *Engine) SetRemoveError(f func(c sandbox.Container) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.removeErr = f
}

// SetImageMissing marks an image as not present (missing=true) or present.
// A ref ending in "*" marks every image it is a prefix of (those built or
// marked one by one since are present or not as that says): a namespace
// whose images exist only once built, such as templates'.
func (e *Engine) SetImageMissing(ref string, missing bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if prefix, ok := strings.CutSuffix(ref, "*"); ok {
		e.missingPrefixes[prefix] = missing
		return
	}
	e.missing[ref] = missing
}

// SetImageBuilding marks an image as being built (true) or not: until then
// it is missing, and ImageExists and a start on it answer with an
// *sandbox.ImageError whose Building is set, as the Docker runtime's do while
// serve --build-images makes its images.
func (e *Engine) SetImageBuilding(ref string, building bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.building[ref] = building
}

// imageErrLocked is why a sandbox cannot start on ref (nil: it can; e.mu held).
func (e *Engine) imageErrLocked(ref string) error {
	if e.building[ref] {
		return &sandbox.ImageError{Image: ref, Building: true}
	}
	if !e.presentLocked(ref) {
		return &sandbox.ImageError{Image: ref}
	}
	return nil
}

// presentLocked says whether the engine has image ref (e.mu held).
func (e *Engine) presentLocked(ref string) bool {
	if missing, ok := e.missing[ref]; ok {
		return !missing
	}
	for prefix, missing := range e.missingPrefixes {
		if missing && strings.HasPrefix(ref, prefix) {
			return false
		}
	}
	return true
}

// Exists says whether a container with this id exists (running or not).
func (e *Engine) Exists(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.containers[id] != nil
}

// Count is the number of containers that exist.
func (e *Engine) Count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.containers)
}

// Gate holds the Start of one job whose script says hang-start.
type Gate struct {
	entered, released      chan struct{}
	enterOnce, releaseOnce sync.Once
}

// Gate returns the start gate of the job with this id (made on first use, by
// the test or by Start, whichever comes first).
func (e *Engine) Gate(jobID string) *Gate {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.gates[jobID]
	if g == nil {
		g = &Gate{entered: make(chan struct{}), released: make(chan struct{})}
		e.gates[jobID] = g
	}
	return g
}

// Entered is closed once a Start is blocked at the gate.
func (g *Gate) Entered() <-chan struct{} { return g.entered }

// Release lets the blocked Start (or a later one) go on; idempotent.
func (g *Gate) Release() { g.releaseOnce.Do(func() { close(g.released) }) }

func newID() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (r *Runtime) Ping(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return engineDown()
	}
	return nil
}

func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return false, engineDown()
	}
	if err := r.imageErrLocked(ref); err != nil {
		if ie := (*sandbox.ImageError)(nil); errors.As(err, &ie) && ie.Building {
			return false, err
		}
		return false, nil
	}
	return true, nil
}

// Close stops serving the egress tunnel; sandboxes go on as they are.
func (r *Runtime) Close() error {
	if s := r.egressTunnel.Swap(nil); s != nil {
		s.shutdown()
	}
	return nil
}

// create registers a container that does not run yet.
func (r *Runtime) create(spec sandbox.Spec) (*container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return nil, engineDown()
	}
	if err := r.imageErrLocked(spec.Image); err != nil {
		return nil, err
	}
	if err := r.fitsLocked(spec); err != nil {
		return nil, err
	}
	r.seq++
	c := newContainer(r.Engine, sandbox.Container{
		ID: newID(), JobID: spec.JobID, Kind: spec.Kind, Instance: r.instance, Server: r.server,
	}, spec, r.seq)
	c.reach = r.reachOf(spec.Network)
	c.fs = r.rootFiles(spec.Image, spec.Mounts)
	r.containers[c.info.ID] = c
	return c, nil
}

// Start creates the container, runs the start hooks, then starts the script
// with the handle's output follower and wait in place, so nothing is missed.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	c, err := r.createWhenRoom(ctx, spec)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (sandbox.Handle, error) {
		_, _ = r.remove(context.Background(), c.info.ID, false)
		return nil, fmt.Errorf("start container: %w", err)
	}
	r.mu.Lock()
	hook := r.beforeStart
	r.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, spec); err != nil {
			return fail(err)
		}
	}
	if c.prog.hangStart {
		g := r.Gate(spec.JobID)
		g.enterOnce.Do(func() { close(g.entered) })
		select {
		case <-g.released:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	r.mu.Lock()
	switch {
	case r.down:
		r.mu.Unlock()
		return fail(engineDown())
	case r.containers[c.info.ID] == nil:
		r.mu.Unlock()
		return nil, fmt.Errorf("start container: no such container: %s", c.info.ID)
	}
	downCh := r.downCh
	r.mu.Unlock()
	return r.run(c, downCh, spec.OpenStdin, out), nil
}

// run starts c's script with its handle's output follower and wait in place.
func (r *Runtime) run(c *container, downCh <-chan struct{}, stdin bool, out sandbox.Output) sandbox.Handle {
	h := newHandle(r.Engine, c, downCh, stdin)
	go h.follow(out, 0, 0, 0)
	go h.waitForEnd()
	c.start()
	return h
}

// StartDetached starts a container that no handle watches, attaches to or
// removes, as a crashed server leaves one behind: its output goes only to the
// engine's log (unless spec.EngineLog is "none"), for a later Adopt.
func (r *Runtime) StartDetached(spec sandbox.Spec) (string, error) {
	c, err := r.create(spec)
	if err != nil {
		return "", err
	}
	c.start()
	return c.info.ID, nil
}

// Adopt follows a container another runtime started: its log is replayed
// after the bytes already captured (or, with EngineLog "none", live output is
// followed from now on) until it ends.
func (r *Runtime) Adopt(ctx context.Context, containerID string, skipStdout, skipStderr int64, out sandbox.Output) (sandbox.Handle, error) {
	r.mu.Lock()
	if r.down {
		r.mu.Unlock()
		return nil, engineDown()
	}
	c := r.containers[containerID]
	downCh := r.downCh
	r.mu.Unlock()
	if c == nil {
		return nil, sandbox.ErrNotFound
	}
	if c.info.Instance != r.instance {
		return nil, fmt.Errorf("container %s does not belong to this server", containerID)
	}
	// Stdin does not survive the attach of the process that started it,
	// but for a workspace's job: its daemon keeps it for the next server.
	_, kept := sandbox.WorkspaceJob(containerID)
	h := newHandle(r.Engine, c, downCh, kept)
	h.kept = kept
	if c.engineLog {
		go h.follow(out, 0, skipStdout, skipStderr)
	} else {
		go h.follow(out, c.logLen(), 0, 0)
	}
	go h.waitForEnd()
	return h, nil
}

// List returns the containers labelled with this runtime's instance (all
// managed ones when the instance is ""), in creation order.
func (r *Runtime) List(ctx context.Context) ([]sandbox.Container, error) {
	r.mu.Lock()
	if r.down {
		r.mu.Unlock()
		return nil, engineDown()
	}
	cs := make([]*container, 0, len(r.containers))
	for id, c := range r.containers {
		if _, isJob := sandbox.WorkspaceJob(id); isJob {
			continue // a workspace's job: its container is the workspace's
		}
		if r.instance == "" || c.info.Instance == r.instance {
			cs = append(cs, c)
		}
	}
	r.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool { return cs[i].seq < cs[j].seq })
	out := make([]sandbox.Container, 0, len(cs))
	for _, c := range cs {
		info := c.info
		info.Running = c.isRunning()
		out = append(out, info)
	}
	return out, nil
}

// Remove kills and removes a container by id; an unknown id is success.
func (r *Runtime) Remove(ctx context.Context, containerID string) error {
	_, err := r.remove(ctx, containerID, true)
	return err
}

// remove also says whether the container was already gone. It returns once
// the process has ended and the container is gone.
func (e *Engine) remove(ctx context.Context, id string, hooked bool) (alreadyGone bool, err error) {
	e.mu.Lock()
	if e.down {
		e.mu.Unlock()
		return false, engineDown()
	}
	c := e.containers[id]
	if c == nil {
		e.mu.Unlock()
		return true, nil
	}
	if e.removeErr != nil && hooked {
		if err := e.removeErr(c.info); err != nil {
			e.mu.Unlock()
			return false, err
		}
	}
	// Gone from the engine's view before the process dies: whoever inspects
	// after the end finds no container, as with a forced Docker removal.
	delete(e.containers, id)
	e.mu.Unlock()
	e.roomChanged()
	c.kill()
	select {
	case <-c.exited:
		return false, nil
	case <-ctx.Done():
		return false, fmt.Errorf("container %s is still being removed: %w", id, ctx.Err())
	}
}

// lookup returns a container that exists, or nil.
func (e *Engine) lookup(id string) (*container, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.containers[id], e.down
}

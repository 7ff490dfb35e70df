// Package containerd implements sandbox.Runtime straight on containerd,
// through its Go client: no Docker engine between the server and runc. It
// is the only package that imports the containerd client. Sandboxes are
// containers with a task whose process is the supervisor, its streams an
// ioDir (io.go), its OCI spec the hardening profile (spec.go).
package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

const (
	// DefaultAddress is the socket of the containerd that scripts/containerd.sh starts.
	DefaultAddress = "/run/sandboxer-containerd/containerd.sock"
	// DefaultNamespace is containerd's namespace of everything this runtime makes.
	DefaultNamespace = "sandboxer"
	// ioRootBase holds each sandbox's stream directory, by namespace.
	ioRootBase = "/run/sandboxer-containerd/io"
	// shimRuntime is containerd's runc shim.
	shimRuntime = "io.containerd.runc.v2"
	// cleanupTimeout bounds the calls made after the caller's context is gone.
	cleanupTimeout = 30 * time.Second
	// drainTimeout bounds how long we wait for output after the process ended.
	drainTimeout = 5 * time.Second
	// defaultLogBytes is what a sandbox's output file keeps of what was read.
	defaultLogBytes = 16 << 20
)

// Config says which containerd, and which of its namespaces.
type Config struct {
	Address   string // its socket; "" = DefaultAddress
	Namespace string // "" = DefaultNamespace
	// Runc is the runc binary the shim runs for sandboxes ("" = the one on
	// containerd's PATH); the engine's other containers keep theirs.
	Runc string
}

// PatchedRunc is where the project's setup (scripts/runc.sh) installs a
// current runc when the host's has known escapes.
const PatchedRunc = "/usr/local/lib/sandboxer/runc"

// Runtime runs sandboxes as containerd containers.
type Runtime struct {
	cli      *client.Client
	address  string
	ns       string
	instance string // value of sandbox.LabelInstance on everything this server makes
	runc     string // Config.Runc
	server   string // value of sandbox.LabelServer: this server process
	ioRoot   string
	watch    *watcher
	onError  func(operation string)
	// egressProxy serves the egress tunnels (egress.go); nil: none.
	egressProxy http.Handler

	imagesMu sync.Mutex
	images   map[string]client.Image // by normalized reference, once unpacked

	removeMu  sync.Mutex
	removals  map[string]chan struct{} // container id -> closed when its removal ends
	removeWG  sync.WaitGroup           // removeLater's under way
	closeOnce sync.Once
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithServer labels everything this runtime makes with the server process's identity.
func WithServer(id string) Option { return func(r *Runtime) { r.server = id } }

// WithErrorHook tells f of each failed containerd call, by operation.
func WithErrorHook(f func(operation string)) Option { return func(r *Runtime) { r.onError = f } }

var _ sandbox.Engine = (*Runtime)(nil)

// New makes a runtime for containerd at cfg.Address. It succeeds while
// containerd is down (the connection is made on first use), so a server can
// start and recover once it is back.
func New(instance string, cfg Config, opts ...Option) (*Runtime, error) {
	if cfg.Address == "" {
		cfg.Address = DefaultAddress
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	cli, err := client.New(cfg.Address, client.WithDefaultNamespace(cfg.Namespace), client.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd client for %s: %w", cfg.Address, err)
	}
	w, err := newWatcher()
	if err != nil {
		cli.Close()
		return nil, err
	}
	r := &Runtime{cli: cli, address: cfg.Address, ns: cfg.Namespace, instance: instance, runc: cfg.Runc,
		ioRoot: filepath.Join(ioRootBase, cfg.Namespace), watch: w,
		images: map[string]client.Image{}, removals: map[string]chan struct{}{}}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Host says where containerd is, and the namespace.
func (r *Runtime) Host() string { return "unix://" + r.address + " (namespace " + r.ns + ")" }

// Capabilities: a warm pool and the egress tunnel. Workspaces, volumes,
// process listing and template builds are Docker's (and partly
// Kubernetes') for now: see docs/engines.md.
func (r *Runtime) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Warm: r, EgressTunnel: r}
}

// Close waits (bounded) for removals under way, then closes the client.
// Running sandboxes keep running: a later server adopts them.
func (r *Runtime) Close() error {
	var err error
	r.closeOnce.Do(func() {
		done := make(chan struct{})
		go func() { r.removeWG.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(cleanupTimeout):
		}
		r.watch.close()
		err = r.cli.Close()
	})
	return err
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
	if errdefs.IsUnavailable(err) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) && strings.Contains(err.Error(), "dial") {
		return &sandbox.EngineError{Host: r.Host(), Err: err, Hint: "start it (scripts/containerd.sh, or systemctl start containerd) or set containerd.address"}
	}
	return err
}

func (r *Runtime) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.cli.Version(ctx); err != nil {
		return &sandbox.EngineError{Host: r.Host(), Err: err, Hint: "start it (scripts/containerd.sh, or systemctl start containerd) or set containerd.address"}
	}
	return nil
}

// normalize is ref as containerd names it ("sandboxer/base:x" is
// "docker.io/sandboxer/base:x", as `ctr images import` of a `docker save` names it).
func normalize(ref string) string {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(n).String()
}

func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	_, err := r.cli.GetImage(ctx, normalize(ref))
	if err == nil {
		return true, nil
	}
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return false, r.engineErr(err)
}

// image is ref's image, unpacked for the default snapshotter (once).
func (r *Runtime) image(ctx context.Context, ref string) (client.Image, error) {
	ref = normalize(ref)
	r.imagesMu.Lock()
	img, ok := r.images[ref]
	r.imagesMu.Unlock()
	if ok {
		return img, nil
	}
	img, err := r.cli.GetImage(ctx, ref)
	if errdefs.IsNotFound(err) {
		return nil, &imageError{sandbox.ImageError{Image: ref}}
	}
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("get image %s: %w", ref, err))
	}
	if unpacked, err := img.IsUnpacked(ctx, ""); err != nil || !unpacked {
		if err := img.Unpack(ctx, ""); err != nil {
			return nil, r.engineErr(fmt.Errorf("unpack image %s: %w", ref, err))
		}
	}
	r.imagesMu.Lock()
	r.images[ref] = img
	r.imagesMu.Unlock()
	return img, nil
}

// imageError says how an image reaches containerd: from the Docker engine.
type imageError struct{ sandbox.ImageError }

func (e *imageError) Error() string {
	return fmt.Sprintf("image %s is not in containerd: build it (make images) and copy it over from the Docker engine (bash scripts/containerd.sh)", e.Image)
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

// check refuses what this runtime cannot give a sandbox, naming it.
func (r *Runtime) check(spec sandbox.Spec) error {
	switch spec.Network {
	case "", "none":
	case sandbox.NetworkEgress:
		if r.egressProxy == nil {
			return errors.New("network egress: this server runs no egress proxy (policy key egress.allow is empty)")
		}
	default:
		return fmt.Errorf("network %q: backend containerd runs sandboxes with no network (loopback only) but the egress tunnel (network egress)", spec.Network)
	}
	if spec.Runtime != "" {
		return fmt.Errorf("runtime %q: backend containerd runs runc through containerd's runc shim only", spec.Runtime)
	}
	if spec.Workspace != "" {
		return fmt.Errorf("workspace %q: backend containerd has no workspaces", spec.Workspace)
	}
	for _, m := range spec.Mounts {
		if m.Source == "" || !filepath.IsAbs(m.Source) {
			return fmt.Errorf("mount at %s: backend containerd mounts granted host directories only, not volumes", m.Target)
		}
	}
	return nil
}

func newID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *Runtime) List(ctx context.Context) ([]sandbox.Container, error) {
	// A runtime made without an instance (tools, tests) sees every server's sandboxes.
	filter := fmt.Sprintf("labels.%q==true", sandbox.LabelManaged)
	if r.instance != "" {
		filter = fmt.Sprintf("labels.%q==%s", sandbox.LabelInstance, r.instance)
	}
	cs, err := r.cli.Containers(ctx, filter)
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("list containers: %w", err))
	}
	var out []sandbox.Container
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if errdefs.IsNotFound(err) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, r.engineErr(err)
		}
		running := false
		if t, err := c.Task(ctx, nil); err == nil {
			if st, err := t.Status(ctx); err == nil {
				running = st.Status == client.Running || st.Status == client.Created || st.Status == client.Paused
			}
		}
		out = append(out, sandbox.Container{
			ID:       c.ID(),
			JobID:    labels[sandbox.LabelJobID],
			Kind:     labels[sandbox.LabelKind],
			Instance: labels[sandbox.LabelInstance],
			Server:   labels[sandbox.LabelServer],
			Running:  running,
		})
	}
	return out, nil
}

// Remove kills and removes a container; a container already gone is success.
func (r *Runtime) Remove(ctx context.Context, containerID string) error {
	_, err := r.remove(ctx, containerID)
	return err
}

// remove also says whether the container was already gone or being removed
// by another call (which it waits for): on a nil error it is gone.
func (r *Runtime) remove(ctx context.Context, id string) (alreadyGone bool, err error) {
	r.removeMu.Lock()
	if ch, ok := r.removals[id]; ok {
		r.removeMu.Unlock()
		select {
		case <-ch:
			return true, nil
		case <-ctx.Done():
			return true, fmt.Errorf("container %.12s is still being removed: %w", id, ctx.Err())
		}
	}
	ch := make(chan struct{})
	r.removals[id] = ch
	r.removeMu.Unlock()
	defer func() {
		r.removeMu.Lock()
		delete(r.removals, id)
		r.removeMu.Unlock()
		close(ch)
	}()
	c, err := r.cli.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		_ = r.ioDirOf(id).remove()
		return true, nil
	}
	if err != nil {
		return false, r.engineErr(fmt.Errorf("load container: %w", err))
	}
	if t, err := c.Task(ctx, nil); err == nil {
		// Kill all: the supervisor and everything it started.
		if _, err := t.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return false, r.engineErr(fmt.Errorf("delete task: %w", err))
		}
	} else if !errdefs.IsNotFound(err) {
		return false, r.engineErr(fmt.Errorf("load task: %w", err))
	}
	if err := c.Delete(ctx, client.WithSnapshotCleanup); err != nil {
		if errdefs.IsNotFound(err) {
			alreadyGone = true
		} else {
			return false, r.engineErr(fmt.Errorf("delete container: %w", err))
		}
	}
	_ = r.ioDirOf(id).remove()
	return alreadyGone, nil
}

// removeLater removes an ended container in the background: a job's result
// does not wait for it. Close waits for removals under way.
func (r *Runtime) removeLater(id string) {
	r.removeWG.Add(1)
	go func() {
		defer r.removeWG.Done()
		ctx, cancel := waitCtx()
		defer cancel()
		_ = r.Remove(ctx, id) // what fails here, the cleanup loop sweeps later
	}()
}

func (r *Runtime) removeQuietly(id string) {
	ctx, cancel := waitCtx()
	defer cancel()
	_ = r.Remove(ctx, id)
}

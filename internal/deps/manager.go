package deps

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// KindInstall labels an install sandbox.
const KindInstall = "deps-install"

// Cache outcomes.
const (
	CacheHit       = "hit"
	CacheInstalled = "installed"
)

// maxLogTail is how much of a failed install's output an error carries.
const maxLogTail = 4 << 10

// Result is a list made ready for a script.
type Result struct {
	List      []string
	Cache     string // CacheHit or CacheInstalled
	InstallMS int64
	Mount     sandbox.Mount
}

// Cache is one dependency cache volume.
type Cache struct {
	Key       string
	Volume    string
	Language  string
	Image     string
	List      []string
	SizeBytes int64 // -1 = unknown
	CreatedAt time.Time
	LastUsed  time.Time
}

type meta struct {
	size     int64
	lastUsed time.Time
}

// Manager installs and caches dependency lists.
type Manager struct {
	rt     sandbox.Runtime
	vr     sandbox.VolumeRuntime
	filler sandbox.TunnelVolumeFiller // nil: installs run in a plain sandbox on a network
	pol    *policy.Policy
	Options

	mu     sync.Mutex
	locks  map[string]chan struct{} // per key (capacity 1): one install at a time
	meta   map[string]*meta         // by volume: measured size, last use (this process)
	warmed []string                 // volumes told to Warm, most recent last
}

// Options are a manager's collaborators, all optional.
type Options struct {
	// Warm is told of each cache a script uses (so a warm pool can keep a
	// sandbox with it mounted); Unwarm when one stops being kept, and
	// before a cache's volume is removed (what mounts it must go first).
	Warm   func(language, image string, m sandbox.Mount)
	Unwarm func(ctx context.Context, volume string)
	// Observer is told of each dependency install and whether it
	// succeeded (as manager "deps-LANGUAGE").
	Observer observe.Observer
	// TunnelProxy grants an install on an engine whose sandboxes have no
	// network (Capabilities.VolumeFiller) the proxy its tunnel reaches,
	// until revoke.
	TunnelProxy func(ctx context.Context, job string) (proxy http.Handler, revoke func())
}

// MaxWarm is how many caches (the most recently used) are kept warm.
const MaxWarm = 4

// used tells Warm of a cache in use and Unwarms the least recent past MaxWarm.
func (m *Manager) used(language, image string, mt sandbox.Mount) {
	if m.Warm == nil {
		return
	}
	m.mu.Lock()
	m.warmed = append(slices.DeleteFunc(m.warmed, func(v string) bool { return v == mt.Volume }), mt.Volume)
	var drop []string
	if n := len(m.warmed) - MaxWarm; n > 0 {
		drop = slices.Clone(m.warmed[:n])
		m.warmed = m.warmed[n:]
	}
	m.mu.Unlock()
	m.Warm(language, image, mt)
	for _, v := range drop {
		if m.Unwarm != nil {
			m.Unwarm(context.Background(), v)
		}
	}
}

// New returns a manager, or nil when the engine keeps no volumes.
func New(e sandbox.Engine, pol *policy.Policy, o Options) *Manager {
	caps := e.Capabilities()
	if caps.Volumes == nil {
		return nil
	}
	return &Manager{rt: e, vr: caps.Volumes, filler: caps.VolumeFiller, pol: pol, Options: o,
		locks: map[string]chan struct{}{}, meta: map[string]*meta{}}
}

func (m *Manager) lock(key string) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.locks[key]
	if l == nil {
		l = make(chan struct{}, 1)
		m.locks[key] = l
	}
	return l
}

func (m *Manager) touch(volume string, size int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	md := m.meta[volume]
	if md == nil {
		md = &meta{size: -1}
		m.meta[volume] = md
	}
	md.lastUsed = time.Now()
	if size >= 0 {
		md.size = size
	}
}

// Ensure returns the cache of a normalised list, installing it first when
// there is none. Concurrent calls for the same key install once.
func (m *Manager) Ensure(ctx context.Context, language, image string, list []string) (Result, error) {
	script, err := InstallScript(language, m.pol.Scripts.PipIndexURL)
	if err != nil {
		return Result{}, err
	}
	key := Key(language, image, list)
	res := Result{List: list, Mount: sandbox.Mount{Target: Dir, ReadOnly: true}}
	l := m.lock(key)
	select {
	case l <- struct{}{}:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("dependencies: %s is being installed for another call and was not ready before this one ended; call again", strings.Join(list, " "))
	}
	locked := true
	defer func() {
		if locked {
			<-l
		}
	}()
	vols, err := m.vr.ListVolumes(ctx, LabelKey+"="+key)
	if err != nil {
		return Result{}, err
	}
	if len(vols) > 0 {
		name := vols[0].Name
		res.Mount.Volume = name
		m.touch(name, -1)
		res.Cache = CacheHit
		m.used(language, image, res.Mount)
		return res, nil
	}
	// Names are the engine's, shared by every instance: a fresh one each install.
	name := VolumeName(language, key)
	res.Mount.Volume = name
	// The install goes on when the call ends first (a client's request
	// timeout): the next call with the list then finds it, or waits for it.
	type outcome struct {
		ms  int64
		err error
	}
	done := make(chan outcome, 1)
	locked = false // the install releases the key
	go func() {
		ictx := context.WithoutCancel(ctx)
		t0 := time.Now()
		size, err := m.install(ictx, language, image, key, name, script, list)
		if m.Observer != nil {
			m.Observer.Install("deps-"+language, err == nil)
		}
		if err == nil {
			m.touch(name, size)
			_, _ = m.enforceCap(ictx, name) // best effort
			m.used(language, image, res.Mount)
		}
		// Released before the outcome: a caller that has it may prune at once.
		<-l
		done <- outcome{time.Since(t0).Milliseconds(), err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			return Result{}, o.err
		}
		res.Cache, res.InstallMS = CacheInstalled, o.ms
		return res, nil
	case <-ctx.Done():
		return Result{}, fmt.Errorf("dependencies: installing %s did not finish before the call ended; it goes on (up to scripts.dependency_install_timeout_s): call again to use it", strings.Join(list, " "))
	}
}

var sizeLine = regexp.MustCompile(`sandboxer-deps-size-kb=([0-9]+)`)

func (m *Manager) install(ctx context.Context, language, image, key, name, script string, list []string) (int64, error) {
	labels := map[string]string{LabelKey: key, LabelLanguage: language, LabelImage: image, LabelList: strings.Join(list, " ")}
	if err := m.vr.CreateVolume(ctx, name, labels); err != nil {
		return 0, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = m.vr.RemoveVolume(context.WithoutCancel(ctx), name)
		}
	}()
	limits, err := m.pol.Resolve(policy.Request{})
	if err != nil {
		return 0, err
	}
	timeout := time.Duration(m.pol.Scripts.DependencyInstallTimeoutS) * time.Second
	env := []string{fmt.Sprintf("%s=%d", PrebuildEnv, max(timeout/time.Second/3, 1))}
	if f := m.pol.Scripts.InstallCAFile; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return 0, fmt.Errorf("dependencies: scripts.install_ca_file: %v", err)
		}
		env = append(env, CAEnv+"="+string(pem))
	}
	spec := sandbox.Spec{
		JobID: "deps-" + key, Kind: KindInstall, Image: image,
		Cmd: append([]string{"bash", "-c", script, "sandboxer-deps"}, list...), Env: env,
		WorkDir: "/tmp", Network: "bridge", Runtime: m.pol.Runtime, EngineLog: "none",
		Limits:  job.SandboxLimits(limits, 1<<20),
		Timeout: timeout,
		Mounts:  []sandbox.Mount{{Volume: name, Target: installDir}},
	}
	var out, why string
	if m.filler != nil {
		out, why, err = m.fillThroughTunnel(ctx, m.filler, spec)
	} else {
		out, why, err = m.fillInSandbox(ctx, spec)
	}
	if err != nil {
		return 0, err
	}
	if why != "" {
		return 0, fmt.Errorf("dependencies: installing %s failed (%s); its log ends:\n%s", strings.Join(list, " "), why, tail(out, maxLogTail))
	}
	mm := sizeLine.FindStringSubmatch(out)
	if mm == nil {
		return 0, fmt.Errorf("dependencies: the install reported no size; its log ends:\n%s", tail(out, maxLogTail))
	}
	kb, _ := strconv.ParseInt(mm[1], 10, 64)
	ok = true
	return kb << 10, nil
}

// fillInSandbox runs the install as a sandbox of its own (spec's network
// reaches the registries). It returns the install's output and, when it
// failed, why.
func (m *Manager) fillInSandbox(ctx context.Context, spec sandbox.Spec) (out, why string, err error) {
	buf := &sandbox.Buffer{Max: 1 << 20}
	ictx, cancel := context.WithTimeout(ctx, spec.Timeout+30*time.Second)
	defer cancel()
	h, err := m.rt.Start(ictx, spec, buf)
	if err != nil {
		return "", "", fmt.Errorf("dependencies: the install sandbox did not start: %w", err)
	}
	select {
	case <-h.Done():
	case <-ictx.Done():
		_ = h.Destroy(context.WithoutCancel(ctx))
		return "", "", fmt.Errorf("dependencies: the install did not finish: %v", ictx.Err())
	}
	st := h.Status()
	out = buf.Stdout() + buf.Stderr()
	switch {
	case st.TimedOut:
		why = fmt.Sprintf("timed out after %s (scripts.dependency_install_timeout_s)", spec.Timeout)
	case st.OOMKilled:
		why = "ran out of memory"
	case st.StartErr != nil:
		why = st.StartErr.Error()
	case st.Err != nil:
		why = st.Err.Error()
	case st.ExitCode != 0:
		why = fmt.Sprintf("exit code %d", st.ExitCode)
	}
	return out, why, nil
}

// fillThroughTunnel runs the install in a filler sandbox with no network:
// its command reaches the registries through the tunnel to the server's
// proxy (TunnelProxy), as a workspace's installs do on such a runtime.
func (m *Manager) fillThroughTunnel(ctx context.Context, tf sandbox.TunnelVolumeFiller, spec sandbox.Spec) (out, why string, err error) {
	if m.TunnelProxy == nil {
		return "", "", errors.New("dependencies: installs on this backend go through the tunnel to the server's proxy, and this server has none")
	}
	sctx, cancel := context.WithTimeout(ctx, spec.Timeout+30*time.Second)
	defer cancel()
	id, err := tf.StartFiller(sctx, spec)
	if err != nil {
		return "", "", fmt.Errorf("dependencies: the install sandbox did not start: %w", err)
	}
	defer func() {
		// Removing it ends whatever the install left running.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer rcancel()
		_ = tf.Remove(rctx, id)
	}()
	proxy, revoke := m.TunnelProxy(ctx, spec.JobID)
	defer revoke()
	buf := &sandbox.Buffer{Max: 1 << 20}
	w := bufferWriter{buf}
	xctx, xcancel := context.WithTimeout(sctx, spec.Timeout)
	defer xcancel()
	code, err := tf.Exec(xctx, id, sandbox.ExecOptions{Cmd: spec.Cmd, Env: spec.Env, Stdout: w, Stderr: w, Proxy: proxy})
	switch {
	case xctx.Err() != nil:
		why = fmt.Sprintf("timed out after %s (scripts.dependency_install_timeout_s)", spec.Timeout)
	case err != nil:
		why = err.Error()
	case code == 137:
		why = "exit code 137: killed (out of memory?)"
	case code != 0:
		why = fmt.Sprintf("exit code %d", code)
	}
	return buf.Stdout(), why, nil
}

// bufferWriter writes to a Buffer's stdout.
type bufferWriter struct{ b *sandbox.Buffer }

func (w bufferWriter) Write(p []byte) (int, error) {
	w.b.Write(sandbox.Stdout, p)
	return len(p), nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// List returns every dependency cache, least recently used first.
func (m *Manager) List(ctx context.Context) ([]Cache, error) {
	vols, err := m.vr.ListVolumes(ctx, LabelKey)
	if err != nil {
		return nil, err
	}
	var sizes map[string]int64
	out := make([]Cache, 0, len(vols))
	for _, v := range vols {
		c := Cache{Key: v.Labels[LabelKey], Volume: v.Name, Language: v.Labels[LabelLanguage], Image: v.Labels[LabelImage],
			List: strings.Fields(v.Labels[LabelList]), SizeBytes: -1, CreatedAt: v.CreatedAt, LastUsed: v.CreatedAt}
		m.mu.Lock()
		if md := m.meta[v.Name]; md != nil {
			c.SizeBytes, c.LastUsed = md.size, md.lastUsed
		}
		m.mu.Unlock()
		if c.SizeBytes < 0 {
			if sizes == nil {
				if sizes, err = m.vr.VolumeSizes(ctx); err != nil {
					sizes = map[string]int64{}
				}
			}
			if s, ok := sizes[v.Name]; ok {
				c.SizeBytes = s
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Cache) int { return a.LastUsed.Compare(b.LastUsed) })
	return out, nil
}

// Prune removes the caches whose keys are given (all when keys is empty),
// skipping those an install holds. It returns the removed caches.
func (m *Manager) Prune(ctx context.Context, keys []string) ([]Cache, error) {
	all, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	var removed []Cache
	var errs []error
	for _, c := range all {
		if len(keys) > 0 && !slices.Contains(keys, c.Key) {
			continue
		}
		if err := m.remove(ctx, c); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, c)
	}
	return removed, errors.Join(errs...)
}

func (m *Manager) remove(ctx context.Context, c Cache) error {
	l := m.lock(c.Key)
	select {
	case l <- struct{}{}:
		defer func() { <-l }()
	default:
		return fmt.Errorf("cache %s is in use by an install", c.Key)
	}
	if m.Unwarm != nil {
		m.Unwarm(ctx, c.Volume)
	}
	m.mu.Lock()
	m.warmed = slices.DeleteFunc(m.warmed, func(v string) bool { return v == c.Volume })
	m.mu.Unlock()
	if err := m.vr.RemoveVolume(ctx, c.Volume); err != nil {
		return fmt.Errorf("cache %s (volume %s) could not be removed (a running script may use it): %v", c.Key, c.Volume, err)
	}
	m.mu.Lock()
	delete(m.meta, c.Volume)
	m.mu.Unlock()
	return nil
}

// enforceCap removes least recently used caches (never keep) until the
// total is within scripts.dependency_cache_mb.
func (m *Manager) enforceCap(ctx context.Context, keep string) ([]Cache, error) {
	all, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	limit := m.pol.Scripts.DependencyCacheMB << 20
	var total int64
	for _, c := range all {
		total += max(c.SizeBytes, 0)
	}
	var removed []Cache
	for _, c := range all { // least recently used first
		if total <= limit {
			break
		}
		if c.Volume == keep {
			continue
		}
		if err := m.remove(ctx, c); err == nil {
			total -= max(c.SizeBytes, 0)
			removed = append(removed, c)
		}
	}
	return removed, nil
}

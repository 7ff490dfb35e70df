package gobuild

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/observe"
	"github.com/sandboxer/sandboxer/internal/output"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/script"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// Bounds of the builder.
const (
	// queueSize is how many builds may wait; later ones are dropped.
	queueSize = 8
	// remembered is how many builds are remembered as done (not built twice).
	remembered = 256
	// maxBuildTime bounds one build.
	maxBuildTime = 10 * time.Minute
)

// Cache gives fresh go sandboxes their tenant's shared build cache and
// fills it after them, one build at a time.
type Cache struct {
	rt  sandbox.Runtime
	vr  sandbox.VolumeRuntime
	pol *policy.Policy
	log zerolog.Logger

	mu      sync.Mutex
	volumes map[string]string // tenant key → volume name
	done    []string          // build keys, most recent last

	queue  chan fill
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	observer observe.Observer // told of each build (as manager "go-build-cache")
}

type fill struct {
	key           string // Build.key: built once
	volume, image string
	limits        policy.Resolved
	timeout       time.Duration
	build         Build
}

// buildSlack is what a build may take beyond its job's own time: a build
// compiles what its job compiled, so a job cannot buy much more of the
// builder's time than it spent itself.
const buildSlack = 30 * time.Second

// New returns a cache, or nil when the policy turns it off
// (scripts.go_build_cache_mb 0) or the engine keeps no volumes. o (may be
// nil) is told of each build and whether it succeeded.
func New(e sandbox.Engine, pol *policy.Policy, log zerolog.Logger, o observe.Observer) *Cache {
	vr := e.Capabilities().Volumes
	if vr == nil || pol.Scripts.GoBuildCacheMB <= 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{rt: e, vr: vr, pol: pol, log: log, observer: observe.Or(o), volumes: map[string]string{},
		queue: make(chan fill, queueSize), ctx: ctx, cancel: cancel}
	c.wg.Add(1)
	go c.run()
	return c
}

// Close stops the builder (a build under way is cancelled, its sandbox removed).
func (c *Cache) Close() {
	c.cancel()
	c.wg.Wait()
}

// Extend gives a fresh go sandbox its tenant's cache, read-only, as a seed
// of its GOCACHEPROG, and has its go commands recorded (proto.GoBuildsEnv).
// A request of another language, in a workspace or with mounts is left as
// it is; so is one when the volume cannot be made (the job runs without).
func (c *Cache) Extend(ctx context.Context, req *job.Request) {
	if req.Language != "go" || req.Workspace != "" || len(req.Mounts) > 0 {
		// Not a fresh sandbox, or one whose builds need what the builder
		// would not have (a dependency cache, granted mounts).
		return
	}
	volume, err := c.volume(ctx, tenant.Owner(ctx))
	if err != nil {
		c.log.Warn().Err(err).Msg("shared go build cache: no volume; the job runs without")
		return
	}
	// The seeds the request has (its own environment's), else the image's.
	seeds := script.GoCacheSeed
	env := slices.DeleteFunc(slices.Clone(req.Env), func(kv string) bool {
		v, ok := strings.CutPrefix(kv, seedsEnv+"=")
		if ok {
			seeds = v
		}
		return ok
	})
	req.Env = append(env, seedsEnv+"="+seeds+":"+Current, proto.GoBuildsEnv+"="+BuildsFile)
	req.Mounts = append(slices.Clone(req.Mounts), sandbox.Mount{Volume: volume, Target: Dir, ReadOnly: true})
}

// seedsEnv is the GOCACHEPROG's list of read-only seeds.
const seedsEnv = "SANDBOXER_GOCACHE_SEEDS"

// volume finds or makes the tenant's volume.
func (c *Cache) volume(ctx context.Context, tenantName string) (string, error) {
	key := tenantKey(tenantName)
	c.mu.Lock()
	name := c.volumes[key]
	c.mu.Unlock()
	if name != "" {
		return name, nil
	}
	vols, err := c.vr.ListVolumes(ctx, LabelTenant+"="+key)
	if err != nil {
		return "", err
	}
	if len(vols) > 0 {
		slices.SortFunc(vols, func(a, b sandbox.Volume) int { return strings.Compare(a.Name, b.Name) })
		name = vols[0].Name
	} else {
		var r [4]byte
		_, _ = rand.Read(r[:])
		name = "sandboxer-gobuild-" + key[:12] + "-" + hex.EncodeToString(r[:])
		if err := c.vr.CreateVolume(ctx, name, map[string]string{LabelTenant: key}); err != nil {
			return "", err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev := c.volumes[key]; prev != "" {
		return prev, nil
	}
	c.volumes[key] = name
	return name, nil
}

// Ended queues the builds of a fresh go sandbox that had the cache (its
// request as Extend left it).
func (c *Cache) Ended(req job.Request, st sandbox.ExitStatus) {
	if len(st.GoBuilds) == 0 {
		return
	}
	i := slices.IndexFunc(req.Mounts, func(m sandbox.Mount) bool { return m.Target == Dir && m.Volume != "" })
	if i < 0 {
		return
	}
	for _, gb := range st.GoBuilds {
		b, err := Check(gb)
		if err != nil {
			c.log.Info().Err(err).Msg("shared go build cache: a job's go build is not built again")
			continue
		}
		timeout := min(maxBuildTime, time.Duration(c.pol.Limits.TimeoutS.Max)*time.Second,
			time.Duration(st.Usage.WallMS)*time.Millisecond+buildSlack)
		volume := req.Mounts[i].Volume
		f := fill{key: b.key(volume, req.Image), volume: volume, image: req.Image, limits: req.Limits, timeout: timeout, build: b}
		if c.seen(f.key) {
			continue
		}
		select {
		case c.queue <- f:
		default:
			c.log.Info().Msg("shared go build cache: builder busy; a build is dropped")
		}
	}
}

// seen says whether key was built (or queued) before, and remembers it.
func (c *Cache) seen(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Contains(c.done, key) {
		return true
	}
	c.done = append(c.done, key)
	if len(c.done) > remembered {
		c.done = c.done[len(c.done)-remembered:]
	}
	return false
}

func (c *Cache) run() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case f := <-c.queue:
			out, err := c.build(f)
			c.observer.Install("go-build-cache", err == nil)
			if err != nil {
				c.log.Info().Err(err).Str("dir", f.build.Dir).Bytes("output", headTail(out)).Msg("shared go build cache: build failed (what it compiled is kept)")
			} else {
				c.log.Debug().Str("dir", f.build.Dir).Msg("shared go build cache: built")
			}
		}
	}
}

// builderScript unpacks the module at its own path and runs the go command
// ("$@" after root and dir) with the volume's current generation as its
// GOCACHE (the GOCACHEPROG writes it; the image's seed is read). When the
// volume is over its size, a new empty generation becomes current; one that
// stopped being current longer ago than any job may run is removed.
const builderScript = `set -eu
root=$1 dir=$2; shift 2
cd ` + Dir + `
if [ ! -L current ]; then mkdir -p gen-1 && ln -s gen-1 current; fi
used=$(du -sk . | cut -f1)
if [ "$used" -gt "$SANDBOXER_GO_BUILD_CACHE_KB" ]; then
  old=$(readlink current); n=$(( ${old#gen-} + 1 ))
  mkdir "gen-$n" && ln -s "gen-$n" current.new && mv -T current.new current && touch "$old"
  echo "sandboxer: the shared build cache was over its size ($used KiB): generation $n is new"
fi
find . -maxdepth 1 -name 'gen-*' ! -name "$(readlink current)" -mmin +"$SANDBOXER_GO_BUILD_KEEP_MIN" -exec rm -rf {} +
mkdir -p "$root" && cd "$root" && tar -xzf - --no-same-owner --no-same-permissions
cd "$dir"
exec go "$@"
`

// headTail is a build's output as logged: its start and its end.
func headTail(out string) []byte {
	b, _ := output.HeadTail([]byte(out), 2048)
	return b
}

func (c *Cache) build(f fill) (string, error) {
	timeout := f.timeout
	keepMin := int64(c.pol.Limits.TimeoutS.Max/60) + 2
	env := []string{
		"GOCACHE=" + Current, seedsEnv + "=" + script.GoCacheSeed,
		// Only the image's settings: nothing of the job's environment.
		"GOENV=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0",
		fmt.Sprintf("SANDBOXER_GO_BUILD_CACHE_KB=%d", c.pol.Scripts.GoBuildCacheMB<<10),
		fmt.Sprintf("SANDBOXER_GO_BUILD_KEEP_MIN=%d", keepMin),
	}
	spec := sandbox.Spec{
		JobID: "gobuild-" + f.key[:16], Kind: KindBuilder, Image: f.image,
		Cmd: append([]string{"sh", "-c", builderScript, "sandboxer-go-build", f.build.Root, f.build.Dir}, f.build.Args...),
		Env: env, WorkDir: job.DefaultCwd, Network: "none", Runtime: c.pol.Runtime, EngineLog: "none",
		OpenStdin: true, Limits: job.SandboxLimits(f.limits, 1<<20), Timeout: timeout,
		Mounts: []sandbox.Mount{{Volume: f.volume, Target: Dir}},
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout+30*time.Second)
	defer cancel()
	buf := &sandbox.Buffer{Max: 64 << 10}
	h, err := c.rt.Start(ctx, spec, buf)
	if err != nil {
		return "", fmt.Errorf("the builder did not start: %w", err)
	}
	if _, err := h.WriteStdin(ctx, f.build.Source); err == nil {
		_ = h.CloseStdin()
	}
	select {
	case <-h.Done():
	case <-ctx.Done():
		_ = h.Destroy(context.WithoutCancel(ctx))
		<-h.Done()
		return buf.Stdout() + buf.Stderr(), fmt.Errorf("the build did not finish: %v", ctx.Err())
	}
	st := h.Status()
	out := buf.Stdout() + buf.Stderr()
	switch {
	case st.StartErr != nil:
		return out, st.StartErr
	case st.Err != nil:
		return out, st.Err
	case st.TimedOut:
		return out, fmt.Errorf("timed out after %v", timeout)
	case st.ExitCode != 0:
		return out, fmt.Errorf("exit code %d", st.ExitCode)
	}
	return out, nil
}

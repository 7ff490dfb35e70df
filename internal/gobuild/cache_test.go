package gobuild

import (
	"archive/tar"
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// volumes is the fake runtime with volumes, recording what it starts.
type volumes struct {
	*fake.Runtime
	mu      sync.Mutex
	started []sandbox.Spec
}

func (v *volumes) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	v.mu.Lock()
	v.started = append(v.started, spec)
	v.mu.Unlock()
	spec.Cmd = []string{"bash", "-c", "cat"} // the fake runs no sh script: it takes the source
	return v.Runtime.Start(ctx, spec, out)
}

func newCache(t *testing.T) (*Cache, *volumes) {
	t.Helper()
	rt := &volumes{Runtime: fake.New("test")}
	c := New(rt, policy.Default(), zerolog.Nop(), nil)
	if c == nil {
		t.Fatal("no cache with the default policy")
	}
	t.Cleanup(c.Close)
	return c, rt
}

// Extend gives fresh go jobs their tenant's volume read-only and records
// their builds; other jobs are left as they are.
func TestExtend(t *testing.T) {
	c, rt := newCache(t)
	alice := tenant.With(context.Background(), tenant.Tenant{Name: "alice"})
	bob := tenant.With(context.Background(), tenant.Tenant{Name: "bob"})
	req := job.Request{Language: "go", Env: []string{"A=1", seedsEnv + "=/deps/gocache"}}
	c.Extend(alice, &req)
	if len(req.Mounts) != 1 || req.Mounts[0].Target != Dir || !req.Mounts[0].ReadOnly {
		t.Fatalf("mounts %+v", req.Mounts)
	}
	if !slices.Equal(req.Env, []string{"A=1", seedsEnv + "=/deps/gocache:" + Current, proto.GoBuildsEnv + "=" + BuildsFile}) {
		t.Errorf("env %q", req.Env)
	}
	again := job.Request{Language: "go"}
	c.Extend(alice, &again)
	other := job.Request{Language: "go"}
	c.Extend(bob, &other)
	if again.Mounts[0].Volume != req.Mounts[0].Volume || other.Mounts[0].Volume == req.Mounts[0].Volume || rt.VolumeCount() != 2 {
		t.Errorf("one volume per tenant: alice %s and %s, bob %s; %d made", req.Mounts[0].Volume, again.Mounts[0].Volume, other.Mounts[0].Volume, rt.VolumeCount())
	}
	if again.Env[0] != seedsEnv+"=/usr/local/share/go-build-seed:"+Current {
		t.Errorf("env without seeds: %q", again.Env)
	}
	for name, r := range map[string]job.Request{
		"python":      {Language: "python"},
		"workspace":   {Language: "go", Workspace: "w"},
		"with mounts": {Language: "go", Mounts: []sandbox.Mount{{Volume: "deps", Target: "/deps", ReadOnly: true}}},
	} {
		before := len(r.Env)
		c.Extend(alice, &r)
		if len(r.Env) != before || slices.ContainsFunc(r.Mounts, func(m sandbox.Mount) bool { return m.Target == Dir }) {
			t.Errorf("%s: extended: %+v", name, r)
		}
	}
}

// Ended builds what a fresh go job sent, once, in a builder sandbox of the
// job's image with the volume read-write and no network; a build that fails
// the checks, or a job without the cache, starts nothing.
func TestEndedBuildsOnce(t *testing.T) {
	c, rt := newCache(t)
	req := job.Request{Language: "go", Image: "sandboxer/go:x"}
	c.Extend(context.Background(), &req)
	src := tgz(t, entry{name: "go.mod", typ: tar.TypeReg, body: "module m\n"})
	good := proto.GoBuild{Root: "/tmp/m", Dir: "/tmp/m", Args: []string{"test", "-toolexec", "/x", "./..."}, Source: src}
	bad := proto.GoBuild{Root: "/tmp/m", Dir: "/tmp/m", Args: []string{"generate"}, Source: src}
	st := sandbox.ExitStatus{Usage: sandbox.Usage{WallMS: 1000}, GoBuilds: []proto.GoBuild{good, bad}}
	c.Ended(req, st)
	c.Ended(req, st)                                                  // the same build again: not built twice
	c.Ended(job.Request{Language: "go", Image: "sandboxer/go:x"}, st) // no cache mounted
	deadline := time.Now().Add(10 * time.Second)
	for {
		rt.mu.Lock()
		n := len(rt.started)
		rt.mu.Unlock()
		if n >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a second start, if any, would be seen now
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.started) != 1 {
		t.Fatalf("%d builders started, want 1", len(rt.started))
	}
	b := rt.started[0]
	args := strings.Join(b.Cmd[len(b.Cmd)-5:], " ")
	if b.Kind != KindBuilder || b.Image != req.Image || b.Network != "none" || args != "test -count=1 -exec /bin/true ./..." ||
		len(b.Mounts) != 1 || b.Mounts[0].ReadOnly || b.Mounts[0].Volume != req.Mounts[0].Volume || b.Timeout != time.Second+buildSlack {
		t.Errorf("builder spec: %+v", b)
	}
	if !slices.Contains(b.Env, "GOENV=off") || !slices.Contains(b.Env, "GOCACHE="+Current) {
		t.Errorf("builder env: %q", b.Env)
	}
}

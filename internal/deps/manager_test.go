package deps

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
)

// fakeRT is the fake runtime plus in-memory volumes; an install sandbox runs
// the fake script `install` (by default: a short sleep and a size) instead of
// the real bash.
type fakeRT struct {
	*fake.Runtime
	installs atomic.Int32
	install  func(spec sandbox.Spec) string
}

func newFakeRT() *fakeRT {
	return &fakeRT{Runtime: fake.New("test"),
		install: func(sandbox.Spec) string { return "sleep 0.2; echo sandboxer-deps-size-kb=1024" }}
}

func (f *fakeRT) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if spec.Kind == KindInstall {
		f.installs.Add(1)
		if len(spec.Mounts) != 1 || spec.Mounts[0].ReadOnly || spec.Network != "bridge" || spec.Cmd[0] != "bash" {
			return nil, fmt.Errorf("bad install spec %+v", spec)
		}
		spec.Cmd = []string{"bash", "-c", f.install(spec)}
	}
	return f.Runtime.Start(ctx, spec, out)
}

func (f *fakeRT) volumes() int { return f.VolumeCount() }

func newManager(t *testing.T, cacheMB int64) (*Manager, *fakeRT) {
	t.Helper()
	rt := newFakeRT()
	pol := policy.Default()
	pol.Scripts.DependencyCacheMB = cacheMB
	m := New(rt, pol, Options{})
	if m == nil {
		t.Fatal("no manager over a volume runtime")
	}
	return m, rt
}

func TestEnsureInstallsOnceThenHits(t *testing.T) {
	m, rt := newManager(t, 100)
	ctx := context.Background()
	list := []string{"is-number@7.0.0"}
	var wg sync.WaitGroup
	results := make([]Result, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := m.Ensure(ctx, "javascript", "img", list)
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	if n := rt.installs.Load(); n != 1 {
		t.Fatalf("%d installs for one new list asked for at once, want 1", n)
	}
	installed := 0
	for _, r := range results {
		if r.Cache == CacheInstalled {
			installed++
		}
		if r.Mount.Volume != results[0].Mount.Volume || !r.Mount.ReadOnly || r.Mount.Target != Dir {
			t.Errorf("mount %+v", r.Mount)
		}
	}
	if installed != 1 {
		t.Errorf("%d results say installed, want 1", installed)
	}
	r, err := m.Ensure(ctx, "javascript", "img", list)
	if err != nil || r.Cache != CacheHit || r.InstallMS != 0 || rt.installs.Load() != 1 {
		t.Fatalf("later run: %+v %v, %d installs", r, err, rt.installs.Load())
	}
	caches, _ := m.List(ctx)
	if len(caches) != 1 || caches[0].SizeBytes != 1<<20 || caches[0].Language != "javascript" || caches[0].List[0] != list[0] {
		t.Fatalf("List: %+v", caches)
	}
}

func TestEnsureFailedInstall(t *testing.T) {
	m, rt := newManager(t, 100)
	rt.install = func(sandbox.Spec) string { return "echo 'npm ERR! 404 no-such-pkg' >&2; exit 1" }
	_, err := m.Ensure(context.Background(), "javascript", "img", []string{"no-such-pkg"})
	if err == nil || !strings.Contains(err.Error(), "npm ERR! 404") || !strings.Contains(err.Error(), "exit code 1") {
		t.Fatalf("failed install: %v", err)
	}
	if rt.volumes() != 0 {
		t.Error("a failed install left its volume")
	}
}

func TestEnsureGoesOnWhenTheCallEnds(t *testing.T) {
	m, rt := newManager(t, 100)
	rt.install = func(sandbox.Spec) string { return "sleep 0.5; echo sandboxer-deps-size-kb=10" }
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := m.Ensure(ctx, "python", "img", []string{"x"}); err == nil || !strings.Contains(err.Error(), "goes on") {
		t.Fatalf("cancelled call: %v", err)
	}
	r, err := m.Ensure(context.Background(), "python", "img", []string{"x"}) // waits for it
	if err != nil || r.Cache != CacheHit || rt.installs.Load() != 1 {
		t.Fatalf("after: %+v %v, %d installs", r, err, rt.installs.Load())
	}
}

func TestCacheCapRemovesLeastRecentlyUsed(t *testing.T) {
	m, rt := newManager(t, 2) // 2 MiB; each install is 1 MiB
	ctx := context.Background()
	var warmed, unwarmed []string
	var mu sync.Mutex
	m.Warm = func(_, _ string, mt sandbox.Mount) { mu.Lock(); warmed = append(warmed, mt.Volume); mu.Unlock() }
	m.Unwarm = func(_ context.Context, v string) { mu.Lock(); unwarmed = append(unwarmed, v); mu.Unlock() }
	a, _ := m.Ensure(ctx, "python", "img", []string{"a"})
	b, _ := m.Ensure(ctx, "python", "img", []string{"b"})
	time.Sleep(5 * time.Millisecond)
	if _, err := m.Ensure(ctx, "python", "img", []string{"a"}); err != nil { // a is now the most recent
		t.Fatal(err)
	}
	c, _ := m.Ensure(ctx, "python", "img", []string{"c"})
	caches, _ := m.List(ctx)
	var names []string
	for _, x := range caches {
		names = append(names, x.Volume)
	}
	if len(caches) != 2 || strings.Contains(strings.Join(names, " "), b.Mount.Volume) {
		t.Fatalf("after the cap: %v; want %s and %s, not %s", names, a.Mount.Volume, c.Mount.Volume, b.Mount.Volume)
	}
	if rt.volumes() != 2 {
		t.Errorf("%d volumes", rt.volumes())
	}
	mu.Lock()
	if len(warmed) != 4 || len(unwarmed) != 1 || unwarmed[0] != b.Mount.Volume {
		t.Errorf("warm %v, unwarm %v", warmed, unwarmed)
	}
	mu.Unlock()
	removed, err := m.Prune(ctx, nil)
	if err != nil || len(removed) != 2 || rt.volumes() != 0 {
		t.Errorf("prune all: %v %v, %d left", removed, err, rt.volumes())
	}
}

// tunnelRT is fakeRT whose sandboxes have no network: installs run in a
// filler through the tunnel (sandbox.TunnelVolumeFiller).
type tunnelRT struct {
	*fakeRT
	fillers, removed atomic.Int32
	sawProxy         atomic.Bool
	exit             int
}

func (f *tunnelRT) StartFiller(_ context.Context, spec sandbox.Spec) (string, error) {
	if spec.Kind != KindInstall || len(spec.Mounts) != 1 || spec.Mounts[0].ReadOnly || spec.Mounts[0].Target != installDir {
		return "", fmt.Errorf("bad filler spec %+v", spec)
	}
	f.fillers.Add(1)
	return "filler", nil
}

func (f *tunnelRT) Exec(_ context.Context, id string, o sandbox.ExecOptions) (int, error) {
	f.sawProxy.Store(o.Proxy != nil && id == "filler" && o.Cmd[0] == "bash")
	fmt.Fprintln(o.Stdout, "npm notice")
	fmt.Fprintln(o.Stderr, "sandboxer-deps-size-kb=2048")
	return f.exit, nil
}

// Capabilities declares the filler.
func (f *tunnelRT) Capabilities() sandbox.Capabilities {
	c := f.fakeRT.Capabilities()
	c.VolumeFiller = f
	return c
}

func (f *tunnelRT) Remove(_ context.Context, id string) error {
	f.removed.Add(1)
	return nil
}

func TestEnsureThroughTunnel(t *testing.T) {
	rt := &tunnelRT{fakeRT: newFakeRT()}
	m := New(rt, policy.Default(), Options{})
	ctx := context.Background()
	list := []string{"is-number@7.0.0"}
	if _, err := m.Ensure(ctx, "javascript", "img", list); err == nil || !strings.Contains(err.Error(), "tunnel") {
		t.Fatalf("without a tunnel proxy: %v", err)
	}
	granted := 0
	m.TunnelProxy = func(ctx context.Context, job string) (http.Handler, func()) {
		granted++
		return http.NotFoundHandler(), func() {}
	}
	r, err := m.Ensure(ctx, "javascript", "img", list)
	if err != nil || r.Cache != CacheInstalled || !rt.sawProxy.Load() || granted != 1 || rt.installs.Load() != 0 {
		t.Fatalf("through the tunnel: %+v %v (proxy %v, %d grants, %d sandboxes started)", r, err, rt.sawProxy.Load(), granted, rt.installs.Load())
	}
	if rt.fillers.Load() != 1 || rt.removed.Load() != 1 {
		t.Fatalf("%d fillers started, %d removed; want 1 and 1", rt.fillers.Load(), rt.removed.Load())
	}
	if caches, _ := m.List(ctx); len(caches) != 1 || caches[0].SizeBytes != 2<<20 {
		t.Fatalf("List: %+v", caches)
	}
	rt.exit = 1
	if _, err := m.Ensure(ctx, "javascript", "img", []string{"no-such-pkg"}); err == nil || !strings.Contains(err.Error(), "exit code 1") {
		t.Fatalf("a failed install: %v", err)
	}
	if rt.volumes() != 1 || rt.removed.Load() != 2 {
		t.Fatalf("after a failed install: %d volumes, %d fillers removed", rt.volumes(), rt.removed.Load())
	}
}

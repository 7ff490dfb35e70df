package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/gobuild"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
)

// kubernetesDepClaims lists the names of the server's dependency caches'
// claims, those being deleted too.
func (s *server) kubernetesDepClaims() []string {
	s.t.Helper()
	var l corev1.PersistentVolumeClaimList
	kubernetesList(s.t, "persistentvolumeclaims", "dev.sandboxer.deps", &l)
	instance := (&config.Config{StateDir: s.stateDir}).Instance()
	var names []string
	for _, c := range l.Items {
		if c.Annotations["dev.sandboxer/instance"] == instance {
			names = append(names, c.Name)
		}
	}
	return names
}

// kubernetesWarmPodWith waits (bounded) for a running warm pod of the
// server that mounts claim, and returns its name.
func (s *server) kubernetesWarmPodWith(claim string) string {
	s.t.Helper()
	instance := (&config.Config{StateDir: s.stateDir}).Instance()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var l corev1.PodList
		kubernetesList(s.t, "pods", "dev.sandboxer.managed=true", &l)
		for _, p := range l.Items {
			if p.Annotations["dev.sandboxer/instance"] != instance || p.Annotations["dev.sandboxer.kind"] != "pool" ||
				p.Annotations["dev.sandboxer/job-id"] != "" || p.Status.Phase != "Running" || p.DeletionTimestamp != nil {
				continue
			}
			for _, v := range p.Spec.Volumes {
				if pvc := v.PersistentVolumeClaim; pvc != nil && pvc.ClaimName == claim && pvc.ReadOnly {
					return p.Name
				}
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no warm pod with claim %s after 60 s\nstderr:\n%s", claim, tail(s.stderr.String(), 3000))
		}
	}
}

// registryHits counts the egress audit's allowed connections to host.
func registryHits(t *testing.T, s *server, host string) int {
	t.Helper()
	n := 0
	for _, e := range egressAudit(t, s) {
		if e["decision"] == "allowed" && e["host"] == host {
			n++
		}
	}
	return n
}

// TestKubernetesDependencies: run_script's dependencies on backend
// kubernetes. javascript with is-number from the npm registry: installed by
// a pod with no network through the tunnel (the egress audit shows it),
// served from the cache the second time (a hit, one cache listed, no new
// connection to the registry, by the warm pod kept with the cache mounted),
// read-only to the script; python from a local pip index (named in
// egress.allow by a pinned name); go from the Go module proxy; all listed
// and pruned; no pods and no claims left.
func TestKubernetesDependencies(t *testing.T) {
	const npm = "registry.npmjs.org"
	if _, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", npm); err != nil {
		t.Skipf("the npm registry does not resolve here: %v", err)
	}
	u, err := url.Parse(pipIndex(t)) // on the docker bridge's gateway: a private address
	if err != nil {
		t.Fatal(err)
	}
	env := kubernetesEnvWith(t, fmt.Sprintf(`scripts:
%[3]s  pip_index_url: http://mirror.sbx.test:%[1]s/simple
workspaces:
  install_network: egress
egress:
  allow: ["%[4]s:443", "proxy.golang.org:443", "mirror.sbx.test:%[1]s"]
  hosts:
    mirror.sbx.test: %[2]s
`, u.Port(), u.Hostname(), installCAKey(t), npm))
	s := startServer(t, env...)
	stopped := false
	t.Cleanup(func() {
		if !stopped { // a failure left caches behind
			s.call("prune_dependency_caches", map[string]any{})
		}
	})

	const js = `const isNumber = require('is-number');
console.log(isNumber(5), isNumber('x'));
try { require('fs').writeFileSync('/deps/x', 'y'); console.log('wrote the cache') } catch (e) { console.log(e.code) }
`
	run := func(language, code, dep string) map[string]any {
		return s.ok("run_script", map[string]any{"language": language, "code": code, "dependencies": []string{dep},
			"timeout_s": 170, "wait_s": 50})
	}
	r := run("javascript", js, "is-number@7.0.0")
	if str(r, "status") != "completed" || str(r, "stdout") != "true false\nEROFS\n" {
		t.Fatalf("first run: %v\nstderr:\n%s", r, tail(s.stderr.String(), 3000))
	}
	if cache, ms := depsOf(t, r); cache != "installed" || ms <= 0 {
		t.Fatalf("first run: dependencies %v, want installed", r["dependencies"])
	}
	hits := registryHits(t, s, npm)
	if hits == 0 {
		t.Fatalf("the install reached the npm registry without the proxy: %v", egressAudit(t, s))
	}
	l := s.ok("list_dependency_caches", map[string]any{})
	caches, _ := l["caches"].([]any)
	if len(caches) != 1 {
		t.Fatalf("after the install: %v", l)
	}
	c := caches[0].(map[string]any)
	if str(c, "language") != "javascript" || fmt.Sprint(c["list"]) != "[is-number@7.0.0]" || num(t, c, "size_bytes") <= 0 {
		t.Fatalf("the cache listed: %v", c)
	}
	if cl := s.kubernetesDepClaims(); len(cl) != 1 || cl[0] != str(c, "volume") {
		t.Fatalf("claims %v, want the cache's volume %s", cl, str(c, "volume"))
	}

	// From the cache: no install, no connection to the registry; served
	// by the warm pod the pool keeps with the cache mounted read-only (a
	// pod listed may not be ready yet: then the run is cold, a few tries).
	served := false
	for try := 0; try < 3 && !served; try++ {
		warm := s.kubernetesWarmPodWith(str(c, "volume"))
		r = run("javascript", js, "is-number@7.0.0")
		if str(r, "status") != "completed" || str(r, "stdout") != "true false\nEROFS\n" {
			t.Fatalf("a later run: %v", r)
		}
		served = str(s.ok("get_job", map[string]any{"job_id": str(r, "job_id")}), "container_id") == warm
	}
	if !served {
		t.Errorf("no later run was served by the warm pod with the cache")
	}
	if cache, ms := depsOf(t, r); cache != "hit" || ms != 0 {
		t.Fatalf("second run: dependencies %v, want a hit", r["dependencies"])
	}
	if n := registryHits(t, s, npm); n != hits {
		t.Fatalf("a cache hit reached the registry: %d connections, %d before", n, hits)
	}
	if l := s.ok("list_dependency_caches", map[string]any{}); len(l["caches"].([]any)) != 1 {
		t.Fatalf("after a hit: %v", l)
	}

	r = run("python", "import sbxdemo\nprint(sbxdemo.answer())\n", "sbxdemo==1.2.3")
	if str(r, "status") != "completed" || str(r, "stdout") != "42\n" {
		t.Fatalf("python from the local index: %v", r)
	}
	if cache, _ := depsOf(t, r); cache != "installed" {
		t.Fatalf("python: dependencies %v, want installed", r["dependencies"])
	}
	// go from the Go module proxy: its modules and their prebuilt packages.
	const goCode = "package main\n\nimport (\n\t\"fmt\"\n\n\t\"golang.org/x/text/language\"\n)\n\nfunc main() { fmt.Println(language.MustParse(\"en-us\").String()) }\n"
	r = run("go", goCode, "golang.org/x/text@v0.14.0")
	if str(r, "status") != "completed" || str(r, "stdout") != "en-US\n" {
		t.Fatalf("go from the module proxy: %v", r)
	}
	if cache, ms := depsOf(t, r); cache != "installed" {
		t.Fatalf("go: dependencies %v, want installed", r["dependencies"])
	} else {
		t.Logf("go install through the tunnel: %v ms", ms)
	}
	if cl := s.kubernetesDepClaims(); len(cl) != 3 {
		t.Fatalf("claims after three installs: %v", cl)
	}

	p := s.ok("prune_dependency_caches", map[string]any{})
	if rm, _ := p["removed"].([]any); len(rm) != 3 {
		t.Fatalf("prune: %v", p)
	}
	if l := s.ok("list_dependency_caches", map[string]any{}); len(l["caches"].([]any)) != 0 {
		t.Fatalf("after the prune: %v", l)
	}
	s.waitNoPods(false, 30*time.Second)
	stopped = true
	s.stop()
	s.waitNoPods(true, 30*time.Second)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cl := s.kubernetesDepClaims()
		if len(cl) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claims still there 60 s after the prune: %v", cl)
		}
	}
	if strings.Contains(s.stderr.String(), "panic") {
		t.Fatalf("the server panicked:\n%s", tail(s.stderr.String(), 3000))
	}
}

// The shared Go build cache on backend kubernetes (threat 103): a claim per
// tenant, read-only in fresh go pods, written by the builder pod only.
func TestKubernetesSharedGoBuildCache(t *testing.T) {
	s := startServer(t, kubernetesEnv(t)...)
	t.Cleanup(func() {
		// Before the server stops: a claim in use goes once its pods have.
		cfg := config.Config{StateDir: s.stateDir}
		rt, err := kubernetes.New(cfg.Instance(), kubernetes.Config{})
		if err != nil {
			return
		}
		defer rt.Close()
		vols, _ := rt.ListVolumes(context.Background(), gobuild.LabelTenant)
		for _, v := range vols {
			_ = rt.RemoveVolume(context.Background(), v.Name)
		}
	})
	sharedGoBuildCache(t, s)
}

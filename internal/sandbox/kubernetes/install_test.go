package kubernetes_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
)

type testResolver map[string]string

func (r testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// TestInstaller: a workspace's install pod has the workspace pod's
// hardening and no network, shares its claim on its node, and reaches an
// allowed server only through the tunnel over pods/exec (a name that
// resolves to a private address is refused); what it writes to /workspace
// the workspace pod sees, which has no proxy in its environment.
func TestInstaller(t *testing.T) {
	rt := newTestRuntime(t)
	ctx := context.Background()
	refs, err := rt.CreateWorkspace(ctx, sandbox.WorkspaceSpec{Name: "k8s-install", Image: images.Tag("base"),
		Limits: sandbox.Limits{MemoryBytes: 256 << 20, NanoCPUs: 25e7, Pids: 128, TmpBytes: 16 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.RemoveWorkspace(context.Background(), refs) })
	if err := rt.StartWorkspace(ctx, refs.ContainerID); err != nil {
		t.Fatal(err)
	}
	inst, err := rt.StartInstaller(ctx, refs.ContainerID, "bridge")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Remove(context.Background(), inst) })
	ip, err := kubernetes.Core(rt).Pods(rt.Namespace()).Get(ctx, inst, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wp, err := kubernetes.Core(rt).Pods(rt.Namespace()).Get(ctx, refs.ContainerID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ip.Spec.Containers[0]
	if ip.Spec.HostNetwork || ip.Spec.NodeName != wp.Spec.NodeName || *c.SecurityContext.RunAsUser != 1000 ||
		!*c.SecurityContext.ReadOnlyRootFilesystem || *c.SecurityContext.AllowPrivilegeEscalation ||
		len(c.SecurityContext.Capabilities.Drop) != 1 || ip.Spec.Volumes[len(ip.Spec.Volumes)-1].PersistentVolumeClaim.ClaimName != refs.Volume {
		t.Fatalf("install pod spec: hostNetwork %v node %q (workspace's %q) container %+v volumes %+v",
			ip.Spec.HostNetwork, ip.Spec.NodeName, wp.Spec.NodeName, c.SecurityContext, ip.Spec.Volumes)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "fetched") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	allow, err := egress.ParseList([]string{"files.test:" + port, "*.wild.test"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []egress.Event
	p := &egress.Proxy{Resolver: testResolver{"files.test": "127.0.0.1", "private.wild.test": "10.1.2.3"},
		Audit: func(e egress.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	h, revoke := p.GrantHandler(egress.Grant{Tenant: "t", Job: "install", Allow: allow})
	defer revoke()
	get := func(url string) string {
		return `exec 3<>/dev/tcp/127.0.0.1/${HTTP_PROXY##*:}; printf 'GET ` + url + ` HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3; cat <&3`
	}
	var out bytes.Buffer
	code, err := rt.Exec(ctx, inst, sandbox.ExecOptions{Proxy: h, Stdout: &out, Cmd: []string{"bash", "-c",
		`(` + get("http://files.test:"+port+"/") + `) | tail -c 7 > /workspace/got; (` + get("http://private.wild.test/") + `) | head -1; exit 3`}})
	if err != nil || code != 3 || !strings.Contains(out.String(), "403") {
		t.Fatalf("through the tunnel: code %d, %v\n%s", code, err, out.String())
	}
	var got bytes.Buffer
	code, err = rt.Exec(ctx, refs.ContainerID, sandbox.ExecOptions{Cmd: []string{"sh", "-c", `cat /workspace/got; env | grep -i _proxy; true`}, Stdout: &got})
	if err != nil || code != 0 || got.String() != "fetched" {
		t.Fatalf("in the workspace pod: code %d, %v, %q", code, err, got.String())
	}

	// While a tunnel listens in the install pod, the workspace pod (where
	// jobs run) cannot connect to its port: another pod, another loopback.
	tunnelDone := make(chan error, 1)
	go func() {
		_, err := rt.Exec(ctx, inst, sandbox.ExecOptions{Proxy: h, Cmd: []string{"sh", "-c",
			`echo "${HTTP_PROXY##*:}" > /workspace/port; while [ ! -e /workspace/done ]; do sleep 0.1; done`}})
		tunnelDone <- err
	}()
	var probe bytes.Buffer
	code, err = rt.Exec(ctx, refs.ContainerID, sandbox.ExecOptions{Stdout: &probe, Cmd: []string{"bash", "-c",
		`while [ ! -s /workspace/port ]; do sleep 0.1; done; p=$(cat /workspace/port); ` +
			`(exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && echo "reached $p" || echo "refused $p"; touch /workspace/done`}})
	if err != nil || code != 0 || !strings.HasPrefix(probe.String(), "refused ") {
		t.Fatalf("the workspace pod reaching the install pod's tunnel: code %d, %v, %q", code, err, probe.String())
	}
	if err := <-tunnelDone; err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || !events[0].Allowed || events[1].Allowed {
		t.Fatalf("audit: %+v", events)
	}
}

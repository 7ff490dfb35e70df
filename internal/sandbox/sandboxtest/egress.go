package sandboxtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// runEgressNetwork: the egress network is made once (a second call gives
// the same gateway and interface), and a sandbox on it reaches the gateway
// (a listener there answers, or the host's fence, which a server puts up
// around its proxy's port, refuses at once). That nothing else is reached
// is the server's fence's part with the network's: the e2e egress tests
// check it.
func runEgressNetwork(t *testing.T, e sandbox.Engine, image string) {
	eg := e.Capabilities().EgressNetwork
	ctx := context.Background()
	gw, iface, err := eg.EgressGateway(ctx)
	if err != nil || !gw.Is4() || iface == "" {
		t.Fatalf("EgressGateway: %v %q %v", gw, iface, err)
	}
	gw2, iface2, err := eg.EgressGateway(ctx)
	if err != nil || gw2 != gw || iface2 != iface {
		t.Fatalf("a second EgressGateway: %v %q %v, want %v %q", gw2, iface2, err, gw, iface)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(gw.String(), "0"))
	if err != nil {
		t.Fatalf("listen on the gateway: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "from-the-gateway")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	spec := Spec(image, fmt.Sprintf("curl -sS -v --max-time 5 http://%s:%d/", gw, port))
	spec.Network = sandbox.NetworkEgress
	out := newBuffer()
	h := start(t, e, spec, out)
	st := waitDone(t, h, "a sandbox on the egress network")
	// The gateway answers, or the fence refuses at once (curl -v says why
	// it could not connect): either way the sandbox reached the gateway.
	reached := st.ExitCode == 0 && out.Stdout() == "from-the-gateway\n" ||
		st.ExitCode == 7 && strings.Contains(out.Stderr(), "Connection refused")
	if !reached {
		t.Fatalf("on the egress network: %s, stdout %q, stderr %q; want the gateway's line", describe(st), out.Stdout(), strings.TrimSpace(out.Stderr()))
	}
}

// runEgressTunnel: a sandbox on network egress reaches the proxy the
// engine was given at the tunnel's address inside it (its own loopback),
// and a sandbox with no network finds nothing listening there. On an
// engine with workspaces too, so do the jobs of a workspace made with
// egress (after a stop and a start as well), and those of one made
// without find nothing.
func runEgressTunnel(t *testing.T, e sandbox.Engine, image string) {
	addr := e.Capabilities().EgressTunnel.TunnelEgress(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "via-the-proxy %s %s\n", r.Method, r.Host)
	}))
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("TunnelEgress gave %q: %v", addr, err)
	}
	probe := fmt.Sprintf("curl -sS --max-time 10 -x http://%s http://example.test/x || echo nothing-listens", net.JoinHostPort(host, port))
	for _, c := range []struct{ network, want string }{
		{sandbox.NetworkEgress, "via-the-proxy GET example.test\n"},
		{"none", "nothing-listens\n"},
	} {
		spec := Spec(image, probe)
		spec.Network = c.network
		out := newBuffer()
		h := start(t, e, spec, out)
		st := waitDone(t, h, "a sandbox on network "+c.network)
		if got := out.Stdout(); st.ExitCode != 0 || got != c.want {
			t.Fatalf("network %s: %s, stdout %q, stderr %q; want %q", c.network, describe(st), got, strings.TrimSpace(out.Stderr()), c.want)
		}
	}
	w := e.Capabilities().Workspaces
	if w == nil {
		return
	}
	ctx := context.Background()
	for _, c := range []struct{ network, want string }{
		{sandbox.NetworkEgress, "via-the-proxy GET example.test\n"},
		{"", "nothing-listens\n"},
	} {
		refs, err := w.CreateWorkspace(ctx, sandbox.WorkspaceSpec{Name: "contract-" + randomHex(4), Image: image, Limits: Spec(image, "").Limits, Network: c.network})
		if err != nil {
			t.Fatalf("CreateWorkspace on network %q: %v", c.network, err)
		}
		t.Cleanup(func() { _ = w.RemoveWorkspace(context.Background(), refs) })
		for _, round := range []string{"started", "stopped and started again"} {
			if round != "started" {
				if err := w.StopWorkspace(ctx, refs.ContainerID); err != nil {
					t.Fatalf("StopWorkspace: %v", err)
				}
			}
			if err := w.StartWorkspace(ctx, refs.ContainerID); err != nil {
				t.Fatalf("StartWorkspace: %v", err)
			}
			out := newBuffer()
			h, err := w.StartIn(ctx, refs.ContainerID, Spec(image, probe), out)
			if err != nil {
				t.Fatalf("StartIn in a workspace on network %q: %v", c.network, err)
			}
			if st := waitDone(t, h, "a workspace job"); st.ExitCode != 0 || out.Stdout() != c.want {
				t.Fatalf("a job of a workspace on network %q, %s: %s, stdout %q, stderr %q; want %q", c.network, round, describe(st), out.Stdout(), strings.TrimSpace(out.Stderr()), c.want)
			}
		}
		if err := w.RemoveWorkspace(ctx, refs); err != nil {
			t.Fatalf("RemoveWorkspace: %v", err)
		}
	}
}

// runTunnelInstalls: an install container of a workspace, on an install
// network the engine tunnels, has no route out of its own; a command exec'd in it through the tunnel reaches the proxy
// it is given, as root where the engine says it can, and what it writes
// under /workspace is the workspace's.
func runTunnelInstalls(t *testing.T, e sandbox.Engine, image string) {
	caps := e.Capabilities()
	w := caps.Workspaces
	if w == nil {
		t.Fatal("TunnelInstalls is declared without Workspaces")
	}
	ctx := context.Background()
	refs := startWorkspace(t, w, image)
	network := ""
	for _, n := range []string{"egress", "bridge"} {
		if caps.TunnelInstalls.InstallsThroughTunnel(n) {
			network = n
		}
	}
	if network == "" {
		t.Fatal("TunnelInstalls is declared, but no install network goes through the tunnel")
	}
	inst, err := w.StartInstaller(ctx, refs.ContainerID, network)
	if err != nil {
		t.Fatalf("StartInstaller: %v", err)
	}
	t.Cleanup(func() { _ = w.Remove(context.Background(), inst) })
	// No route out (an engine may give it an interface that reaches
	// nothing, as Kubernetes' CNI does: no default route either).
	var out bytes.Buffer
	code, err := w.Exec(ctx, inst, sandbox.ExecOptions{Stdout: &out, Cmd: []string{"cat", "/proc/net/route"}})
	if err != nil || code != 0 || hasDefaultRoute(out.String()) {
		t.Fatalf("the install container's routes: exit %d, %v, %q; want no default route", code, err, out.String())
	}
	proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "installed-through-the-proxy %s\n", r.Host)
	})
	user, wantUID := "", "1000"
	if caps.TunnelInstalls.RootExec() {
		user, wantUID = "0:0", "0"
	}
	out.Reset()
	code, err = w.Exec(ctx, inst, sandbox.ExecOptions{User: user, Proxy: proxy, Stdout: &out,
		Cmd: []string{"bash", "-c", "id -u; curl -sS http://registry.test/pkg"}})
	if want := wantUID + "\ninstalled-through-the-proxy registry.test\n"; err != nil || code != 0 || out.String() != want {
		t.Fatalf("an install through the tunnel: exit %d, %v, output %q; want %q", code, err, out.String(), want)
	}
	// The workspace's files are the sandbox user's (root has no capability
	// to write there on every engine).
	out.Reset()
	code, err = w.Exec(ctx, inst, sandbox.ExecOptions{Proxy: proxy, Stdout: &out,
		Cmd: []string{"bash", "-c", "curl -sS -o /workspace/pkg http://registry.test/pkg"}})
	if err != nil || code != 0 {
		t.Fatalf("an install into /workspace through the tunnel: exit %d, %v, output %q", code, err, out.String())
	}
	out.Reset()
	code, err = w.Exec(ctx, refs.ContainerID, sandbox.ExecOptions{Cmd: []string{"cat", "/workspace/pkg"}, Stdout: &out})
	if err != nil || code != 0 || out.String() != "installed-through-the-proxy registry.test\n" {
		t.Fatalf("the installed file in the workspace: exit %d, %v, %q", code, err, out.String())
	}
}

// runVolumeFiller: a filler sandbox mounts a volume read-write; a command
// exec'd in it through the tunnel reaches the proxy it is given (its HTTP
// proxy variables name the tunnel) and writes what it fetched into the
// volume; a sandbox started later with the volume reads it there.
func runVolumeFiller(t *testing.T, e sandbox.Engine, image string) {
	f := e.Capabilities().VolumeFiller
	ctx := context.Background()
	name := "sandboxer-contract-fill-" + randomHex(6)
	if err := f.CreateVolume(ctx, name, nil); err != nil {
		t.Fatalf("CreateVolume: %v", err)
	}
	t.Cleanup(func() { _ = f.RemoveVolume(context.Background(), name) })
	spec := Spec(image, "")
	spec.Mounts = []sandbox.Mount{{Volume: name, Target: "/cache"}}
	id, err := f.StartFiller(ctx, spec)
	if err != nil {
		t.Fatalf("StartFiller: %v", err)
	}
	proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "filled-through-the-proxy %s\n", r.Host)
	})
	var out bytes.Buffer
	code, err := f.Exec(ctx, id, sandbox.ExecOptions{Cmd: []string{"bash", "-c", "curl -sS http://example.test/x > /cache/got && cat /cache/got"},
		Proxy: proxy, Stdout: &out, Stderr: &out})
	if rerr := f.Remove(ctx, id); rerr != nil {
		t.Errorf("Remove the filler: %v", rerr)
	}
	if err != nil || code != 0 || out.String() != "filled-through-the-proxy example.test\n" {
		t.Fatalf("a fill through the tunnel: exit %d, %v, output %q", code, err, out.String())
	}
	read := Spec(image, "cat /cache/got")
	read.Mounts = []sandbox.Mount{{Volume: name, Target: "/cache", ReadOnly: true}}
	buf := newBuffer()
	h := start(t, e, read, buf)
	if st := waitDone(t, h, "a sandbox with the filled volume"); st.ExitCode != 0 || buf.Stdout() != "filled-through-the-proxy example.test\n" {
		t.Fatalf("the filled volume read back: %s, stdout %q, stderr %q", describe(st), buf.Stdout(), buf.Stderr())
	}
}

// hasDefaultRoute says whether a /proc/net/route table has a route to
// 0.0.0.0 (its Destination column, after the header).
func hasDefaultRoute(table string) bool {
	lines := strings.Split(strings.TrimSpace(table), "\n")
	for _, line := range lines[1:] {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "00000000" {
			return true
		}
	}
	return false
}

package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// localExec runs opts as a local process, the supervisor built from this
// tree standing in for the image's: the helper needs nothing but an exec's
// stdin, stdout and stderr.
func localExec(t *testing.T) func(context.Context, sandbox.ExecOptions) (int, error) {
	bin := filepath.Join(t.TempDir(), "sandboxer-supervisor")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/sandboxer-supervisor").CombinedOutput(); err != nil {
		t.Fatalf("building the supervisor: %v\n%s", err, out)
	}
	return func(ctx context.Context, o sandbox.ExecOptions) (int, error) {
		if o.Cmd[0] != sandbox.TunnelCommand[0] {
			return -1, fmt.Errorf("the tunnel command is %q", o.Cmd[0])
		}
		cmd := exec.CommandContext(ctx, bin, o.Cmd[1:]...)
		cmd.Env = append(os.Environ(), o.Env...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
		err := cmd.Run()
		if cmd.ProcessState != nil {
			return cmd.ProcessState.ExitCode(), ctx.Err()
		}
		return -1, err
	}
}

// Through the tunnel, a command reaches a server on the allowlist, gets
// 403 for one that is not, reads its stdin, and its exit code comes back.
func TestExecThroughTunnelLocally(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl here")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from ", r.URL.Path)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	// Names, not 127.0.0.1: NO_PROXY sends loopback around the proxy.
	allow, err := egress.ParseList([]string{"files.test:" + u.Port()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []egress.Event
	p := &egress.Proxy{Resolver: testResolver{"files.test": "127.0.0.1"}, Audit: func(e egress.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}
	h, revoke := p.GrantHandler(egress.Grant{Tenant: "t", Job: "install", Allow: allow})
	defer revoke()
	run := localExec(t)
	var out bytes.Buffer
	code, err := sandbox.ExecThroughTunnel(context.Background(), sandbox.ExecOptions{
		Cmd:   []string{"sh", "-c", `read x; echo "stdin: $x"; curl -sS http://files.test:` + u.Port() + `/a; echo; curl -s -o /dev/null -w "%{http_code}\n" http://not-listed.example/; exit 7`},
		Stdin: strings.NewReader("given\n"), Stdout: &out, Proxy: h,
	}, run)
	if err != nil || code != 7 {
		t.Fatalf("code %d, %v\n%s", code, err, out.String())
	}
	if want := "stdin: given\nhello from /a\n403\n"; out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || !events[0].Allowed || events[1].Allowed || events[0].Job != "install" {
		t.Fatalf("audit events: %+v", events)
	}
}

// testResolver answers the names it holds (a test's servers on loopback).
type testResolver map[string]string

func (r testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// A tunnel-only exec: once OpenTunnel returns, a client in the "sandbox"
// reaches the proxy at the tunnel's address with its own grant's token, as
// a job on the egress network does; Close ends the exec.
func TestOpenTunnelLocally(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl here")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from ", r.URL.Path)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	allow, err := egress.ParseList([]string{"files.test:" + u.Port()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []egress.Event
	p := &egress.Proxy{Resolver: testResolver{"files.test": "127.0.0.1"}, Audit: func(e egress.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}
	token, revoke := p.Add(egress.Grant{Tenant: "t", Job: "job-1", Allow: allow})
	defer revoke()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tun, err := sandbox.OpenTunnel(context.Background(), addr, p, localExec(t))
	if err != nil {
		t.Fatal(err)
	}
	proxyURL := egress.ProxyURL(token, addr)
	curl := func(target string) string {
		out, _ := exec.Command("curl", "-sS", "--proxy", proxyURL, "-w", " %{http_code}", target).CombinedOutput()
		return string(out)
	}
	if got := curl("http://files.test:" + u.Port() + "/a"); got != "hello from /a 200" {
		t.Errorf("an allowed host: %q", got)
	}
	if got := curl("http://not-listed.example/"); !strings.HasSuffix(got, " 403") {
		t.Errorf("a host not on the list: %q", got)
	}
	if out, _ := exec.Command("curl", "-sS", "--proxy", "http://"+addr, "-w", " %{http_code}", "http://files.test:"+u.Port()+"/a").CombinedOutput(); !strings.HasSuffix(string(out), " 407") {
		t.Errorf("without the grant's token: %q", out)
	}
	tun.Close()
	<-tun.Done()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the tunnel still listens after Close")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) < 2 || !events[0].Allowed || events[1].Allowed || events[0].Job != "job-1" {
		t.Fatalf("audit events: %+v", events)
	}
}

// WorkspaceTunnels asks once per sandbox whether it needs a tunnel, opens
// one when a job finds none live, keeps a live one, opens again one that
// ended, closes and forgets on Drop, and keeps nothing for a sandbox gone.
func TestWorkspaceTunnels(t *testing.T) {
	run := localExec(t)
	proxy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	var ts sandbox.WorkspaceTunnels
	asked, opened := map[string]int{}, 0
	var last *sandbox.Tunnel
	addrs := map[string]string{}
	for _, id := range []string{"egress", "plain", "gone"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[id] = ln.Addr().String()
		ln.Close()
	}
	ensure := func(id string) error {
		return ts.Ensure(context.Background(), id, func(context.Context) (bool, error) {
			asked[id]++
			if id == "gone" {
				return false, sandbox.ErrNotFound
			}
			return id == "egress", nil
		}, func(ctx context.Context) (*sandbox.Tunnel, error) {
			opened++
			tun, err := sandbox.OpenTunnel(ctx, addrs[id], proxy, run)
			last = tun
			return tun, err
		})
	}
	listens := func(id string) bool {
		c, err := net.Dial("tcp", addrs[id])
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	for i := 0; i < 3; i++ {
		for _, id := range []string{"egress", "plain", "gone"} {
			if err := ensure(id); err != nil {
				t.Fatalf("Ensure(%s): %v", id, err)
			}
		}
	}
	if asked["egress"] != 1 || asked["plain"] != 1 || asked["gone"] != 3 || opened != 1 {
		t.Fatalf("asked %v, opened %d: want each live sandbox asked once, the gone one each time, one tunnel", asked, opened)
	}
	if !listens("egress") || listens("plain") {
		t.Fatal("the egress sandbox's tunnel does not listen, or the plain one has one")
	}
	first := last
	first.Close()
	<-first.Done()
	if err := ensure("egress"); err != nil || opened != 2 || !listens("egress") {
		t.Fatalf("after the tunnel ended: %v, opened %d; want it opened again", err, opened)
	}
	ts.Drop("egress")
	<-last.Done()
	if listens("egress") {
		t.Fatal("the tunnel still listens after Drop")
	}
	if err := ensure("egress"); err != nil || asked["egress"] != 2 || opened != 3 {
		t.Fatalf("after Drop: %v, asked %d, opened %d; want asked again and opened", err, asked["egress"], opened)
	}
	ts.CloseAll()
	<-last.Done()
}

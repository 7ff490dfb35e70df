package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
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

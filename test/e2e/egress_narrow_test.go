package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// The egress argument end to end: a job or a workspace asks for some of the
// policy's egress.allow and reaches those hosts alone, through the proxy,
// though the policy's network is none.

// egressMirror serves "hello from the mirror" on the egress network's
// gateway and returns the gateway and the port.
func egressMirror(t *testing.T) (gw, port string) {
	t.Helper()
	gw = egressGateway(t)
	ln, err := net.Listen("tcp", gw+":0")
	if err != nil {
		t.Skipf("cannot listen on the egress network's gateway %s: %v", gw, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the mirror") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return gw, port
}

// narrowPolicy allows three names on network none: two on the gateway, one
// under a wildcard that resolves to a private address; pool says whether
// the warm pool runs (with the default sizes and following use).
func narrowPolicy(t *testing.T, gw, port string, pool bool, allow ...string) string {
	t.Helper()
	if allow == nil {
		allow = []string{`"mirror.sbx.test:` + port + `"`, `"other.sbx.test:` + port + `"`, `"*.wild.sbx.test:` + port + `"`}
	}
	return policyEnv(t, fmt.Sprintf(`pool:
  enabled: %[4]v
network: none
egress:
  allow: [%[3]s]
  hosts:
    mirror.sbx.test: %[2]s
    other.sbx.test: %[2]s
    inner.wild.sbx.test: 10.0.0.7
`, port, gw, strings.Join(allow, ", "), pool))
}

// narrowProbe is the probe: the plain URL and the CONNECT targets of mirror,
// other and inner.wild, the gateway's test server as the host service.
func narrowProbe(gw, port string) string {
	args := fmt.Sprintf("http://mirror.sbx.test:%[1]s/hello mirror.sbx.test:%[1]s other.sbx.test:%[1]s inner.wild.sbx.test:%[1]s", port)
	return "set -- " + args + "\nexport HOSTSERVICE=" + gw + ":" + port + "\n" + egressProbe
}

// What the probe prints for a job whose own list is mirror (and inner.wild).
const narrowWant = "mirror.sbx.test 200 hello from the mirror\n" +
	"other.sbx.test 403 -\n" + // on the policy's list, not on the job's
	"inner.wild.sbx.test 403 -\n" + // narrowed out of a wildcard: still no private address
	"plain hello from the mirror\n" +
	"direct refused\n" +
	"host service refused\n"

func TestEgressPerJobAllowlist(t *testing.T) {
	t.Parallel()
	gw, port := egressMirror(t)
	// The pool runs: egress and offline jobs never share a warm sandbox's shape.
	s := startServer(t, narrowPolicy(t, gw, port, true))
	own := []any{"mirror.sbx.test:" + port, "inner.wild.sbx.test:" + port}

	// run_command with its own list: the mirror only, on a policy of network none.
	r := s.ok("run_command", map[string]any{"command": narrowProbe(gw, port), "language": "python", "timeout_s": 120, "egress": own})
	if out := str(r, "stdout"); str(r, "status") != "completed" || out != narrowWant {
		t.Fatalf("run_command with egress: got\n%s\nwant\n%s\nrecord: %v", out, narrowWant, r)
	}
	jobID := str(r, "job_id")
	var allowed, refused int
	for _, e := range egressAudit(t, s) {
		if e["job_id"] != jobID {
			continue
		}
		switch {
		case e["decision"] == "allowed" && e["host"] == "mirror.sbx.test":
			allowed++
		case e["decision"] == "refused" && (e["host"] == "other.sbx.test" || e["host"] == "inner.wild.sbx.test"):
			refused++
		default:
			t.Errorf("audit entry: %v", e)
		}
	}
	if allowed != 2 || refused != 2 {
		t.Errorf("audit of job %s: %d allowed, %d refused, want 2 and 2", jobID, allowed, refused)
	}

	// run_script takes the same argument.
	r = s.ok("run_script", map[string]any{"language": "python", "timeout_s": 60, "egress": []any{"mirror.sbx.test:" + port},
		"code": "import os, urllib.request\nprint(urllib.request.urlopen('http://mirror.sbx.test:" + port + "/hello', timeout=30).read().decode())"})
	if str(r, "stdout") != "hello from the mirror\n" {
		t.Fatalf("run_script with egress: %v", r)
	}

	// So does start_session.
	r = s.ok("start_session", map[string]any{"command": "python3", "language": "python", "mode": "pipe", "wait_s": 30,
		"until": "hello from the mirror", "egress": []any{"mirror.sbx.test:" + port},
		"args": []any{"-c", "import urllib.request\nprint(urllib.request.urlopen('http://mirror.sbx.test:" + port + "/hello', timeout=30).read().decode())"}})
	if r["matched"] != true || !strings.Contains(str(r, "output"), "hello from the mirror") {
		t.Fatalf("start_session with egress: %v", r)
	}

	// Without the argument the policy's network (none) holds; [] is none
	// too; in python, whose warm sandboxes now include egress-shaped ones.
	for _, args := range []map[string]any{{}, {"egress": []any{}}, {"language": "python"}, {"language": "python", "egress": []any{}}} {
		args["command"] = `ls /sys/class/net; echo "proxy=${HTTPS_PROXY:-}"`
		if r := s.ok("run_command", args); str(r, "stdout") != "lo\nproxy=\n" {
			t.Errorf("run_command %v: %v", args["egress"], r)
		}
	}

	// Outside the policy's list: refused before anything runs, naming the
	// argument and what the policy allows.
	msg := s.toolErr("run_command", map[string]any{"command": "true", "egress": []any{"mirror.sbx.test:443"}})
	if !strings.Contains(msg, `egress: "mirror.sbx.test:443" is not within the policy's egress.allow (mirror.sbx.test:`+port) {
		t.Errorf("egress outside the policy: %s", msg)
	}
	msg = s.toolErr("run_command", map[string]any{"command": "true", "egress": []any{"*.sbx.test:" + port}})
	if !strings.Contains(msg, `"*.sbx.test:`+port+`" is not within`) {
		t.Errorf("a wildcard broader than the policy's: %s", msg)
	}
}

// A workspace made with egress: its container joins the egress network, its
// jobs reach its list alone, and the list survives a restart, checked
// against the policy again; a workspace without it still has only lo.
func TestEgressWorkspaceAllowlist(t *testing.T) {
	t.Parallel()
	gw, port := egressMirror(t)
	state := t.TempDir()
	env := narrowPolicy(t, gw, port, false)
	s := startServerIn(t, state, env)

	name, plain := "e2e-egress-ws", "e2e-egress-ws-none"
	msg := s.toolErr("create_workspace", map[string]any{"name": name, "egress": []any{"elsewhere.sbx.test"}})
	if !strings.Contains(msg, `egress: "elsewhere.sbx.test" is not within the policy's egress.allow`) {
		t.Fatalf("create_workspace with a host off the policy: %s", msg)
	}
	own := []any{"mirror.sbx.test:" + port, "inner.wild.sbx.test:" + port}
	r := s.createWS(name, map[string]any{"language": "python", "egress": own})
	if got := fmt.Sprint(r["workspace"].(map[string]any)["egress"]); got != fmt.Sprint(own) {
		t.Fatalf("create_workspace's workspace.egress: %s, want %v", got, own)
	}
	s.createWS(plain, nil)

	probe := func(s *server) {
		t.Helper()
		r := s.ok("run_command", map[string]any{"workspace": name, "command": narrowProbe(gw, port), "timeout_s": 120})
		if out := str(r, "stdout"); str(r, "status") != "completed" || out != narrowWant {
			t.Fatalf("a job of the egress workspace: got\n%s\nwant\n%s\nrecord: %v", out, narrowWant, r)
		}
	}
	probe(s)
	if out := s.wsOut(name, "ls /sys/class/net"); out != "eth0\nlo\n" {
		t.Errorf("interfaces of the egress workspace's job: %q", out)
	}
	if out := s.wsOut(plain, `ls /sys/class/net; echo "proxy=${HTTPS_PROXY:-}"`); out != "lo\nproxy=\n" {
		t.Errorf("a job of a workspace without egress: %q", out)
	}
	// The proxy is the only peer: a fresh egress job cannot connect to a
	// service the workspace's job listens on, though both are on the network.
	bg := s.ok("run_command", map[string]any{"workspace": name, "command": "exec python3 -m http.server 8000", "background": true, "timeout_s": 120})
	self := s.wsOut(name, `for i in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', 8000), timeout=1)" 2>/dev/null && break; sleep 0.1; done
python3 -c "
import socket
ip = socket.gethostbyname(socket.gethostname())
socket.create_connection((ip, 8000), timeout=5)
print(ip, 'self connected')"`)
	ip, ok := strings.CutSuffix(self, " self connected\n")
	if !ok {
		t.Fatalf("the workspace's own listener: %q", self)
	}
	r = s.ok("run_command", map[string]any{"language": "python", "egress": []any{"mirror.sbx.test:" + port}, "command": `python3 -c "
import socket
try:
    socket.create_connection(('` + ip + `', 8000), timeout=10)
    print('peer connected')
except OSError:
    print('peer refused')"`})
	if str(r, "stdout") != "peer refused\n" {
		t.Errorf("a fresh egress job connecting to the egress workspace's listener at %s: %v", ip, r)
	}
	s.ok("kill_job", map[string]any{"job_id": str(bg, "job_id")})

	msg = s.toolErr("run_command", map[string]any{"workspace": name, "command": "true", "egress": []any{"mirror.sbx.test:" + port}})
	if !strings.Contains(msg, "create_workspace's egress") {
		t.Errorf("egress with a workspace: %s", msg)
	}

	// A restart keeps the list with the workspace.
	s.stop()
	s = startServerIn(t, state, env)
	probe(s)
	l := s.ok("list_workspaces", nil)
	for _, w := range l["workspaces"].([]any) {
		w := w.(map[string]any)
		if w["name"] == name && fmt.Sprint(w["egress"]) != fmt.Sprint(own) || w["name"] == plain && w["egress"] != nil {
			t.Errorf("list_workspaces: %v", w)
		}
	}

	// A policy that no longer allows the mirror refuses the workspace's jobs.
	s.stop()
	s = startServerIn(t, state, narrowPolicy(t, gw, port, false, `"other.sbx.test:`+port+`"`))
	res := s.call("run_command", map[string]any{"workspace": name, "command": "true"})
	if all := text(res) + fmt.Sprint(res.StructuredContent); !strings.Contains(all, "is not within the policy's egress.allow") {
		t.Errorf("a job of the egress workspace after the policy narrowed: %s", all)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
	s.ok("delete_workspace", map[string]any{"name": plain})
}

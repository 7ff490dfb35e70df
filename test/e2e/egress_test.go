package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// network: egress end to end: jobs reach the allowlist's hosts through the
// server's proxy, and nothing else.

// egressGateway makes the egress network the server uses (when missing) and
// returns its gateway, where the test's server listens.
func egressGateway(t *testing.T) string {
	t.Helper()
	gw := func() string {
		out, _ := exec.Command("docker", "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Gateway}} {{end}}", "sandboxer-egress").Output()
		return strings.TrimSpace(string(out))
	}
	if gw() == "" {
		if out, err := exec.Command("docker", "network", "create", "--internal", "--label", "dev.sandboxer.managed=true", "sandboxer-egress").CombinedOutput(); err != nil && !strings.Contains(string(out), "already exists") {
			t.Fatalf("docker network create: %v: %s", err, out)
		}
	}
	g := strings.Fields(gw())
	if len(g) == 0 {
		t.Fatal("the egress network has no gateway")
	}
	return g[0]
}

// egressProbe is a python job: CONNECT through $HTTPS_PROXY to each target
// ("host status body"), then a plain http:// request through $HTTP_PROXY.
const egressProbe = `python3 - "$@" <<'EOF'
import base64, os, socket, sys, urllib.parse, urllib.request
p = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
auth = base64.b64encode(f"{p.username}:{p.password}".encode()).decode()
for target in sys.argv[2:]:
    s = socket.create_connection((p.hostname, p.port), timeout=30)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
    f = s.makefile("rb")
    status = f.readline().split()[1].decode()
    while f.readline() not in (b"\r\n", b""):
        pass
    body = "-"
    if status == "200":
        s.sendall(b"GET /hello HTTP/1.0\r\nHost: x\r\n\r\n")
        body = f.read().decode().split("\r\n\r\n", 1)[-1].strip()
    print(target.rsplit(":", 1)[0], status, body)
    s.close()
print("plain", urllib.request.urlopen(sys.argv[1], timeout=30).read().decode().strip())
try:
    socket.create_connection(("203.0.113.80", 443), timeout=10)
    print("direct connected")
except OSError:
    print("direct refused")
h, pt = os.environ["HOSTSERVICE"].rsplit(":", 1)
try:
    socket.create_connection((h, int(pt)), timeout=10)
    print("host service connected")
except OSError:
    print("host service refused")
EOF`

func TestEgressAllowlist(t *testing.T) {
	t.Parallel()
	gw := egressGateway(t)
	ln, err := net.Listen("tcp", gw+":0")
	if err != nil {
		t.Skipf("cannot listen on the egress network's gateway %s: %v", gw, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the mirror") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	s := startServer(t, policyEnv(t, fmt.Sprintf(`pool:
  enabled: false
network: egress
egress:
  allow: ["mirror.sbx.test:%[1]s", "*.wild.sbx.test:%[1]s"]
  hosts:
    mirror.sbx.test: %[2]s
    inner.wild.sbx.test: 10.0.0.7
`, port, gw)))
	r := s.ok("run_command", map[string]any{"command": egressCommand(port, gw), "language": "python", "timeout_s": 120})
	out := str(r, "stdout")
	want := "mirror.sbx.test 200 hello from the mirror\n" + // named exactly: reached, though private
		"other.example.com 403 -\n" + // not on the list
		gw + " 403 -\n" + // a raw address the list does not name
		"inner.wild.sbx.test 403 -\n" + // a wildcard's name that resolves to a private address
		"plain hello from the mirror\n" +
		"direct refused\n" + // no route out but through the proxy
		"host service refused\n" // the host's services on the gateway are fenced off
	if str(r, "status") != "completed" || out != want {
		t.Fatalf("egress probe: got\n%s\nwant\n%s\nrecord: %v", out, want, r)
	}

	// The job's container is on the internal network only, and the proxy
	// audited every decision with tenant, job, host, port and bytes.
	jobID := str(r, "job_id")
	entries := egressAudit(t, s)
	var allowed, refused int
	for _, e := range entries {
		if e["job_id"] != jobID {
			continue
		}
		switch e["decision"] {
		case "allowed":
			allowed++
			if e["host"] != "mirror.sbx.test" || fmt.Sprint(e["port"]) != port || e["bytes_down"] == nil || e["client"] == nil {
				t.Errorf("allowed entry: %v", e)
			}
		case "refused":
			refused++
		}
	}
	if allowed != 2 || refused != 3 {
		t.Errorf("audit: %d allowed, %d refused for job %s, want 2 and 3: %v", allowed, refused, jobID, entries)
	}

	// A job without the allowlist (a workspace's) has no network at all.
	s.createWS("e2e-egress-none", nil)
	if out := s.wsOut("e2e-egress-none", `ls /sys/class/net; echo "proxy=${HTTPS_PROXY:-}"`); out != "lo\nproxy=\n" {
		t.Errorf("a workspace job on an egress server: %q", out)
	}
	s.ok("delete_workspace", map[string]any{"name": "e2e-egress-none"})
}

// egressCommand is the probe with its arguments.
func egressCommand(port, gw string) string {
	args := fmt.Sprintf("http://mirror.sbx.test:%[1]s/hello mirror.sbx.test:%[1]s other.example.com:443 %[2]s:%[1]s inner.wild.sbx.test:%[1]s", port, gw)
	return "set -- " + args + "\nexport HOSTSERVICE=" + gw + ":" + port + "\n" + egressProbe
}

// egressAudit reads the server's audit log's egress entries.
func egressAudit(t *testing.T, s *server) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range auditEntries(t, s) {
		if e["tool"] == "egress" {
			out = append(out, e)
		}
	}
	return out
}

// auditEntries reads the server's audit log.
func auditEntries(t *testing.T, s *server) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(s.stateDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// Installs through the proxy (workspaces.install_network: egress): the
// operator's registry is reached, any other is refused and audited.
func TestEgressInstalls(t *testing.T) {
	t.Parallel()
	index := pipIndex(t) // on the docker bridge's gateway
	u, err := url.Parse(index)
	if err != nil {
		t.Fatal(err)
	}
	egressGateway(t)
	s := startServer(t, installPolicy(t, fmt.Sprintf(`  install_network: egress
  pip_index_url: http://mirror.sbx.test:%[1]s/simple
egress:
  allow: ["mirror.sbx.test:%[1]s"]
  hosts:
    mirror.sbx.test: %[2]s
`, u.Port(), u.Hostname())))
	name := "e2e-egress-install"
	s.createWS(name, map[string]any{"language": "python"})
	r := s.ok("install_packages", map[string]any{"workspace": name, "packages": []any{"sbxdemo==1.2.3"}})
	if r["installed"] != true {
		t.Fatalf("pip install through the proxy: %v", r)
	}
	if out := s.wsOut(name, `python3 -c "import sbxdemo; print(sbxdemo.answer())"; ls /sys/class/net`); out != "42\nlo\n" {
		t.Fatalf("after the install: %q", out)
	}
	// Debian's mirror is not on the list: apt is refused by the proxy.
	r, msg := s.failedWith("install_packages", map[string]any{"workspace": name, "manager": "apt", "packages": []any{"sqlite3"}})
	if r["installed"] != false {
		t.Fatalf("apt install off the list: %v (%s)", r, msg)
	}
	var allowed, refused bool
	for _, e := range egressAudit(t, s) {
		if e["job_id"] != "install:"+name {
			continue
		}
		allowed = allowed || e["decision"] == "allowed" && e["host"] == "mirror.sbx.test"
		refused = refused || e["decision"] == "refused" && e["host"] != "mirror.sbx.test"
	}
	if !allowed || !refused {
		t.Errorf("audit of the installs: allowed mirror %v, refused Debian's mirror %v: %v; apt: %s", allowed, refused, egressAudit(t, s), msg)
	}
	s.ok("delete_workspace", map[string]any{"name": name})
}

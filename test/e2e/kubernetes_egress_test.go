package e2e

import (
	"fmt"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// network: egress on backend kubernetes: pods have no network, so a job's
// (and an egress workspace's) only way out is the tunnel-only exec the
// server opens beside it, listening on 127.0.0.1:3128 in the pod, to the
// server's proxy. The mirror listens on the host's loopback, which the
// proxy reaches only because the allowlist names it exactly (pinned by
// egress.hosts); a host off the list and a raw private address are refused
// and audited as on Docker.

// k8sEgressProbe is a python job: a plain request through $HTTP_PROXY to
// each URL, a CONNECT through $HTTPS_PROXY to each target, then a direct
// connection (no route: the pod has loopback only).
const k8sEgressProbe = `python3 - "$@" <<'EOF'
import base64, os, socket, sys, urllib.error, urllib.parse, urllib.request
print("proxy", urllib.parse.urlsplit(os.environ["HTTP_PROXY"]).port, os.environ["NO_PROXY"])
for u in sys.argv[1:3]:
    try:
        print(u.split("/")[2], urllib.request.urlopen(u, timeout=30).read().decode().strip())
    except urllib.error.HTTPError as e:
        print(u.split("/")[2], e.code)
p = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
auth = base64.b64encode(f"{p.username}:{p.password}".encode()).decode()
for target in sys.argv[3:]:
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
    print("connect", target.rsplit(":", 1)[0], status, body)
    s.close()
try:
    socket.create_connection(("203.0.113.80", 443), timeout=10)
    print("direct connected")
except OSError:
    print("direct refused")
EOF`

// k8sEgressWant is the probe's output with the mirror on port.
func k8sEgressWant(port string) string {
	return "proxy 3128 localhost,127.0.0.1,::1\n" +
		"mirror.sbx.test:" + port + " hello from the mirror\n" +
		"other.sbx.test:" + port + " 403\n" + // not on the list
		"connect mirror.sbx.test 200 hello from the mirror\n" +
		"connect 127.0.0.1 403 -\n" + // a raw private address the list does not name
		"direct refused\n"
}

func k8sEgressCommand(port string) string {
	return fmt.Sprintf("set -- http://mirror.sbx.test:%[1]s/hello http://other.sbx.test:%[1]s/hello mirror.sbx.test:%[1]s 127.0.0.1:%[1]s\n", port) + k8sEgressProbe
}

// k8sBashProbe fetches through $HTTP_PROXY with bash alone (the bash
// image has no HTTP client): the warm pod's job.
const k8sBashProbe = `p=${HTTP_PROXY#http://}; cred=${p%@*}; hp=${p##*@}
get() {
  exec 3<>/dev/tcp/${hp%:*}/${hp##*:} || { echo "$1 no tunnel"; return; }
  printf 'GET http://%s/hello HTTP/1.0\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n' "$1" "$1" "$(printf %s "$cred" | base64 -w0)" >&3
  r=$(tr -d '\r' <&3); exec 3<&-
  code=$(printf '%s\n' "$r" | head -1 | cut -d' ' -f2)
  if [ "$code" = 200 ]; then echo "$1 $code $(printf '%s\n' "$r" | tail -1)"; else echo "$1 $code"; fi
}
`

func TestKubernetesEgress(t *testing.T) {
	kubernetesPolicyFor(t) // skips outside make test-k8s
	egressThroughTunnel(t, func(extra string) []string { return kubernetesEnvWith(t, extra) }, (*server).pods)
}

// egressThroughTunnel: on an engine whose egress is the tunnel (a server
// with env(extra policy), its sandboxes listed by list), a job in a fresh
// sandbox, one in a warm sandbox, and the jobs of a workspace made with
// egress (after a server restart, and after an idle stop and start) reach
// the allowlist's host through the proxy and nothing else; a job with
// egress: [] and a workspace without egress have no proxy at all.
func egressThroughTunnel(t *testing.T, env func(extra string) []string, list func(s *server, all bool) []sandbox.Container) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello from the mirror") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	serverEnv := env(fmt.Sprintf(`network: egress
egress:
  allow: ["mirror.sbx.test:%[1]s"]
  hosts:
    mirror.sbx.test: 127.0.0.1
workspaces:
  idle_stop_s: 4
`, port))
	s := startServer(t, serverEnv...)
	listed := func(all bool) []sandbox.Container { return list(s, all) }
	// A job in a fresh sandbox (python: no warm ones).
	r := s.ok("run_command", map[string]any{"command": k8sEgressCommand(port), "language": "python", "timeout_s": 120})
	if out := str(r, "stdout"); str(r, "status") != "completed" || out != k8sEgressWant(port) {
		t.Fatalf("egress probe in a fresh sandbox: got\n%s\nwant\n%s\nrecord: %v\nstderr:\n%s", out, k8sEgressWant(port), r, tail(s.stderr.String(), 3000))
	}
	jobID := str(r, "job_id")
	var allowed, refused int
	for _, e := range egressAudit(t, s) {
		if e["job_id"] != jobID {
			continue
		}
		switch e["decision"] {
		case "allowed":
			allowed++
			if e["host"] != "mirror.sbx.test" || fmt.Sprint(e["port"]) != port || e["client"] == nil {
				t.Errorf("allowed entry: %v", e)
			}
		case "refused":
			refused++
		}
	}
	if allowed != 2 || refused != 2 {
		t.Errorf("audit: %d allowed, %d refused for job %s, want 2 and 2: %v", allowed, refused, jobID, egressAudit(t, s))
	}

	// egress: [] is no network at all: no proxy variable, no tunnel.
	r = s.ok("run_command", map[string]any{"language": "python", "egress": []any{}, "timeout_s": 60,
		"command": `echo "proxy=${HTTPS_PROXY:-}"; python3 -c "import socket; socket.create_connection(('127.0.0.1', 3128), timeout=5)" 2>/dev/null && echo tunnel || echo "no tunnel"`})
	if out := str(r, "stdout"); out != "proxy=\nno tunnel\n" {
		t.Errorf("a job with egress: []: %v", r)
	}

	// A job in a warm sandbox (bash): the tunnel and the grant are the job's.
	// (A sandbox listed is not yet ready while it starts: a job then runs
	// cold and leaves the warm one, so a few tries, bounded.)
	served := false
	for try := 0; try < 10 && !served; try++ {
		warm := s.waitWarmOn(listed)
		r = s.ok("run_command", map[string]any{"command": k8sBashProbe + "get mirror.sbx.test:" + port + "; get other.sbx.test:" + port, "timeout_s": 60})
		if want := "mirror.sbx.test:" + port + " 200 hello from the mirror\nother.sbx.test:" + port + " 403\n"; str(r, "stdout") != want {
			t.Fatalf("an egress job in bash: %v, want %q\nstderr:\n%s", r, want, tail(s.stderr.String(), 3000))
		}
		served = str(s.ok("get_job", map[string]any{"job_id": str(r, "job_id")}), "container_id") == warm
	}
	if !served {
		t.Errorf("no egress job ran in a warm sandbox in 10 tries")
	}

	// A workspace made with egress: its jobs reach the list through the
	// workspace's tunnel, after a server restart and after an idle stop
	// and start too; a workspace without it has no proxy at all.
	name, plain := "k8s-egress-ws", "k8s-egress-none"
	s.createWS(name, map[string]any{"language": "python", "egress": []any{"mirror.sbx.test:" + port}})
	s.createWS(plain, map[string]any{"language": "python"})
	probe := func() {
		t.Helper()
		r := s.ok("run_command", map[string]any{"workspace": name, "command": k8sEgressCommand(port), "timeout_s": 120})
		if out := str(r, "stdout"); str(r, "status") != "completed" || out != k8sEgressWant(port) {
			t.Fatalf("a job of the egress workspace: got\n%s\nwant\n%s\nrecord: %v\nstderr:\n%s", out, k8sEgressWant(port), r, tail(s.stderr.String(), 3000))
		}
	}
	probe()
	if out := s.wsOut(plain, `echo "proxy=${HTTPS_PROXY:-}"; python3 -c "import socket; socket.create_connection(('127.0.0.1', 3128), timeout=5)" 2>/dev/null && echo tunnel || echo "no tunnel"`); out != "proxy=\nno tunnel\n" {
		t.Errorf("a job of a workspace without egress: %q", out)
	}
	s.ok("delete_workspace", map[string]any{"name": plain})
	// A job running when its server dies keeps its grant: the new server
	// adopts it and opens its tunnel again. It waits until the old tunnel
	// is gone, then until the mirror answers again (bounded).
	adopted := str(s.ok("run_command", map[string]any{"background": true, "timeout_s": 300, "command": k8sBashProbe + `
until ! (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null; do sleep 0.2; done; echo tunnel-gone
for i in $(seq 1 600); do out=$(get mirror.sbx.test:` + port + ` 2>/dev/null); case $out in *" 200 "*) break;; esac; sleep 0.2; done; echo "$out"`}), "job_id")
	// A background job is "running" while its sandbox starts: the crash
	// comes once it has one (a job lost while starting is another case).
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if rec := s.ok("get_job", map[string]any{"job_id": adopted}); str(rec, "container_id") != "" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the job to adopt has no sandbox after 60 s: %v", rec)
		}
	}
	// A new server finds it and the workspace's sandbox running (their
	// tunnels went with the old server): both are opened again.
	s.kill9()
	old := s
	s = startServerIn(t, s.stateDir, serverEnv...)
	g := s.ok("get_job", map[string]any{"job_id": adopted, "wait_s": 50})
	if out, _ := s.readAll(adopted); str(g, "status") != "completed" || out != "tunnel-gone\nmirror.sbx.test:"+port+" 200 hello from the mirror\n" {
		t.Fatalf("an egress job adopted after a restart: %q, record %v\nstderr of the first server:\n%s\nstderr of the second:\n%s", out, g, tail(old.stderr.String(), 3000), tail(s.stderr.String(), 3000))
	}
	probe()
	deadline := time.Now().Add(60 * time.Second)
	for {
		stopped := false
		for _, w := range s.ok("list_workspaces", nil)["workspaces"].([]any) {
			if w := w.(map[string]any); w["name"] == name && w["state"] == "stopped" {
				stopped = true
			}
		}
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the egress workspace did not stop after idling")
		}
		time.Sleep(500 * time.Millisecond)
	}
	probe() // started again: its sandbox's tunnel is new
	s.ok("delete_workspace", map[string]any{"name": name})
	s.waitNoneOn(listed, false, 30*time.Second)
	s.stop()
	s.waitNoneOn(listed, true, 30*time.Second)
}

// Secrets on backend kubernetes: the proxy behind the pod's tunnel swaps
// the placeholder for the value at the bound host, as on Docker.
func TestKubernetesSecrets(t *testing.T) {
	secretsThroughTunnel(t, kubernetesPolicyFor(t))
}

// secretsThroughTunnel runs a job with a secret on a server of policy pol
// (an engine whose egress is the tunnel): the proxy swaps the placeholder
// for the value at the bound host only, and refuses plain HTTP there. It
// returns the server.
func secretsThroughTunnel(t *testing.T, pol string) *server {
	t.Helper()
	upCA := upstreamCA(t)
	value := "tunnel-value-" + fmt.Sprint(time.Now().UnixNano())
	up := startSecretUpstream(t, "127.0.0.1", upCA, value)
	dir := t.TempDir()
	caFile, valueFile := filepath.Join(dir, "upstream-ca.pem"), filepath.Join(dir, "api-token")
	os.WriteFile(caFile, upCA.CertPEM(), 0o644)
	os.WriteFile(valueFile, []byte(value), 0o600)
	s := startServer(t, "SSL_CERT_FILE="+caFile, policyEnv(t, pol+fmt.Sprintf(`
egress:
  allow: ["bound.sbx.test:%[1]s", "free.sbx.test:%[1]s"]
  hosts: {bound.sbx.test: 127.0.0.1, free.sbx.test: 127.0.0.1}
secrets:
  API_TOKEN: {value_file: %[2]s, hosts: ["bound.sbx.test:%[1]s"]}
`, up.port, valueFile)))
	r := s.ok("run_command", map[string]any{"language": "python", "secrets": []any{"API_TOKEN"}, "egress": []any{"free.sbx.test:" + up.port}, "timeout_s": 120,
		"command": fmt.Sprintf(`echo "var=$API_TOKEN"; echo "bound=$(curl -sS -H "X-Api-Key: $API_TOKEN" https://bound.sbx.test:%[1]s/t)"; echo "free=$(curl -ksS -H "X-Api-Key: $API_TOKEN" https://free.sbx.test:%[1]s/t)"; echo "plain=$(curl -s -o /dev/null -w '%%{http_code}' http://bound.sbx.test:%[1]s/t)"`, up.port)})
	out := str(r, "stdout")
	f := fFields(out)
	if str(r, "status") != "completed" || !strings.HasPrefix(f["var"], "sbx_placeholder_") || f["bound"] != "ok" || f["free"] != "ok" || f["plain"] != "403" {
		t.Fatalf("secrets through the tunnel: %v\n%s\nstderr:\n%s", r, out, tail(s.stderr.String(), 3000))
	}
	var bound, free bool
	for _, q := range up.requests() {
		bound = bound || (q.host == "bound.sbx.test" && q.apiKey == value)
		free = free || (q.host == "free.sbx.test" && q.apiKey == f["var"])
	}
	if !bound || !free {
		t.Fatalf("upstream: value at the bound host %v, placeholder at the free host %v: %+v", bound, free, up.requests())
	}
	return s
}

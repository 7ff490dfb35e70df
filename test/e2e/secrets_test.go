package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/testutil"
)

// A secret end to end: a real HTTPS upstream on the host (its CA in the
// server's trust store through SSL_CERT_FILE), reached through the proxy
// by allowed names, with a Git repository behind `git http-backend`.

// upstreamCA is the CA of the test's upstream, which answers any name
// with a certificate of it (SNI): the proxy's own CA type, made afresh.
func upstreamCA(t *testing.T) *egress.CA {
	t.Helper()
	ca, err := egress.LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// seenRequest is what the upstream received.
type seenRequest struct{ host, path, apiKey, auth string }

// secretUpstream serves HTTPS on the egress gateway: /reflect echoes the
// X-Api-Key header, /git/ is a repository that wants Basic credentials
// with password value, anything else answers "ok".
type secretUpstream struct {
	port string
	mu   sync.Mutex
	seen []seenRequest
}

func (u *secretUpstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

func startSecretUpstream(t *testing.T, gw string, ca *egress.CA, value string) *secretUpstream {
	t.Helper()
	repo := gitRepo(t)
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("git is not installed on the host: %v", err)
	}
	backend := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"), Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(repo), "GIT_HTTP_EXPORT_ALL=1"}}
	u := &secretUpstream{}
	ln, err := tls.Listen("tcp", gw+":0", &tls.Config{GetCertificate: ca.ServeAs})
	if err != nil {
		t.Skipf("cannot listen on the egress network's gateway %s: %v", gw, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, seenRequest{strings.Split(r.Host, ":")[0], r.URL.Path, r.Header.Get("X-Api-Key"), r.Header.Get("Authorization")})
		u.mu.Unlock()
		switch {
		case r.URL.Path == "/reflect":
			fmt.Fprint(w, r.Header.Get("X-Api-Key"))
		case strings.HasPrefix(r.URL.Path, "/git/"):
			if _, pw, ok := r.BasicAuth(); !ok || pw != value {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "credentials wanted", http.StatusUnauthorized)
				return
			}
			backend.ServeHTTP(w, r)
		default:
			fmt.Fprint(w, "ok")
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, u.port, _ = net.SplitHostPort(ln.Addr().String())
	return u
}

// gitRepo is a bare repository with one commit whose README says
// "hello from git".
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	work, bare := filepath.Join(dir, "work"), filepath.Join(dir, "repos", "repo.git")
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@example.com", "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	run("init", "-q", work)
	os.WriteFile(filepath.Join(work, "README"), []byte("hello from git\n"), 0o644)
	run("-C", work, "add", "README")
	run("-C", work, "commit", "-q", "-m", "first")
	run("clone", "-q", "--bare", work, bare)
	return bare
}

// secretSetup is a secret's value, its upstream on the egress gateway, and
// the files a server reads: the upstream's CA (for SSL_CERT_FILE) and the
// value (mode 0600).
type secretSetup struct {
	gw, value, caFile, valueFile string
	up                           *secretUpstream
}

func newSecretSetup(t *testing.T) secretSetup {
	t.Helper()
	gw := egressGateway(t)
	upCA := upstreamCA(t)
	b := make([]byte, 16)
	rand.Read(b)
	value := "real-" + hex.EncodeToString(b)
	up := startSecretUpstream(t, gw, upCA, value)
	dir := t.TempDir()
	caFile, valueFile := filepath.Join(dir, "upstream-ca.pem"), filepath.Join(dir, "api-token")
	os.WriteFile(caFile, upCA.CertPEM(), 0o644)
	os.WriteFile(valueFile, []byte(value+"\n"), 0o600)
	return secretSetup{gw: gw, value: value, caFile: caFile, valueFile: valueFile, up: up}
}

func TestSecretsSwappedAtTheProxy(t *testing.T) {
	t.Parallel()
	sec := newSecretSetup(t)
	gw, value, up, caFile, valueFile := sec.gw, sec.value, sec.up, sec.caFile, sec.valueFile
	state := t.TempDir()
	s := startServerIn(t, state, "SSL_CERT_FILE="+caFile, "OTHER_SECRET_VALUE=other-"+value, policyEnv(t, fmt.Sprintf(`
egress:
  allow: ["bound.sbx.test:%[1]s", "free.sbx.test:%[1]s"]
  hosts: {bound.sbx.test: %[2]s, free.sbx.test: %[2]s}
secrets:
  API_TOKEN: {value_file: %[3]s, hosts: ["bound.sbx.test:%[1]s"]}
  ALICE_ONLY: {env: OTHER_SECRET_VALUE, hosts: ["bound.sbx.test:%[1]s"], tenants: [alice]}
`, up.port, gw, valueFile)))
	bound, free := "https://bound.sbx.test:"+up.port, "https://free.sbx.test:"+up.port

	// A tenant not listed is refused, naming the secret.
	if msg := s.toolErr("run_command", map[string]any{"command": "true", "secrets": []any{"ALICE_ONLY"}}); !strings.Contains(msg, `ALICE_ONLY is not for tenant "local"`) {
		t.Errorf("a secret of another tenant: %s", msg)
	}

	// Job A uses the secret every way a client would, then waits so the
	// test can look inside its sandbox. (The free host is tunnelled, so the
	// job sees the upstream's own certificate, of the test's CA, which the
	// image does not trust: -k there.)
	script := fmt.Sprintf(`set -u
echo "var=$API_TOKEN"
curl -sS -o /tmp/bound.txt -H "X-Api-Key: key $API_TOKEN" %[1]s/hello && echo "bound=$(cat /tmp/bound.txt)"
echo "free=$(curl -ksS -H "X-Api-Key: $API_TOKEN" %[2]s/hello)"
echo "plain=$(curl -s -o /dev/null -w '%%{http_code}' -H "X-Api-Key: $API_TOKEN" http://bound.sbx.test:%[3]s/hello)"
git clone -q "https://x-access-token:$API_TOKEN@bound.sbx.test:%[3]s/git/repo.git" /tmp/repo && echo "clone=$(cat /tmp/repo/README)"
cd /tmp && (ulimit -c unlimited 2>/dev/null; bash -c 'kill -SEGV $$') 2>/dev/null
echo "corelimit=$(ulimit -Hc)"; echo "cores=$(ls /tmp | grep -c '^core')"
echo READY
sleep 300`, bound, free, up.port)
	// Its grant: the host it names with egress, and the secret's host.
	r := s.ok("run_command", map[string]any{"command": script, "secrets": []any{"API_TOKEN"}, "egress": []any{"free.sbx.test:" + up.port},
		"background": true, "timeout_s": 600})
	jobA := str(r, "job_id")
	var out string
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(out, "READY") && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		out, _ = s.readAll(jobA)
	}
	fields := fFields(out)
	placeholder := fields["var"]
	if !strings.HasPrefix(placeholder, "sbx_placeholder_") || fields["bound"] != "ok" || fields["free"] != "ok" ||
		fields["plain"] != "403" || fields["clone"] != "hello from git" || strings.Contains(out, value) {
		t.Fatalf("job A's output:\n%s", out)
	}

	// The bound host received the value (in the header, and as git's Basic
	// password); the other allowed host received the placeholder.
	var boundGot, freeGot, gitGot bool
	for _, q := range up.requests() {
		switch {
		case q.host == "bound.sbx.test" && q.path == "/hello":
			boundGot = q.apiKey == "key "+value
		case q.host == "free.sbx.test":
			freeGot = q.apiKey == placeholder
		case q.host == "bound.sbx.test" && strings.HasPrefix(q.path, "/git/") && q.auth != "":
			gitGot = q.auth == "Basic "+base64.StdEncoding.EncodeToString([]byte("x-access-token:"+value))
		}
		if strings.Contains(q.apiKey+q.auth, placeholder) && q.host == "bound.sbx.test" {
			t.Errorf("the bound host received the placeholder: %+v", q)
		}
	}
	if !boundGot || !freeGot || !gitGot {
		t.Fatalf("upstream: value at the bound host %v, placeholder at the free host %v, git's credentials %v: %+v", boundGot, freeGot, gitGot, up.requests())
	}

	// Inside the sandbox: every process's environment, every file it can
	// write (a core dump among them, where the limits allow one) hold the
	// placeholder, never the value, nor the CA's key.
	var cid string
	for _, c := range s.containers() {
		if c.JobID == jobA {
			cid = c.ID
		}
	}
	if cid == "" {
		t.Fatal("job A's container is not found")
	}
	environ, err := exec.Command("docker", "exec", cid, "sh", "-c", "cat /proc/[0-9]*/environ").Output()
	if err != nil || !bytes.Contains(environ, []byte("API_TOKEN="+placeholder)) || bytes.Contains(environ, []byte(value)) {
		t.Fatalf("environments in the sandbox (%v): placeholder %v, value %v", err, bytes.Contains(environ, []byte(placeholder)), bytes.Contains(environ, []byte(value)))
	}
	files, err := exec.Command("docker", "exec", cid, "tar", "-C", "/", "-cf", "-", "tmp", "workspace", "home").Output()
	if len(files) == 0 {
		t.Fatalf("tar of the sandbox's writable places: %v", err)
	}
	caKey, _ := os.ReadFile(filepath.Join(state, "egress-ca", "ca-key.pem"))
	keyBody := strings.Join(strings.Split(string(caKey), "\n")[1:3], "\n")
	caCert, _ := os.ReadFile(filepath.Join(state, "egress-ca", "ca.pem"))
	if bytes.Contains(files, []byte(value)) || len(keyBody) < 40 || bytes.Contains(files, []byte(keyBody)) || !bytes.Contains(files, caCert) {
		t.Fatalf("the sandbox's files: value %v, CA key %v (%d bytes of it), CA certificate %v",
			bytes.Contains(files, []byte(value)), bytes.Contains(files, []byte(keyBody)), len(keyBody), bytes.Contains(files, caCert))
	}
	// A core dump: the sandbox's hard core limit is 0, so none can be
	// written; were one allowed, it would be among the files just read.
	if fields["corelimit"] != "0" && fields["cores"] != "1" {
		t.Errorf("the core limit is %s, yet no core file was written: %s", fields["corelimit"], out)
	}
	s.ok("kill_job", map[string]any{"job_id": jobA})

	// Job B: a response that reflects the value is stored and returned
	// with B's placeholder; job A's placeholder, replayed by B, reaches
	// the bound host as it is.
	r = s.ok("run_command", map[string]any{"secrets": []any{"API_TOKEN"}, "timeout_s": 120, "command": fmt.Sprintf(
		`echo "mine=$API_TOKEN"; echo "reflected=$(curl -sS -H "X-Api-Key: $API_TOKEN" %[1]s/reflect)"; curl -sS -H "X-Api-Key: %[2]s" %[1]s/replay`, bound, placeholder)})
	outB := str(r, "stdout")
	fb := fFields(outB)
	if fb["mine"] == "" || fb["mine"] == placeholder || fb["reflected"] != fb["mine"] || strings.Contains(outB, value) {
		t.Fatalf("job B: %s", outB)
	}
	if stored, _ := s.readAll(str(r, "job_id")); strings.Contains(stored, value) || !strings.Contains(stored, "reflected="+fb["mine"]) {
		t.Fatalf("job B's stored output: %s", stored)
	}
	for _, q := range up.requests() {
		if q.path == "/replay" && q.apiKey != placeholder {
			t.Errorf("a placeholder of another job was swapped: %+v", q)
		}
	}

	// Python's own TLS (urllib, in a script a warm sandbox may have started
	// ahead) trusts the proxy's CA through the bundle too.
	py := s.ok("run_script", map[string]any{"language": "python", "secrets": []any{"API_TOKEN"}, "timeout_s": 120, "code": fmt.Sprintf(`
import os, urllib.request
req = urllib.request.Request("%s/python", headers={"X-Api-Key": os.environ["API_TOKEN"]})
print("python=" + urllib.request.urlopen(req, timeout=30).read().decode())
`, bound)})
	if str(py, "stdout") != "python=ok\n" {
		t.Fatalf("a python script with the secret: %v", py)
	}
	var pyGot bool
	for _, q := range up.requests() {
		pyGot = pyGot || (q.path == "/python" && q.apiKey == value)
	}
	if !pyGot {
		t.Errorf("the python script's request reached the bound host without the value: %+v", up.requests())
	}

	// A workspace keeps its placeholders for its jobs.
	s.ok("create_workspace", map[string]any{"name": "w", "secrets": []any{"API_TOKEN"}})
	w1 := s.ok("run_command", map[string]any{"workspace": "w", "command": fmt.Sprintf(`echo "$API_TOKEN $(curl -sS -H "X-Api-Key: $API_TOKEN" %s/ws)"`, bound)})
	w2 := s.ok("run_command", map[string]any{"workspace": "w", "command": `echo "$API_TOKEN"`})
	p1 := strings.Fields(str(w1, "stdout"))
	if len(p1) != 2 || p1[1] != "ok" || strings.TrimSpace(str(w2, "stdout")) != p1[0] {
		t.Fatalf("workspace jobs: %q, %q", str(w1, "stdout"), str(w2, "stdout"))
	}
	if msg := s.toolErr("run_command", map[string]any{"workspace": "w", "command": "true", "secrets": []any{"API_TOKEN"}}); !strings.Contains(msg, "create_workspace's secrets") {
		t.Errorf("secrets on a workspace's job: %s", msg)
	}
	s.ok("delete_workspace", map[string]any{"name": "w"})

	// The audit names each use of the secret, never its value.
	var uses int
	for _, e := range secretAudit(t, s) {
		if e["host"] == "bound.sbx.test" && fmt.Sprint(e["secrets"]) == "[API_TOKEN]" && e["client"] == "local" && e["job_id"] != "" {
			uses++
		}
	}
	if uses < 4 {
		t.Errorf("audit: %d uses of API_TOKEN recorded, want at least 4 (job A's header and git's, job B's, the workspace's)", uses)
	}

	// Nothing the server keeps holds the value: its log, the audit log,
	// the whole state directory.
	s.stop()
	if strings.Contains(s.stderr.String(), value) {
		t.Error("the server's log holds the value")
	}
	filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(value)) {
				t.Errorf("%s holds the value", path)
			}
		}
		return nil
	})
}

// secretAudit is the audit log's secret uses.
func secretAudit(t *testing.T, s *server) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range auditEntries(t, s) {
		if e["tool"] == "secret" {
			out = append(out, e)
		}
	}
	return out
}

// A secret whose hosts are not in egress.allow is refused when the policy
// loads, naming the key.
func TestSecretOutsideTheAllowlistRefused(t *testing.T) {
	t.Parallel()
	pol := writePolicy(t, `
egress:
  allow: ["api.example.com"]
secrets:
  LEAKY: {env: HOME, hosts: ["evil.example.org"]}
`)
	out, err := exec.Command(binPath, "serve", "--state-dir", t.TempDir(), "--policy", pol).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `secrets.LEAKY.hosts: "evil.example.org" is not within`) {
		t.Fatalf("serve with a secret outside egress.allow: %v\n%s", err, out)
	}
}

// doctor checks each secret's source (never showing a value).
func TestDoctorChecksSecrets(t *testing.T) {
	t.Parallel()
	testutil.RequireDocker(t)
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("value-in-an-open-file"), 0o644)
	pol := writePolicy(t, `
egress:
  allow: ["api.example.com"]
secrets:
  OPEN: {value_file: `+open+`, hosts: [api.example.com]}
  FROM_ENV: {env: E2E_SECRET_VALUE, hosts: [api.example.com]}
`)
	cmd := exec.Command(binPath, "doctor", "--state-dir", t.TempDir(), "--policy", pol)
	cmd.Env = append(os.Environ(), "E2E_SECRET_VALUE=value-from-env")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "FAIL secret OPEN") || !strings.Contains(string(out), "has mode 0644: make it 0600") ||
		!strings.Contains(string(out), "ok   secret FROM_ENV") || strings.Contains(string(out), "value-") {
		t.Fatalf("doctor with secrets: %v\n%s", err, out)
	}
}

// A job adopted after the server crashed keeps its grant: the proxy comes
// back on the port in the job's HTTP_PROXY and takes the job's token, its
// hosts and its secret's placeholder again.
func TestSecretsAndEgressSurviveRestart(t *testing.T) {
	t.Parallel()
	gw := egressGateway(t)
	upCA := upstreamCA(t)
	value := "restart-value-" + fmt.Sprint(time.Now().UnixNano())
	up := startSecretUpstream(t, gw, upCA, value)
	dir := t.TempDir()
	caFile, valueFile := filepath.Join(dir, "upstream-ca.pem"), filepath.Join(dir, "api-token")
	os.WriteFile(caFile, upCA.CertPEM(), 0o644)
	os.WriteFile(valueFile, []byte(value), 0o600)
	env := []string{"SSL_CERT_FILE=" + caFile, policyEnv(t, fmt.Sprintf(`
egress:
  allow: ["bound.sbx.test:%[1]s", "free.sbx.test:%[1]s"]
  hosts: {bound.sbx.test: %[2]s, free.sbx.test: %[2]s}
secrets:
  API_TOKEN: {value_file: %[3]s, hosts: ["bound.sbx.test:%[1]s"]}
`, up.port, gw, valueFile))}
	s := startServer(t, env...)
	r := s.ok("run_command", map[string]any{"secrets": []any{"API_TOKEN"}, "egress": []any{"free.sbx.test:" + up.port}, "background": true, "timeout_s": 300,
		// After the crash the proxy is down until the new server is up:
		// the job tries each request again, once a second, for a minute.
		"command": fmt.Sprintf(`echo started; sleep 5
get() { for i in $(seq 20); do curl -fsS "$@" && return; sleep 1; done; }
echo "bound=$(get -H "X-Api-Key: $API_TOKEN" https://bound.sbx.test:%[1]s/after)"; echo "free=$(get -k https://free.sbx.test:%[1]s/after)"`, up.port)})
	id := str(r, "job_id")
	if rd := s.ok("read_output", map[string]any{"job_id": id, "cursor": 0, "until": "started", "wait_s": 30}); rd["matched"] != true {
		t.Fatalf("the job did not start: %v", rd)
	}
	s.kill9()
	time.Sleep(2 * time.Second)
	if kept, _ := filepath.Glob(filepath.Join(s.stateDir, "egress-grants", "*.json")); len(kept) != 1 {
		t.Fatalf("grants kept for the running job: %v, want one", kept)
	}
	s2 := startServerIn(t, s.stateDir, env...)
	g := s2.waitJob(id, "", 200*time.Second)
	out, _ := s2.readAll(id)
	if str(g, "status") != "completed" || !strings.Contains(out, "bound=ok") || !strings.Contains(out, "free=ok") {
		t.Fatalf("the adopted job: %v\n%s\nstderr:\n%s", g, out, tail(s2.stderr.String(), 4000))
	}
	var got bool
	for _, q := range up.requests() {
		got = got || (q.path == "/after" && q.host == "bound.sbx.test" && q.apiKey == value)
	}
	if !got {
		t.Fatalf("the bound host did not receive the value after the restart: %+v", up.requests())
	}
	// Its grant is forgotten once it ended.
	if files, _ := filepath.Glob(filepath.Join(s.stateDir, "egress-grants", "*.json")); len(files) != 0 {
		t.Errorf("grants kept after their jobs ended: %v", files)
	}
}

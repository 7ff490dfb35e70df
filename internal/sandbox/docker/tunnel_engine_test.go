package docker_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
)

// tunnelSandbox starts a sandbox of image as every job's (uid 1000,
// read-only root, every capability dropped, network mode none), idle, for
// Exec.
func tunnelSandbox(t *testing.T, rt *docker.Runtime, image string) string {
	t.Helper()
	ctx := context.Background()
	h, err := rt.Start(ctx, sandbox.Spec{
		Image: images.Tag(image), Cmd: []string{"sleep", "600"}, WorkDir: "/workspace",
		Limits: sandbox.Limits{MemoryBytes: 512 << 20, NanoCPUs: 1e9, Pids: 128, OpenFiles: 1024,
			FileSizeBytes: 64 << 20, TmpBytes: 64 << 20, WorkdirBytes: 64 << 20, LogBytes: 1 << 20},
	}, newBuffer())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Destroy(context.Background()) })
	info, err := rt.Client().ContainerInspect(ctx, h.ContainerID(), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := info.Container
	if c.HostConfig.NetworkMode != "none" || !c.HostConfig.ReadonlyRootfs || !strings.HasPrefix(c.Config.User, "1000") {
		t.Fatalf("not a hardened network-less sandbox: network %q, read-only %v, user %q",
			c.HostConfig.NetworkMode, c.HostConfig.ReadonlyRootfs, c.Config.User)
	}
	return h.ContainerID()
}

// tunnelResolver answers the test's names (its servers on the host's loopback).
type tunnelResolver map[string]string

func (r tunnelResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// testCA is a CA and a certificate it signed for names.
func testCA(t *testing.T, names ...string) (caPEM []byte, cert tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tunnel test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tunnelServers are an HTTP and an HTTPS server on the host's loopback, and
// a proxy whose grant allows them by name (and *.wild.test, which resolves
// to a private address).
type tunnelServers struct {
	httpPort, tlsPort string
	caPEM             []byte
	big, medium       []byte
	wheel             []byte
	proxy             http.Handler
	mu                sync.Mutex
	events            []egress.Event
}

func newTunnelServers(t *testing.T) *tunnelServers {
	t.Helper()
	s := &tunnelServers{}
	rnd := mrand.NewChaCha8([32]byte{7})
	s.big = make([]byte, 50<<20)
	_, _ = rnd.Read(s.big)
	s.medium = s.big[:4<<20]
	s.wheel = testWheel(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			http.ServeContent(w, r, "big", time.Time{}, bytes.NewReader(s.big))
		case "/medium":
			http.ServeContent(w, r, "medium", time.Time{}, bytes.NewReader(s.medium))
		case "/simple/tunnelpkg/": // a package index of one wheel
			fmt.Fprintf(w, `<html><body><a href="/files/%s#sha256=%s">%[1]s</a></body></html>`, wheelName, sha(s.wheel))
		case "/files/" + wheelName:
			http.ServeContent(w, r, wheelName, time.Time{}, bytes.NewReader(s.wheel))
		default:
			fmt.Fprint(w, "hello")
		}
	}))
	t.Cleanup(srv.Close)
	caPEM, cert := testCA(t, "tls.test")
	tsrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "secret hello")
	}))
	tsrv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	tsrv.StartTLS()
	t.Cleanup(tsrv.Close)
	_, s.httpPort, _ = net.SplitHostPort(srv.Listener.Addr().String())
	_, s.tlsPort, _ = net.SplitHostPort(tsrv.Listener.Addr().String())
	s.caPEM = caPEM
	allow, err := egress.ParseList([]string{"files.test:" + s.httpPort, "tls.test:" + s.tlsPort, "*.wild.test"})
	if err != nil {
		t.Fatal(err)
	}
	p := &egress.Proxy{
		Resolver: tunnelResolver{"files.test": "127.0.0.1", "tls.test": "127.0.0.1", "private.wild.test": "10.1.2.3"},
		Audit: func(e egress.Event) {
			s.mu.Lock()
			s.events = append(s.events, e)
			s.mu.Unlock()
		},
	}
	h, revoke := p.GrantHandler(egress.Grant{Tenant: "t", Job: "tunnel-test", Allow: allow})
	t.Cleanup(revoke)
	s.proxy = h
	return s
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// A network-less python sandbox reaches the test's HTTP and HTTPS (CONNECT,
// the test's own CA given on stdin) servers through the tunnel, downloads
// 50 MB intact, is refused (403) a host not on the list and a name that
// resolves to a private address, and its exit code comes back.
func TestTunnelReachesAllowedServersOnly(t *testing.T) {
	rt, _ := newTestRuntime(t)
	id := tunnelSandbox(t, rt, "python")
	s := newTunnelServers(t)
	script := fmt.Sprintf(`
import sys, ssl, hashlib, urllib.request, urllib.error
ctx = ssl.create_default_context(cadata=sys.stdin.read())
print(urllib.request.urlopen("http://files.test:%[1]s/small").read().decode())
print(urllib.request.urlopen("https://tls.test:%[2]s/", context=ctx).read().decode())
h = hashlib.sha256()
r = urllib.request.urlopen("http://files.test:%[1]s/big")
while True:
    b = r.read(1 << 16)
    if not b:
        break
    h.update(b)
print(h.hexdigest())
for u in ["http://other.test/", "http://private.wild.test/"]:
    try:
        urllib.request.urlopen(u)
        print("reached", u)
    except urllib.error.HTTPError as e:
        print(e.code)
for u in ["https://other.test/", "https://private.wild.test/"]:
    try:
        urllib.request.urlopen(u, context=ctx)
        print("reached", u)
    except Exception as e:
        print("refused" if "403" in str(e) else "other: %%s" %% e)
sys.exit(5)
`, s.httpPort, s.tlsPort)
	var out bytes.Buffer
	code, err := rt.Exec(context.Background(), id, sandbox.ExecOptions{
		Cmd: []string{"python3", "-c", script}, Stdin: bytes.NewReader(s.caPEM), Stdout: &out, Proxy: s.proxy,
	})
	if err != nil || code != 5 {
		t.Fatalf("code %d, %v\n%s", code, err, out.String())
	}
	want := "hello\nsecret hello\n" + sha(s.big) + "\n403\n403\nrefused\nrefused\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var allowed, refused int
	for _, e := range s.events {
		if e.Allowed {
			allowed++
		} else {
			refused++
		}
	}
	if allowed != 3 || refused != 4 {
		t.Fatalf("audit: %d allowed, %d refused: %+v", allowed, refused, s.events)
	}
}

// One connection that never reads a 50 MB answer stalls no other: four
// concurrent downloads in a network-less base sandbox (bash's /dev/tcp)
// arrive intact while it hangs, and the tunnel ends with the command.
func TestTunnelStalledConnectionStallsNoOther(t *testing.T) {
	rt, _ := newTestRuntime(t)
	id := tunnelSandbox(t, rt, "base")
	s := newTunnelServers(t)
	script := fmt.Sprintf(`
port=${HTTP_PROXY##*:}
req() { printf 'GET http://files.test:%[1]s/%%s HTTP/1.1\r\nHost: files.test:%[1]s\r\nConnection: close\r\n\r\n' "$1"; }
exec 3<>/dev/tcp/127.0.0.1/$port
req big >&3
for i in 1 2 3 4; do
  ( exec 4<>/dev/tcp/127.0.0.1/$port; req medium >&4; cat <&4 | tail -c %[2]d | sha256sum | cut -d' ' -f1 ) &
done
wait
`, s.httpPort, len(s.medium))
	var out bytes.Buffer
	code, err := rt.Exec(context.Background(), id, sandbox.ExecOptions{Cmd: []string{"bash", "-c", script}, Stdout: &out, Proxy: s.proxy})
	if err != nil || code != 0 {
		t.Fatalf("code %d, %v\n%s", code, err, out.String())
	}
	if want := strings.Repeat(sha(s.medium)+"\n", 4); out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

// npm installs a package from the npm registry in a network-less
// javascript sandbox, through the tunnel and the install grant of a policy
// without a list (any public host).
func TestTunnelNpmInstall(t *testing.T) {
	if _, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", "registry.npmjs.org"); err != nil {
		t.Skipf("the npm registry does not resolve here: %v", err)
	}
	rt, _ := newTestRuntime(t)
	id := tunnelSandbox(t, rt, "javascript")
	var mu sync.Mutex
	var events []egress.Event
	p := &egress.Proxy{Audit: func(e egress.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}
	h, revoke := p.GrantHandler(egress.Grant{Tenant: "t", Job: "install", Allow: egress.InstallAllow("bridge", nil)})
	defer revoke()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A machine whose traffic to registries passes a TLS-inspecting proxy
	// trusts its CA (as workspaces.install_ca_file gives it to installs).
	var ca []byte
	crts, _ := filepath.Glob("/usr/local/share/ca-certificates/*.crt")
	for _, c := range crts {
		b, _ := os.ReadFile(c)
		ca = append(ca, b...)
	}
	code, err := rt.Exec(ctx, id, sandbox.ExecOptions{Stdin: bytes.NewReader(ca), Cmd: []string{"sh", "-c",
		`cat > /tmp/ca.pem; [ -s /tmp/ca.pem ] && export npm_config_cafile=/tmp/ca.pem; cd /workspace && HOME=/tmp npm_config_cache=/tmp/npm npm install --loglevel http --no-audit --no-fund --no-update-notifier is-number@7.0.0 >&2 && node -e 'console.log(require("is-number")(5))'`},
		Stdout: &out, Proxy: h})
	mu.Lock()
	defer mu.Unlock()
	if err != nil || code != 0 || !strings.HasSuffix(out.String(), "true\n") {
		t.Fatalf("code %d, %v\n%s\naudit: %+v", code, err, out.String(), events)
	}
	if len(events) == 0 || !events[0].Allowed || events[0].Host != "registry.npmjs.org" {
		t.Fatalf("audit: %+v", events)
	}
}

// THREATS 91: a sandbox that floods the tunnel with connections gets at
// most tunnel.MaxChannels open at once (the rest wait in the listen
// backlog), and every one is still served.
func TestTunnelFloodIsBounded(t *testing.T) {
	rt, _ := newTestRuntime(t)
	id := tunnelSandbox(t, rt, "base")
	s := newTunnelServers(t)
	script := fmt.Sprintf(`
port=${HTTP_PROXY##*:}
fds=()
for i in $(seq 150); do
  exec {fd}<>/dev/tcp/127.0.0.1/$port
  fds+=($fd)
  printf 'GET http://files.test:%[1]s/small HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&$fd
done
for fd in "${fds[@]}"; do tail -c 5 <&$fd; echo; exec {fd}<&-; done
`, s.httpPort)
	var out bytes.Buffer
	code, err := rt.Exec(context.Background(), id, sandbox.ExecOptions{Cmd: []string{"bash", "-c", script}, Stdout: &out, Proxy: s.proxy})
	if err != nil || code != 0 || out.String() != strings.Repeat("hello\n", 150) {
		t.Fatalf("code %d, %v\n%q", code, err, out.String())
	}
}

// THREATS 93: the tunnel's stdout is the server's to parse, and a process
// of the sandbox (same uid) can write to it through /proc: garbage there
// ends the exec with a protocol error, the server reads no further.
func TestTunnelGarbageFromTheSandboxEndsIt(t *testing.T) {
	rt, _ := newTestRuntime(t)
	id := tunnelSandbox(t, rt, "base")
	s := newTunnelServers(t)
	var out bytes.Buffer
	_, err := rt.Exec(context.Background(), id, sandbox.ExecOptions{Cmd: []string{"bash", "-c",
		`printf 'D\0\0\0\1\377\377\377\377garbage' > /proc/$PPID/fd/1; sleep 600`}, Stdout: &out, Proxy: s.proxy})
	if err == nil || !strings.Contains(err.Error(), "tunnel protocol violation") {
		t.Fatalf("err %v\n%s", err, out.String())
	}
}

const wheelName = "tunnelpkg-1.0-py3-none-any.whl"

// testWheel is a pure-python wheel: tunnelpkg, whose VALUE is 42.
func testWheel(t *testing.T) []byte {
	t.Helper()
	files := [][2]string{
		{"tunnelpkg/__init__.py", "VALUE = 42\n"},
		{"tunnelpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tunnelpkg\nVersion: 1.0\n"},
		{"tunnelpkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: sandboxer-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, f[1])
		h := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(h[:]), len(f[1]))
	}
	record.WriteString("tunnelpkg-1.0.dist-info/RECORD,,\n")
	w, err := zw.Create("tunnelpkg-1.0.dist-info/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(w, record.String())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pip installs from a package index the test serves, in a network-less
// python sandbox, through the tunnel.
func TestTunnelPipInstall(t *testing.T) {
	rt, _ := newTestRuntime(t)
	id := tunnelSandbox(t, rt, "python")
	s := newTunnelServers(t)
	var out bytes.Buffer
	code, err := rt.Exec(context.Background(), id, sandbox.ExecOptions{Cmd: []string{"sh", "-c", fmt.Sprintf(
		`HOME=/tmp python3 -m pip install --no-cache-dir --disable-pip-version-check --break-system-packages --target /workspace/lib `+
			`--index-url http://files.test:%s/simple/ --trusted-host files.test tunnelpkg >&2 && PYTHONPATH=/workspace/lib python3 -c 'import tunnelpkg; print(tunnelpkg.VALUE)'`,
		s.httpPort)}, Stdout: &out, Proxy: s.proxy})
	if err != nil || code != 0 || !strings.HasSuffix(out.String(), "\n42\n") {
		t.Fatalf("code %d, %v\n%s", code, err, out.String())
	}
}

package docker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// env is a fake environment for resolveEndpoint.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// writeContext makes a Docker CLI context in dir as `docker context create` does.
func writeContext(t *testing.T, dir, name, host string, skipVerify bool, tlsFiles bool) {
	t.Helper()
	meta := map[string]any{
		"Name":      name,
		"Metadata":  map[string]any{"Description": "test"},
		"Endpoints": map[string]any{"docker": map[string]any{"Host": host, "SkipTLSVerify": skipVerify}},
	}
	data, _ := json.Marshal(meta)
	md := filepath.Join(dir, "contexts", "meta", contextID(name))
	if err := os.MkdirAll(md, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(md, "meta.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if tlsFiles {
		writeCA(t, filepath.Join(dir, "contexts", "tls", contextID(name), "docker"))
	}
}

// writeCA writes a self-signed ca.pem into dir.
func writeCA(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestEndpointResolution(t *testing.T) {
	cfg := t.TempDir()
	writeContext(t, cfg, "remote-tls", "tcp://10.0.0.5:2376", false, true)
	writeContext(t, cfg, "remote-ssh", "ssh://ops@build-host:2222", false, false)
	writeContext(t, cfg, "plain", "tcp://10.0.0.6:2375", false, false)
	writeContext(t, cfg, "skipverify", "tcp://10.0.0.7:2376", true, true)
	writeContext(t, cfg, "local", "unix:///run/other.sock", false, false)
	certs := t.TempDir()
	writeCA(t, certs)
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"auths":{},"currentContext":"remote-ssh"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	noCurrent := t.TempDir()

	cases := []struct {
		name      string
		env       map[string]string
		host      string
		context   string
		transport string
		remote    bool
		refused   string // part of the error, when refused
	}{
		{name: "default socket", env: map[string]string{"DOCKER_CONFIG": noCurrent}, host: "unix:///var/run/docker.sock", transport: "unix"},
		{name: "DOCKER_HOST unix", env: map[string]string{"DOCKER_CONFIG": cfg, "DOCKER_HOST": "unix:///tmp/d.sock"}, host: "unix:///tmp/d.sock", transport: "unix"},
		{name: "DOCKER_HOST wins over contexts", env: map[string]string{"DOCKER_CONFIG": cfg, "DOCKER_CONTEXT": "remote-tls", "DOCKER_HOST": "unix:///tmp/d.sock"}, host: "unix:///tmp/d.sock", transport: "unix"},
		{name: "current context from config.json", env: map[string]string{"DOCKER_CONFIG": cfg}, host: "ssh://ops@build-host:2222", context: "remote-ssh", transport: "ssh", remote: true},
		{name: "DOCKER_CONTEXT wins over config.json", env: map[string]string{"DOCKER_CONFIG": cfg, "DOCKER_CONTEXT": "remote-tls"}, host: "tcp://10.0.0.5:2376", context: "remote-tls", transport: "tcp+tls", remote: true},
		{name: "DOCKER_CONTEXT=default is the environment", env: map[string]string{"DOCKER_CONFIG": cfg, "DOCKER_CONTEXT": "default"}, host: "unix:///var/run/docker.sock", transport: "unix"},
		{name: "context on a unix socket", env: map[string]string{"DOCKER_CONFIG": cfg, "DOCKER_CONTEXT": "local"}, host: "unix:///run/other.sock", context: "local", transport: "unix"},
		{name: "unknown context", env: map[string]string{"DOCKER_CONFIG": cfg, "DOCKER_CONTEXT": "nope"}, refused: `docker context "nope" does not exist`},
		{name: "tcp with verified TLS", env: map[string]string{"DOCKER_CONFIG": noCurrent, "DOCKER_HOST": "tcp://127.0.0.1:2376", "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": certs}, host: "tcp://127.0.0.1:2376", transport: "tcp+tls", remote: true},
		{name: "tcp without TLS refused", env: map[string]string{"DOCKER_CONFIG": noCurrent, "DOCKER_HOST": "tcp://127.0.0.1:2375"}, refused: "over TCP without TLS"},
		{name: "tcp with TLS but no verification refused", env: map[string]string{"DOCKER_CONFIG": noCurrent, "DOCKER_HOST": "tcp://127.0.0.1:2376", "DOCKER_CERT_PATH": certs}, refused: "does not verify the engine's certificate"},
		{name: "tcp without TLS accepted when the operator says so", env: map[string]string{"DOCKER_CONFIG": noCurrent, "DOCKER_HOST": "tcp://127.0.0.1:2375", EnvEngineInsecure: "1"}, host: "tcp://127.0.0.1:2375", transport: "tcp", remote: true},
		{name: "context without TLS refused", env: map[string]string{"DOCKER_CONFIG": cfg, "DOCKER_CONTEXT": "plain"}, refused: "docker context plain is reached over TCP without TLS"},
		{name: "context with skip-verify refused", env: map[string]string{"DOCKER_CONFIG": cfg, "DOCKER_CONTEXT": "skipverify"}, refused: "does not verify"},
		{name: "verify without certificates", env: map[string]string{"DOCKER_CONFIG": noCurrent, "DOCKER_HOST": "tcp://127.0.0.1:2376", "DOCKER_TLS_VERIFY": "1"}, refused: "has none of ca.pem"},
		{name: "unsupported scheme", env: map[string]string{"DOCKER_CONFIG": noCurrent, "DOCKER_HOST": "fd://3"}, refused: `scheme "fd" is not supported`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep, opts, err := resolveEndpoint(env(c.env))
			if c.refused != "" {
				if err == nil || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("want an error containing %q, got %v (endpoint %+v)", c.refused, err, ep)
				}
				if strings.Contains(err.Error(), "BEGIN") {
					t.Fatalf("the error quotes certificate material: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ep.Host != c.host || ep.Context != c.context || ep.Transport != c.transport || ep.Remote != c.remote {
				t.Fatalf("got %+v, want host %s context %q transport %s remote %v", ep, c.host, c.context, c.transport, c.remote)
			}
			if len(opts) == 0 {
				t.Fatal("no client options")
			}
		})
	}
}

// The refusal names the switch that accepts the risk, and the variables that avoid it.
func TestEndpointRefusalSaysWhatToDo(t *testing.T) {
	_, _, err := resolveEndpoint(env(map[string]string{"DOCKER_HOST": "tcp://10.1.2.3:2375", "DOCKER_CONFIG": t.TempDir()}))
	if err == nil {
		t.Fatal("a TCP engine without TLS was accepted")
	}
	for _, want := range []string{"DOCKER_TLS_VERIFY=1", "DOCKER_CERT_PATH", EnvEngineInsecure + "=1", "tcp://10.1.2.3:2375"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not mention %s", err, want)
		}
	}
}

func TestSSHArgs(t *testing.T) {
	cases := []struct {
		url, config string
		want        string
		err         string
	}{
		{url: "ssh://build-host", want: "-o BatchMode=yes -o ConnectTimeout=30 -T -- build-host docker system dial-stdio"},
		{url: "ssh://ops@10.0.0.5:2222", config: "/etc/sandboxer/ssh_config",
			want: "-o BatchMode=yes -o ConnectTimeout=30 -T -F /etc/sandboxer/ssh_config -l ops -p 2222 -- 10.0.0.5 docker system dial-stdio"},
		{url: "ssh://ops@h/run/user/1000/podman/podman.sock",
			want: "-o BatchMode=yes -o ConnectTimeout=30 -T -l ops -- h docker --host unix:///run/user/1000/podman/podman.sock system dial-stdio"},
		{url: "ssh://ops:secret@h", err: "password"},
		{url: "ssh://h?x=1", err: "no query"},
	}
	for _, c := range cases {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		args, err := sshArgs(u, c.config)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: want error with %q, got %v", c.url, c.err, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if got := strings.Join(args, " "); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.url, got, c.want)
		}
	}
}

func TestLimitsUnenforced(t *testing.T) {
	for _, c := range []struct {
		cgroup   string
		opts     []string
		podman   bool
		refusing bool
	}{
		{"1", []string{"name=seccomp,profile=default"}, false, false},
		{"1", []string{"name=seccomp,profile=default"}, true, true},    // Podman says Rootless: true
		{"1", []string{"name=seccomp", "name=rootless"}, false, true},  // rootless Docker
		{"2", []string{"name=seccomp", "name=rootless"}, false, false}, // cgroup v2 delegates controllers
		{"2", []string{"name=seccomp,profile=default"}, true, false},
	} {
		got := limitsUnenforced(c.cgroup, c.opts, c.podman)
		if (got != "") != c.refusing {
			t.Errorf("cgroup v%s %v podman-rootless=%v: %q, want refusing=%v", c.cgroup, c.opts, c.podman, got, c.refusing)
		}
	}
}

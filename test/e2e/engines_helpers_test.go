package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Helpers for the remote engine tests: certificates made by the test, and a
// TLS-terminating forwarder from loopback to the local engine's socket.

// testPKI is a CA with a server certificate for 127.0.0.1 and a client certificate.
type testPKI struct {
	ClientDir string // ca.pem, cert.pem, key.pem: what DOCKER_CERT_PATH names
	Server    tls.Certificate
	CAs       *x509.CertPool
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// makePKI makes a CA, a server certificate (IP 127.0.0.1) and a client
// certificate, writing the client's side into a directory of its own.
func makePKI(t *testing.T) testPKI {
	t.Helper()
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandboxer e2e CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		k := newKey(t)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	srvDER, srvKey := issue(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	cliDER, cliKey := issue(3, "sandboxer", x509.ExtKeyUsageClientAuth, nil)

	dir := t.TempDir()
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER)
	writePEM(t, filepath.Join(dir, "cert.pem"), "CERTIFICATE", cliDER)
	kb, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "key.pem"), "EC PRIVATE KEY", kb)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return testPKI{ClientDir: dir, Server: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}, CAs: pool}
}

// localEngineSocket is the unix socket of the engine the tests use.
func localEngineSocket(t *testing.T) string {
	t.Helper()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		return "/var/run/docker.sock"
	}
	if p, ok := strings.CutPrefix(host, "unix://"); ok {
		return p
	}
	t.Skipf("DOCKER_HOST=%s is not a local socket: the remote engine tests forward to one", host)
	return ""
}

// tlsForwarder listens on 127.0.0.1 with TLS that requires a client
// certificate from pki's CA, and pipes each connection's bytes both ways to
// the local engine's socket (hijacked attach streams included: half-closes
// are passed on).
type tlsForwarder struct {
	Addr     string
	accepted atomic.Int64 // TCP connections accepted
	verified atomic.Int64 // of them, those whose handshake passed
}

func startTLSForwarder(t *testing.T, pki testPKI) *tlsForwarder {
	t.Helper()
	sock := localEngineSocket(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsForwarder{Addr: ln.Addr().String()}
	cfg := &tls.Config{Certificates: []tls.Certificate{pki.Server}, ClientCAs: pki.CAs,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := tls.Server(raw, cfg)
				track(c, true)
				defer track(c, false)
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				if err := c.Handshake(); err != nil {
					return
				}
				_ = c.SetDeadline(time.Time{})
				f.verified.Add(1)
				up, err := net.Dial("unix", sock)
				if err != nil {
					return
				}
				track(up, true)
				defer track(up, false)
				defer up.Close()
				pipeBoth(c, up.(*net.UnixConn))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return f
}

// pipeBoth copies both ways, passing each direction's end on as a half-close.
func pipeBoth(a *tls.Conn, b *net.UnixConn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, a); _ = b.CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(a, b); _ = a.CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// tlsEngineEnv is the server's environment for the engine behind f.
func tlsEngineEnv(f *tlsForwarder, pki testPKI) []string {
	return []string{"DOCKER_HOST=tcp://" + f.Addr, "DOCKER_TLS_VERIFY=1", "DOCKER_CERT_PATH=" + pki.ClientDir}
}

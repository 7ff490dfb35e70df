// Package remoteengine makes the local engine reachable as a remote one, for
// the e2e tests and the bench: over TCP with TLS (a CA and certificates made
// here, a TLS-terminating forwarder to the local socket) and over ssh:// (an
// sshd of its own on loopback, with keys made here).
package remoteengine

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
	"time"
)

// LocalSocket is the unix socket of the engine DOCKER_HOST names (or the
// default one); "" when DOCKER_HOST is not a local socket.
func LocalSocket() string {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		return "/var/run/docker.sock"
	}
	if p, ok := strings.CutPrefix(host, "unix://"); ok {
		return p
	}
	return ""
}

// PKI is a CA with a server certificate for 127.0.0.1 and a client certificate.
type PKI struct {
	ClientDir string // ca.pem, cert.pem, key.pem: what DOCKER_CERT_PATH names
	Server    tls.Certificate
	CAs       *x509.CertPool
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// MakePKI makes a CA, a server certificate (IP 127.0.0.1) and a client
// certificate, writing the client's side into dir.
func MakePKI(dir string) (PKI, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PKI{}, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandboxer test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return PKI{}, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return PKI{}, err
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey, error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		return der, k, err
	}
	srvDER, srvKey, err := issue(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return PKI{}, err
	}
	cliDER, cliKey, err := issue(3, "sandboxer", x509.ExtKeyUsageClientAuth, nil)
	if err != nil {
		return PKI{}, err
	}
	kb, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		return PKI{}, err
	}
	for _, f := range []struct {
		name, typ string
		der       []byte
	}{
		{"ca.pem", "CERTIFICATE", caDER}, {"cert.pem", "CERTIFICATE", cliDER}, {"key.pem", "EC PRIVATE KEY", kb},
	} {
		if err := writePEM(filepath.Join(dir, f.name), f.typ, f.der); err != nil {
			return PKI{}, err
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return PKI{ClientDir: dir, Server: tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}, CAs: pool}, nil
}

// TLSForwarder listens on 127.0.0.1 with TLS that requires a client
// certificate from its PKI's CA, and pipes each connection's bytes both ways
// to a local engine socket (hijacked attach streams included: half-closes
// are passed on).
type TLSForwarder struct {
	Addr     string
	PKI      PKI
	accepted atomic.Int64 // TCP connections accepted
	verified atomic.Int64 // of them, those whose handshake passed

	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	open map[net.Conn]bool
}

// Accepted counts TCP connections; Verified those whose TLS handshake passed.
func (f *TLSForwarder) Accepted() int64 { return f.accepted.Load() }
func (f *TLSForwarder) Verified() int64 { return f.verified.Load() }

// Env is a client's environment for the engine behind f.
func (f *TLSForwarder) Env() []string {
	return []string{"DOCKER_HOST=tcp://" + f.Addr, "DOCKER_TLS_VERIFY=1", "DOCKER_CERT_PATH=" + f.PKI.ClientDir}
}

// StartTLS forwards a loopback TLS endpoint to sock.
func StartTLS(pki PKI, sock string) (*TLSForwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &TLSForwarder{Addr: ln.Addr().String(), PKI: pki, ln: ln, open: map[net.Conn]bool{}}
	cfg := &tls.Config{Certificates: []tls.Certificate{pki.Server}, ClientCAs: pki.CAs,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			raw, err := ln.Accept()
			if err != nil {
				return
			}
			f.accepted.Add(1)
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				c := tls.Server(raw, cfg)
				f.track(c, true)
				defer f.track(c, false)
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
				f.track(up, true)
				defer f.track(up, false)
				defer up.Close()
				pipeBoth(c, up.(*net.UnixConn))
			}()
		}
	}()
	return f, nil
}

func (f *TLSForwarder) track(c net.Conn, add bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if add {
		f.open[c] = true
	} else {
		delete(f.open, c)
	}
}

// Close stops listening, cuts every connection and waits for its goroutines.
func (f *TLSForwarder) Close() {
	f.ln.Close()
	f.mu.Lock()
	for c := range f.open {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// pipeBoth copies both ways, passing each direction's end on as a half-close.
func pipeBoth(a *tls.Conn, b *net.UnixConn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, a); _ = b.CloseWrite(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(a, b); _ = a.CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

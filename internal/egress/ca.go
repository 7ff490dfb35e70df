package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CA is the certificate authority the proxy signs its certificates for
// secrets' hosts with: made once and kept under the state directory (its
// key mode 0600, never handed to a sandbox), so jobs adopted after a
// restart still trust the proxy. A sandbox given a secret trusts it.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // host -> certificate, until near its end
}

// CA files under the directory LoadCA is given.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"
)

// leafLife is how long a host's certificate is valid; it is made anew
// when less than a day is left.
const leafLife = 7 * 24 * time.Hour

// LoadCA reads the CA kept in dir, or makes one there.
func LoadCA(dir string) (*CA, error) {
	certPEM, errC := os.ReadFile(filepath.Join(dir, caCertFile))
	keyPEM, errK := os.ReadFile(filepath.Join(dir, caKeyFile))
	if errors.Is(errC, os.ErrNotExist) && errors.Is(errK, os.ErrNotExist) {
		return newCA(dir)
	}
	if errC != nil || errK != nil {
		return nil, fmt.Errorf("egress CA in %s: %v", dir, errors.Join(errC, errK))
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("egress CA in %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("egress CA in %s: the key is not ECDSA", dir)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("egress CA in %s: %w", dir, err)
	}
	return &CA{cert: cert, key: key, certPEM: certPEM, leaves: map[string]*tls.Certificate{}}, nil
}

// issue makes a fresh key and a certificate of tmpl for it, signed by
// parent's key (nil parent: by itself).
func issue(tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func newCA(dir string) (*CA, error) {
	cert, key, err := issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "sandboxer egress proxy CA", Organization: []string{"sandboxer"}},
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs hosts' certificates, never another CA
	}, nil, nil)
	if err != nil {
		return nil, err
	}
	der := cert.Raw
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	// The key first: a directory with a certificate and no key is not a CA.
	if err := writeNew(filepath.Join(dir, caKeyFile), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	if err := writeNew(filepath.Join(dir, caCertFile), certPEM, 0o644); err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, certPEM: certPEM, leaves: map[string]*tls.Certificate{}}, nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// CertPEM is the CA's certificate, what a sandbox is given to trust.
func (c *CA) CertPEM() []byte { return c.certPEM }

// ServeAs answers a TLS handshake with the certificate of the name the
// client asked for (SNI), signed by the CA: for a test's or the bench's
// upstream standing in for a real host.
func (c *CA) ServeAs(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.certFor(h.ServerName)
}

// certFor is host's certificate, signed by the CA (made on first use).
func (c *CA) certFor(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if leaf, ok := c.leaves[host]; ok && time.Until(leaf.Leaf.NotAfter) > 24*time.Hour {
		return leaf, nil
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: host},
		NotAfter:    time.Now().Add(leafLife),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	leaf, key, err := issue(tmpl, c.cert, c.key)
	if err != nil {
		return nil, err
	}
	cert := &tls.Certificate{Certificate: [][]byte{leaf.Raw, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	c.leaves[host] = cert
	return cert, nil
}

package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// swapSetup is a proxy with a CA, two TLS upstreams (bound.test, which a
// secret is bound to, and free.test, which it is not, both allowed), and
// an HTTP client of a grant that trusts the upstreams and the proxy's CA,
// as a sandbox with the bundle does.
type swapSetup struct {
	proxy       *Proxy
	mu          *sync.Mutex
	events      *[]Event
	seen        chan http.Header // what an upstream received
	client      *http.Client
	boundURL    string
	freeURL     string
	placeholder string
	redacted    map[string]string
}

func newSwapSetup(t *testing.T, value func() ([]byte, error)) *swapSetup {
	t.Helper()
	s := &swapSetup{seen: make(chan http.Header, 16), placeholder: "sbx_placeholder_0123456789abcdef", redacted: map[string]string{}}
	// The upstreams' own CA, which the proxy trusts as a host's store would.
	upCA, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.seen <- r.Header.Clone()
		io.WriteString(w, "echo:"+r.Header.Get("X-Api-Key"))
	}))
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.certFor(h.ServerName) }}
	up.StartTLS()
	t.Cleanup(up.Close)
	port := up.Listener.Addr().(*net.TCPAddr).Port
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(upCA.CertPEM())
	ca, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []Event
	s.events, s.mu = &events, &mu
	s.proxy = &Proxy{Resolver: names{"bound.test": "127.0.0.1", "free.test": "127.0.0.1"}, CA: ca, RootCAs: roots,
		Audit: func(e Event) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	allow, _ := ParseList([]string{fmt.Sprintf("bound.test:%d", port), fmt.Sprintf("free.test:%d", port)})
	hosts, _ := ParseList([]string{fmt.Sprintf("bound.test:%d", port)})
	token, _ := s.proxy.Add(Grant{Tenant: "alice", Job: "j1", Allow: allow,
		Secrets: []SecretGrant{{Name: "API_KEY", Placeholder: s.placeholder, Hosts: hosts, Value: value}},
		OnValue: func(v []byte, ph string) { mu.Lock(); s.redacted[string(v)] = ph; mu.Unlock() }})
	srv := httptest.NewServer(s.proxy)
	t.Cleanup(srv.Close)
	trust := x509.NewCertPool()
	trust.AppendCertsFromPEM(upCA.CertPEM())
	trust.AppendCertsFromPEM(ca.CertPEM())
	proxyURL, _ := url.Parse(ProxyURL(token, strings.TrimPrefix(srv.URL, "http://")))
	s.client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: trust}}}
	s.boundURL = fmt.Sprintf("https://bound.test:%d/", port)
	s.freeURL = fmt.Sprintf("https://free.test:%d/", port)
	return s
}

// received is what the upstream received next.
func (s *swapSetup) received(t *testing.T) http.Header {
	t.Helper()
	select {
	case h := <-s.seen:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream received no request")
		return nil
	}
}

func (s *swapSetup) get(t *testing.T, u string, h http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header = h
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProxySwapsSecretsForTheirHostsOnly(t *testing.T) {
	reads := 0
	s := newSwapSetup(t, func() ([]byte, error) { reads++; return []byte("real-value-42"), nil })

	// The bound host gets the value, in a header and in Basic credentials,
	// on two requests over one connection.
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-token:"+s.placeholder))
	for range 2 {
		code, body := s.get(t, s.boundURL, http.Header{"X-Api-Key": {"key " + s.placeholder}, "Authorization": {basic}})
		got := s.received(t)
		if code != 200 || got.Get("X-Api-Key") != "key real-value-42" || body != "echo:key real-value-42" {
			t.Fatalf("bound host: %d %q, header %q", code, body, got.Get("X-Api-Key"))
		}
		if want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-token:real-value-42")); got.Get("Authorization") != want {
			t.Fatalf("Basic credentials: %q", got.Get("Authorization"))
		}
	}
	if reads != 2 {
		t.Errorf("the value was read %d times for 2 requests, want once per request (rotation needs no restart)", reads)
	}
	if s.redacted["real-value-42"] != s.placeholder {
		t.Errorf("OnValue did not learn the value: %v", s.redacted)
	}

	// Another allowed host gets the placeholder, untouched (tunnelled: its
	// own certificate, not the proxy's).
	code, _ := s.get(t, s.freeURL, http.Header{"X-Api-Key": {s.placeholder}})
	if got := s.received(t); code != 200 || got.Get("X-Api-Key") != s.placeholder {
		t.Fatalf("free host: %d, header %q", code, got.Get("X-Api-Key"))
	}

	// Plain http:// to the bound host: refused, nothing sent.
	code, body := s.get(t, strings.Replace(s.boundURL, "https", "http", 1), http.Header{"X-Api-Key": {s.placeholder}})
	if code != http.StatusForbidden || !strings.Contains(body, "plain http:// to bound.test, a host secret API_KEY is bound to, is refused") {
		t.Fatalf("plain http: %d %q", code, body)
	}
	select {
	case h := <-s.seen:
		t.Fatalf("plain http reached the upstream: %v", h)
	default:
	}

	// The audit names the secret per use, never the value.
	var uses int
	for _, e := range *s.events {
		if strings.Contains(fmt.Sprintf("%+v", e), "real-value-42") {
			t.Fatalf("the value reached the audit: %+v", e)
		}
		if len(e.Secrets) == 1 && e.Secrets[0] == "API_KEY" && e.Host == "bound.test" && e.Tenant == "alice" && e.Job == "j1" {
			uses++
		}
	}
	if uses != 2 {
		t.Errorf("audit: %d uses of API_KEY, want 2: %+v", uses, *s.events)
	}
}

func TestProxySwapRefusesWhatItCannotRead(t *testing.T) {
	s := newSwapSetup(t, func() ([]byte, error) { return nil, errors.New("value_file /x has mode 0644") })
	code, body := s.get(t, s.boundURL, http.Header{"X-Api-Key": {s.placeholder}})
	if code != http.StatusBadGateway || !strings.Contains(body, "secret API_KEY cannot be read: value_file /x has mode 0644") {
		t.Fatalf("unreadable secret: %d %q", code, body)
	}
	select {
	case h := <-s.seen:
		t.Fatalf("a request with an unreadable secret reached the upstream: %v", h)
	default:
	}
	// A request without the placeholder needs no value and goes through.
	if code, _ := s.get(t, s.boundURL, http.Header{"X-Other": {"1"}}); code != 200 {
		t.Fatalf("request without a placeholder: %d", code)
	}
	s.received(t)
}

func TestCAKeptAndReloaded(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadCA(dir)
	if err != nil || string(a.CertPEM()) != string(b.CertPEM()) {
		t.Fatalf("reloaded CA differs: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, caKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	leaf, err := b.certFor("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.com", Roots: pool}); err != nil {
		t.Fatalf("a leaf of the reloaded CA does not verify: %v", err)
	}
}

// rawRequest sends one raw HTTP/1.1 request through the proxy's CONNECT to
// the bound host, inside the TLS the proxy ends, and returns the status line.
func (s *swapSetup) rawRequest(t *testing.T, request string) string {
	t.Helper()
	proxyURL, _ := s.client.Transport.(*http.Transport).Proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: "bound.test"}})
	conn, err := net.Dial("tcp", proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	bound := strings.TrimSuffix(strings.TrimPrefix(s.boundURL, "https://"), "/")
	auth := base64.StdEncoding.EncodeToString([]byte(proxyURL.User.String()))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", bound, bound, auth)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	tc := tls.Client(&bufferedConn{Conn: conn, r: br}, &tls.Config{ServerName: "bound.test", RootCAs: s.client.Transport.(*http.Transport).TLSClientConfig.RootCAs})
	if _, err := io.WriteString(tc, strings.ReplaceAll(request, "PH", s.placeholder)); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(tc).ReadString('\n')
	return strings.TrimSpace(line)
}

// Domain fronting: inside the bound host's TLS, a request naming another
// host (Host header, absolute target) is refused and audited, and nothing
// reaches the upstream; the bound host's own name, in any case or with a
// final dot, goes through.
func TestProxySwapRefusesFronting(t *testing.T) {
	s := newSwapSetup(t, func() ([]byte, error) { return []byte("real-value-42"), nil })
	port := strings.TrimSuffix(strings.Split(s.boundURL, ":")[2], "/")
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: evil.example\r\nX-Api-Key: PH\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: evil.example:" + port + "\r\nX-Api-Key: PH\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: free.test:" + port + "\r\nX-Api-Key: PH\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: bound.test:1\r\nX-Api-Key: PH\r\n\r\n",
		"GET https://other.example:" + port + "/abs HTTP/1.1\r\nHost: bound.test:" + port + "\r\nX-Api-Key: PH\r\n\r\n",
		"GET http://bound.test:" + port + "/abs HTTP/1.1\r\nHost: bound.test:" + port + "\r\nX-Api-Key: PH\r\n\r\n",
		"GET / HTTP/1.0\r\nX-Api-Key: PH\r\n\r\n",
	} {
		if got := s.rawRequest(t, req); !strings.Contains(got, "421") {
			t.Errorf("%q: %s, want 421 Misdirected Request", req, got)
		}
		select {
		case h := <-s.seen:
			t.Fatalf("%q reached the upstream with %v", req, h)
		default:
		}
	}
	var refused int
	s.mu.Lock()
	events := append([]Event(nil), *s.events...)
	s.mu.Unlock()
	for _, e := range events {
		if !e.Allowed && strings.HasPrefix(e.Reason, "fronting refused: ") && len(e.Secrets) == 1 && e.Secrets[0] == "API_KEY" {
			refused++
		}
	}
	if refused != 7 {
		t.Errorf("audit: %d refusals of fronting, want 7: %+v", refused, *s.events)
	}
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: BOUND.test.:" + port + "\r\nX-Api-Key: PH\r\nConnection: close\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: bound.test\r\nX-Api-Key: PH\r\nConnection: close\r\n\r\n",
		"GET https://bound.test:" + port + "/abs HTTP/1.1\r\nHost: bound.test:" + port + "\r\nX-Api-Key: PH\r\nConnection: close\r\n\r\n",
	} {
		if got := s.rawRequest(t, req); !strings.Contains(got, "200") {
			t.Errorf("%q: %s, want 200", req, got)
		}
		if h := s.received(t); h.Get("X-Api-Key") != "real-value-42" {
			t.Errorf("%q: the bound host got %q", req, h.Get("X-Api-Key"))
		}
	}
}

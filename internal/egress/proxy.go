package egress

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Grant is who may use the proxy, for what.
type Grant struct {
	Tenant, Job string
	Allow       List
	// Secrets are swapped in for their placeholders on requests to their
	// hosts (see Proxy.swap); every one's hosts lie within Allow.
	Secrets []SecretGrant
	// OnValue, when set, learns each secret value the proxy put into a
	// request, with its placeholder (the job's output is redacted with it).
	OnValue func(value []byte, placeholder string)
}

// Event is one decision of the proxy, for the audit log.
type Event struct {
	Tenant, Job string
	Host        string
	Port        int
	Addr        string // the address dialled ("" when refused before)
	Allowed     bool
	Reason      string    // why it was refused
	BytesUp     int64     // job -> host
	BytesDown   int64     // host -> job
	Secrets     []string  // names of the secrets put into the request (never their values)
	Start       time.Time // when the request came
}

// Resolver resolves names (net.DefaultResolver in production).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Proxy is an HTTP proxy (CONNECT, and plain http:// requests) for grants.
type Proxy struct {
	Resolver    Resolver
	DialTimeout time.Duration // default 10 s
	Audit       func(Event)   // called once per request, after it ends
	// CA signs the certificates the proxy shows a job for the hosts its
	// secrets are bound to; nil: no grant may carry secrets.
	CA *CA
	// RootCAs verifies those hosts; nil = the host's trust store.
	RootCAs *x509.CertPool

	mu        sync.Mutex
	grants    map[string]Grant           // token -> grant
	upstreams map[string]*http.Transport // host|addr -> TLS to a secret's host
}

// proxyUser is the user name of a grant's proxy credentials (its token is
// the password): HTTP_PROXY=http://sbx:<token>@host:port.
const proxyUser = "sbx"

// Add registers a grant and returns its token; revoke ends it (open
// tunnels run on until either side closes).
func (p *Proxy) Add(g Grant) (token string, revoke func()) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	token = hex.EncodeToString(b)
	return token, p.addToken(token, g)
}

// addToken registers g under token (a kept grant's, after a restart).
func (p *Proxy) addToken(token string, g Grant) (revoke func()) {
	p.mu.Lock()
	if p.grants == nil {
		p.grants = map[string]Grant{}
	}
	p.grants[token] = g
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.grants, token)
		p.mu.Unlock()
	}
}

// ProxyURL is the proxy URL a grant's job is given (HTTP_PROXY, HTTPS_PROXY).
func ProxyURL(token, hostPort string) string {
	return "http://" + proxyUser + ":" + token + "@" + hostPort
}

func (p *Proxy) grant(r *http.Request) (Grant, bool) {
	auth, ok := strings.CutPrefix(r.Header.Get("Proxy-Authorization"), "Basic ")
	if !ok {
		return Grant{}, false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(auth))
	if err != nil {
		return Grant{}, false
	}
	user, token, _ := strings.Cut(string(raw), ":")
	if user != proxyUser {
		return Grant{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	g, ok := p.grants[token]
	return g, ok
}

// refusal is a request the proxy does not carry out, with the status it
// answers.
type refusal struct {
	status int
	why    string
}

func (e *refusal) Error() string { return e.why }

// check decides host:port for a grant and returns the address to dial.
func (p *Proxy) check(ctx context.Context, g Grant, host string, port int) (netip.Addr, error) {
	rule, ok := g.Allow.Match(host, port)
	if !ok {
		return netip.Addr{}, &refusal{http.StatusForbidden, fmt.Sprintf("%s:%d is not on the allowlist", host, port)}
	}
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return a.Unmap(), nil // an address matches only a rule that names it
	}
	res := p.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	rctx, cancel := context.WithTimeout(ctx, p.dialTimeout())
	defer cancel()
	addrs, err := res.LookupNetIP(rctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, &refusal{http.StatusBadGateway, fmt.Sprintf("%s does not resolve", host)}
	}
	for _, a := range addrs {
		if Private(a) && !rule.Exact() {
			return netip.Addr{}, &refusal{http.StatusForbidden,
				fmt.Sprintf("%s resolves to %s, a private address, and the allowlist names it only by %s", host, a.Unmap(), rule)}
		}
	}
	return addrs[0].Unmap(), nil
}

func (p *Proxy) audit(ev Event) {
	if p.Audit != nil {
		p.Audit(ev)
	}
}

func (p *Proxy) dialTimeout() time.Duration {
	if p.DialTimeout > 0 {
		return p.DialTimeout
	}
	return 10 * time.Second
}

// ServeHTTP answers CONNECT host:port with a tunnel, and an absolute
// http:// request by forwarding it; anything refused gets 403 (or 407
// without valid credentials) and no connection is made.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g, ok := p.grant(r)
	if !ok {
		w.Header().Set("Proxy-Authenticate", `Basic realm="sandboxer"`)
		http.Error(w, "proxy credentials missing or unknown", http.StatusProxyAuthRequired)
		return
	}
	hostPort := r.Host
	if r.Method != http.MethodConnect {
		if r.URL.Scheme != "http" || r.URL.Host == "" {
			http.Error(w, "only CONNECT and absolute http:// requests are proxied", http.StatusBadRequest)
			return
		}
		hostPort = r.URL.Host
		if r.URL.Port() == "" {
			hostPort = net.JoinHostPort(r.URL.Hostname(), "80")
		}
	}
	host, portStr, err := net.SplitHostPort(hostPort)
	port, perr := strconv.Atoi(portStr)
	if err != nil || perr != nil {
		http.Error(w, "the request names no host:port", http.StatusBadRequest)
		return
	}
	ev := Event{Tenant: g.Tenant, Job: g.Job, Host: host, Port: port, Start: time.Now()}
	defer func() { p.audit(ev) }()
	addr, err := p.check(r.Context(), g, host, port)
	if err != nil {
		ev.Reason = err.Error()
		status := http.StatusForbidden
		var rf *refusal
		if errors.As(err, &rf) {
			status = rf.status
		}
		http.Error(w, "sandboxer egress proxy: "+err.Error(), status)
		return
	}
	bound := g.bound(host, port)
	if len(bound) > 0 && (r.Method != http.MethodConnect || p.CA == nil) {
		ev.Reason = fmt.Sprintf("plain http:// to %s, a host secret %s is bound to, is refused: use https://, so the value never crosses the network in clear", host, boundNames(bound))
		if p.CA == nil {
			ev.Reason = "secrets need the proxy's CA, which this proxy has not got"
		}
		http.Error(w, "sandboxer egress proxy: "+ev.Reason, http.StatusForbidden)
		return
	}
	ev.Addr = netip.AddrPortFrom(addr, uint16(port)).String()
	if len(bound) > 0 {
		ev.Allowed = true
		p.swap(w, g, host, port, ev.Addr, bound, &ev)
		return
	}
	d := net.Dialer{Timeout: p.dialTimeout()}
	conn, err := d.DialContext(r.Context(), "tcp", ev.Addr)
	if err != nil {
		ev.Reason = "connect: " + err.Error()
		http.Error(w, "sandboxer egress proxy: "+ev.Reason, http.StatusBadGateway)
		return
	}
	ev.Allowed = true
	if r.Method == http.MethodConnect {
		p.tunnel(w, conn, &ev)
		return
	}
	p.forward(w, r, conn, &ev)
}

// established takes over a CONNECT's connection and answers 200: what
// the job sends next is read from the returned reader (the HTTP server
// may have buffered some of it). ok is false when the connection is gone.
func established(w http.ResponseWriter) (client net.Conn, r *bufio.Reader, ok bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "tunnels are not supported here", http.StatusInternalServerError)
		return nil, nil, false
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		return nil, nil, false
	}
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		client.Close()
		return nil, nil, false
	}
	return client, buf.Reader, true
}

// tunnel joins the client's connection and the dialled one.
func (p *Proxy) tunnel(w http.ResponseWriter, conn net.Conn, ev *Event) {
	defer conn.Close()
	client, r, ok := established(w)
	if !ok {
		return
	}
	defer client.Close()
	var up, down atomic.Int64
	done := make(chan struct{})
	go func() {
		n, _ := io.Copy(conn, io.MultiReader(r, client))
		up.Store(n)
		if tc, ok := conn.(closeWriter); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	n, _ := io.Copy(client, conn)
	down.Store(n)
	if tc, ok := client.(closeWriter); ok { // TCP, or a channel of the tunnel
		_ = tc.CloseWrite()
	}
	<-done
	ev.BytesUp, ev.BytesDown = up.Load(), down.Load()
}

// closeWriter is a connection that can be closed one way.
type closeWriter interface{ CloseWrite() error }

// forward sends a plain http:// request over the dialled connection.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, conn net.Conn, ev *Event) {
	used := false
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(context.Context, string, string) (net.Conn, error) {
		if used {
			return nil, errors.New("one connection per request")
		}
		used = true
		return conn, nil
	}}
	defer tr.CloseIdleConnections()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Authorization")
	out.Header.Del("Proxy-Connection")
	body := &counter{r: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = body
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		ev.Reason = "request: " + err.Error()
		http.Error(w, "sandboxer egress proxy: "+ev.Reason, http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	n, _ := io.Copy(w, resp.Body)
	ev.BytesUp, ev.BytesDown = body.n, n
}

// counter counts what is read through it.
type counter struct {
	r io.ReadCloser
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	if c.r == nil {
		return 0, io.EOF
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *counter) Close() error {
	if c.r == nil {
		return nil
	}
	return c.r.Close()
}

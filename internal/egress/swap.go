package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// SecretGrant is a secret a grant may use: requests to its Hosts carry
// Value (read at each use) where the job sent Placeholder.
type SecretGrant struct {
	Name, Placeholder string
	Hosts             List
	Value             func() ([]byte, error)
}

// bound are the grant's secrets bound to host:port.
func (g Grant) bound(host string, port int) []SecretGrant {
	var out []SecretGrant
	for _, s := range g.Secrets {
		if _, ok := s.Hosts.Match(host, port); ok {
			out = append(out, s)
		}
	}
	return out
}

// secretNames are the secrets' names.
func secretNames(secrets []SecretGrant) []string {
	names := make([]string, len(secrets))
	for i, s := range secrets {
		names[i] = s.Name
	}
	return names
}

// boundNames names secrets for a message.
func boundNames(secrets []SecretGrant) string {
	return strings.Join(secretNames(secrets), ", ")
}

// handshakeTimeout bounds the TLS handshake with the job.
const handshakeTimeout = 10 * time.Second

// swap serves a CONNECT to a host secrets are bound to: the proxy ends
// the job's TLS with a certificate of its CA, reads each HTTP/1.1 request,
// puts the secrets' values where their placeholders are in the headers,
// and sends it on over TLS it verifies (RootCAs, else the host's trust
// store) to addr, the address check resolved. One audit event per
// request that used a secret, the CONNECT's own at the end.
func (p *Proxy) swap(w http.ResponseWriter, g Grant, host string, port int, addr string, secrets []SecretGrant, ev *Event) {
	client, buffered, ok := established(w)
	if !ok {
		return
	}
	defer client.Close()
	tconn := tls.Server(&bufferedConn{Conn: client, r: buffered}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.CA.certFor(host)
		},
	})
	hctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	err := tconn.HandshakeContext(hctx)
	cancel()
	if err != nil {
		ev.Reason = "TLS with the job: " + err.Error()
		return
	}
	defer tconn.Close()
	tr := p.upstream(host, addr)
	r := bufio.NewReader(tconn)
	for {
		req, err := http.ReadRequest(r)
		if err != nil {
			return // the job closed, or sent what is not HTTP/1.1
		}
		keep := p.swapOne(tconn, tr, req, g, host, port, secrets, ev)
		if !keep {
			return
		}
	}
}

// upstream is the transport to host at addr: kept per host and address,
// so a job's fresh connection reuses one the proxy already has (a TLS
// handshake saved per request). Requests carry their own headers: a
// connection holds nothing of the job that used it before.
func (p *Proxy) upstream(host, addr string) *http.Transport {
	key := host + "|" + addr
	p.mu.Lock()
	defer p.mu.Unlock()
	if tr, ok := p.upstreams[key]; ok {
		return tr
	}
	if p.upstreams == nil {
		p.upstreams = map[string]*http.Transport{}
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: p.dialTimeout()}
			return d.DialContext(ctx, "tcp", addr)
		},
		TLSClientConfig:       &tls.Config{ServerName: host, RootCAs: p.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   p.dialTimeout(),
		ResponseHeaderTimeout: 5 * time.Minute,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		DisableCompression:    true, // pass the body as the host sent it
	}
	p.upstreams[key] = tr
	return tr
}

// swapOne carries one request; false ends the connection.
func (p *Proxy) swapOne(conn net.Conn, tr *http.Transport, req *http.Request, g Grant, host string, port int, secrets []SecretGrant, ev *Event) bool {
	used := Event{Tenant: g.Tenant, Job: g.Job, Host: ev.Host, Port: ev.Port, Addr: ev.Addr, Allowed: true}
	defer req.Body.Close()
	if err := checkAuthority(req, host, port); err != nil {
		// Domain fronting: a front end that routes by Host would hand the
		// value to the host the request names, not the one it is bound to.
		used.Allowed, used.Reason, used.Secrets = false, "fronting refused: "+err.Error(), secretNames(secrets)
		p.audit(used)
		writeStatus(conn, http.StatusMisdirectedRequest, "sandboxer egress proxy: "+err.Error())
		return false
	}
	if req.Header.Get("Upgrade") != "" {
		writeStatus(conn, http.StatusNotImplemented, "sandboxer egress proxy: protocol upgrades are not carried to a host a secret is bound to")
		return false
	}
	names, err := swapHeaders(req.Header, secrets, g.OnValue)
	if err != nil {
		used.Allowed, used.Reason, used.Secrets = false, err.Error(), names
		p.audit(used)
		writeStatus(conn, http.StatusBadGateway, "sandboxer egress proxy: "+err.Error())
		return false
	}
	used.Secrets = names
	target := net.JoinHostPort(host, fmt.Sprint(port))
	req.URL.Scheme, req.URL.Host, req.RequestURI, req.Host = "https", target, "", authority(host, port)
	body := &counter{r: req.Body}
	req.Body = body
	resp, err := tr.RoundTrip(req)
	if err != nil {
		used.Allowed, used.Reason = false, "request: "+err.Error()
		p.audit(used)
		writeStatus(conn, http.StatusBadGateway, "sandboxer egress proxy: "+used.Reason)
		return false
	}
	defer resp.Body.Close()
	down := &counter{r: resp.Body}
	resp.Body = down
	werr := resp.Write(conn)
	used.BytesUp, used.BytesDown = body.n, down.n
	ev.BytesUp += body.n
	ev.BytesDown += down.n
	if len(names) > 0 {
		p.audit(used)
	}
	return werr == nil && !req.Close && !resp.Close
}

// checkAuthority refuses a request inside a bound host's TLS that names
// any other host: in its Host header, or in an absolute-form target
// (https://other/...). Names compare as DNS names do (case, a final dot);
// a port, where given, must be the CONNECT's (none means the same host).
func checkAuthority(req *http.Request, host string, port int) error {
	if req.URL.IsAbs() || req.URL.Host != "" {
		if !strings.EqualFold(req.URL.Scheme, "https") || !sameAuthority(req.URL.Host, host, port) {
			return fmt.Errorf("the request's target %q names another host than %s, which this connection and its secrets are bound to", truncate(req.RequestURI, 200), net.JoinHostPort(host, fmt.Sprint(port)))
		}
	}
	if req.Host == "" {
		return fmt.Errorf("the request has no Host header: a request to %s, which secrets are bound to, must name it", host)
	}
	if !sameAuthority(req.Host, host, port) {
		return fmt.Errorf("the request's Host header %q names another host than %s, which this connection and its secrets are bound to", truncate(req.Host, 200), net.JoinHostPort(host, fmt.Sprint(port)))
	}
	return nil
}

// sameAuthority says whether authority (host or host:port) is host at port.
func sameAuthority(authority, host string, port int) bool {
	h, p, err := net.SplitHostPort(authority)
	if err != nil {
		h, p = authority, ""
	}
	if p != "" && p != fmt.Sprint(port) {
		return false
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.EqualFold(strings.TrimSuffix(h, "."), strings.TrimSuffix(host, "."))
}

// authority is the Host header sent to host at port (the port left out
// where it is https' own).
func authority(host string, port int) string {
	if port == 443 {
		return host
	}
	return net.JoinHostPort(host, fmt.Sprint(port))
}

// truncate bounds a job's string in a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// swapHeaders puts each secret's value where its placeholder is in h,
// Basic credentials' encoded user:password included; it returns the
// names of the secrets it used. OnValue, when set, learns each value used.
func swapHeaders(h http.Header, secrets []SecretGrant, onValue func(value []byte, placeholder string)) ([]string, error) {
	var names []string
	for _, s := range secrets {
		used := false
		var value []byte
		for k, vs := range h {
			for i, v := range vs {
				nv, hit := swapValue(k, v, s.Placeholder, func() (string, error) {
					if value == nil {
						var err error
						if value, err = s.Value(); err != nil {
							return "", fmt.Errorf("secret %s cannot be read: %v", s.Name, err)
						}
					}
					return string(value), nil
				})
				if hit == nil && nv != v {
					vs[i], used = nv, true
				} else if hit != nil {
					return names, hit
				}
			}
		}
		if used {
			names = append(names, s.Name)
			if onValue != nil {
				onValue(value, s.Placeholder)
			}
		}
	}
	return names, nil
}

// swapValue replaces placeholder in one header value (inside Basic
// credentials too).
func swapValue(key, v, placeholder string, value func() (string, error)) (string, error) {
	if (key == "Authorization" || key == "Proxy-Authorization") && len(v) > 6 && strings.EqualFold(v[:6], "basic ") {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[6:]))
		if err == nil && strings.Contains(string(raw), placeholder) {
			val, err := value()
			if err != nil {
				return v, err
			}
			return v[:6] + base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(string(raw), placeholder, val))), nil
		}
	}
	if !strings.Contains(v, placeholder) {
		return v, nil
	}
	val, err := value()
	if err != nil {
		return v, err
	}
	return strings.ReplaceAll(v, placeholder, val), nil
}

// writeStatus answers a request on conn with status and a one-line body.
func writeStatus(conn net.Conn, status int, msg string) {
	resp := &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Close: true,
		Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:   io.NopCloser(strings.NewReader(msg + "\n")), ContentLength: int64(len(msg) + 1)}
	_ = resp.Write(conn)
}

// bufferedConn reads what the HTTP server already buffered first.
type bufferedConn struct {
	net.Conn
	r io.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

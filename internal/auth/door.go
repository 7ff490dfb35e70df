package auth

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The front door every HTTP path of the server passes (/mcp, /preview, /ui,
// /metrics), on every listener, with or without tokens:
//   - a server bound to loopback answers only requests whose Host names
//     loopback (a page of another site that rebinds its name to 127.0.0.1
//     sends its own name as Host);
//   - a browser's Origin, when sent, must name the host asked;
//   - bad credentials (a bearer token, a sign-in form, the E2B API's keys
//     and sandbox tokens: WrapWith) are counted per
//     source address: after SlowAfterFailures in the window each further bad
//     attempt from it is answered late, and after MaxFailedCredentials it is
//     refused with 429 and Retry-After, on every path, until the window
//     ends. Good credentials are never slowed or refused, whatever else was
//     sent from their address: one client's typo must not lock out every
//     tenant behind the same NAT or reverse proxy. (Tokens are at least 16
//     characters, so the limit is against noise, not against guessing.)
//   - the source is the peer's address, or, when the peer is one of the
//     policy's trusted proxies (http.trusted_proxies), the client that its
//     X-Forwarded-For names.

// Failed-credential limits, per source address.
const (
	MaxFailedCredentials = 10
	SlowAfterFailures    = 3
	FailureWindow        = time.Minute
	maxSources           = 10000
	maxSlow              = 2 * time.Second
)

// slowStep is how much later each further bad attempt is answered (a
// variable so the door's tests need not wait seconds).
var slowStep = 250 * time.Millisecond

// Door wraps handlers with the checks above. One door serves every
// listener of a server, so bad credentials count alike wherever they are
// tried. Safe for concurrent use.
type Door struct {
	cfg    DoorConfig
	mu     sync.Mutex
	failed map[string]*failCount
}

// DoorConfig is what a door knows of the server.
type DoorConfig struct {
	// Tokens tells good credentials from bad (nil: a server without
	// tokens, where every request is counted by what it answers).
	Tokens interface {
		Authenticate(token string) (name, role string, ok bool)
	}
	// TrustedProxies are the peers whose X-Forwarded-For names the client.
	TrustedProxies []netip.Prefix
}

type failCount struct {
	n     int
	since time.Time
}

// NewDoor makes a server's door.
func NewDoor(cfg DoorConfig) *Door {
	return &Door{cfg: cfg, failed: map[string]*failCount{}}
}

// Wrap puts the door in front of next, the handler of a listener; loopback
// says the listener is bound to loopback only (then Host must name it);
// otherwise hosts, when not empty, are the names (host or host:port) it
// answers to. Its credentials are bearer tokens (and the console's sign-in).
func (d *Door) Wrap(next http.Handler, loopback bool, hosts ...string) http.Handler {
	return d.WrapWith(next, nil, loopback, hosts...)
}

// Credentials judges the credentials a request presents, for a listener
// whose handler takes others than bearer tokens (the E2B API's keys and
// sandbox tokens): presented, and known good.
type Credentials func(r *http.Request) (presented, good bool)

// WrapWith is Wrap for a listener whose credentials creds judges (nil:
// bearer tokens): a request presenting bad ones counts as a failure of its
// source whatever its handler answers.
func (d *Door) WrapWith(next http.Handler, creds Credentials, loopback bool, hosts ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if loopback && !LoopbackHost(r.Host) {
			http.Error(w, "this server answers only to localhost, 127.0.0.1 and [::1], not Host "+clip(r.Host, 100), http.StatusForbidden)
			return
		}
		if !loopback && len(hosts) > 0 && !hostListed(r.Host, hosts) {
			http.Error(w, "this server does not answer to Host "+clip(r.Host, 100)+" (policy http.hosts)", http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !SameOrigin(origin, r.Host) {
			http.Error(w, "cross-origin request refused (Origin "+clip(origin, 100)+")", http.StatusForbidden)
			return
		}
		source := d.source(r)
		r = r.WithContext(context.WithValue(r.Context(), sourceKey{}, source))
		presented, good := presentedCredentials(r), false
		if creds != nil {
			presented, good = creds(r)
		} else if presented {
			good = d.good(r)
		}
		if presented && !good {
			n, wait := d.failures(source)
			if n >= MaxFailedCredentials && wait > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
				http.Error(w, "too many requests with bad credentials from this address: wait and try again", http.StatusTooManyRequests)
				return
			}
			if n >= SlowAfterFailures {
				select {
				case <-time.After(min(time.Duration(n-SlowAfterFailures+1)*slowStep, maxSlow)):
				case <-r.Context().Done():
					return
				}
			}
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		// Bearer tokens without a token file are judged by the handler's answer.
		if presented && !good && (creds != nil || sw.code == http.StatusUnauthorized) {
			d.fail(source)
		}
	})
}

// presentedCredentials: the request carried a token (a bearer token, or
// the console's sign-in form), so a 401 means a bad one, not a first visit.
func presentedCredentials(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" || (r.Method == http.MethodPost && r.URL.Path == "/ui/login")
}

// good says whether the credentials r presents are a known token (a bearer
// token, or the console's sign-in form). Without tokens nothing is known
// to be good, and the handler's answer decides.
func (d *Door) good(r *http.Request) bool {
	if d.cfg.Tokens == nil {
		return false
	}
	token := BearerToken(r)
	if token == "" && r.Method == http.MethodPost && r.URL.Path == "/ui/login" {
		token = r.PostFormValue("token")
	}
	_, _, ok := d.cfg.Tokens.Authenticate(token)
	return ok
}

// failures is how many bad credentials source presented in its current
// window, and how long that window has left.
func (d *Door) failures(source string) (int, time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.failed[source]
	if c == nil {
		return 0, 0
	}
	left := FailureWindow - time.Since(c.since)
	if left <= 0 {
		return 0, 0
	}
	return c.n, left
}

func (d *Door) fail(source string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if len(d.failed) >= maxSources {
		for k, c := range d.failed {
			if now.Sub(c.since) >= FailureWindow {
				delete(d.failed, k)
			}
		}
		if len(d.failed) >= maxSources {
			return // under a flood from many sources the per-source count is dropped, not memory
		}
	}
	c := d.failed[source]
	if c == nil || now.Sub(c.since) >= FailureWindow {
		c = &failCount{since: now}
		d.failed[source] = c
	}
	c.n++
}

// hostListed says whether a Host header is one of hosts: an entry with a
// port must match with it, one without matches any port.
func hostListed(hostport string, hosts []string) bool {
	name := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		name = h
	}
	for _, h := range hosts {
		if _, _, err := net.SplitHostPort(h); err == nil {
			if strings.EqualFold(h, hostport) {
				return true
			}
		} else if strings.EqualFold(strings.Trim(h, "[]"), strings.Trim(name, "[]")) {
			return true
		}
	}
	return false
}

// LoopbackHost says whether a Host header names loopback.
func LoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SameOrigin says whether a browser's Origin names the host it asks.
func SameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

type sourceKey struct{}

// SourceOf is the client a request came from, as the door saw it (behind a
// trusted proxy, the client its X-Forwarded-For names); without a door,
// the peer's address.
func SourceOf(r *http.Request) string {
	if s, ok := r.Context().Value(sourceKey{}).(string); ok {
		return s
	}
	return peerOf(r)
}

// peerOf is the peer's address without its port.
func peerOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// source is the client of r: the peer, or, where the peer is a trusted
// proxy, the last address in X-Forwarded-For that is not one (each proxy
// appends the address it received from; what lies left of the first
// untrusted hop was written by the client and is not believed).
func (d *Door) source(r *http.Request) string {
	peer := peerOf(r)
	if len(d.cfg.TrustedProxies) == 0 || !d.trusted(peer) {
		return peer
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		for _, h := range strings.Split(v, ",") {
			hops = append(hops, strings.TrimSpace(h))
		}
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(hops[i])
		if err != nil {
			return peer // a hop that is no address: the proxy's own answer is all that is known
		}
		if !d.trusted(a.String()) || i == 0 {
			return a.Unmap().String()
		}
	}
	return peer
}

func (d *Door) trusted(addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range d.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// statusWriter notes the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush lets streamed responses (server-sent events, MCP streams) through.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer beneath.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

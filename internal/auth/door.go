package auth

import (
	"net"
	"net/http"
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
//   - a source address that presented bad credentials (a bearer token, a
//     sign-in form) too often lately gets 429 with Retry-After, on every
//     path, until its window ends.

// Failed-credential limits, per source address.
const (
	MaxFailedCredentials = 10
	FailureWindow        = time.Minute
	maxSources           = 10000
)

// Door wraps handlers with the checks above. One door serves every
// listener of a server, so bad credentials count alike wherever they are
// tried. Safe for concurrent use.
type Door struct {
	mu     sync.Mutex
	failed map[string]*failCount
}

type failCount struct {
	n     int
	since time.Time
}

// NewDoor makes a server's door.
func NewDoor() *Door {
	return &Door{failed: map[string]*failCount{}}
}

// Wrap puts the door in front of next, the handler of a listener; loopback
// says the listener is bound to loopback only (then Host must name it);
// otherwise hosts, when not empty, are the names (host or host:port) it
// answers to.
func (d *Door) Wrap(next http.Handler, loopback bool, hosts ...string) http.Handler {
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
		source := SourceOf(r)
		if wait, blocked := d.blocked(source); blocked {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
			http.Error(w, "too many requests with bad credentials from this address: wait and try again", http.StatusTooManyRequests)
			return
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if sw.code == http.StatusUnauthorized && presentedCredentials(r) {
			d.fail(source)
		}
	})
}

// presentedCredentials: the request carried a token (a bearer token, or
// the console's sign-in form), so a 401 means a bad one, not a first visit.
func presentedCredentials(r *http.Request) bool {
	return r.Header.Get("Authorization") != "" || (r.Method == http.MethodPost && r.URL.Path == "/ui/login")
}

// blocked says whether source failed too often lately, and for how long.
func (d *Door) blocked(source string) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.failed[source]
	if c == nil || c.n < MaxFailedCredentials {
		return 0, false
	}
	left := FailureWindow - time.Since(c.since)
	return left, left > 0
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

// SourceOf is a request's remote address without its port.
func SourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
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

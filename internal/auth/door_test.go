package auth

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestDoorGuardsEveryPath (THREATS 28, 109): on a loopback listener a
// foreign Host is refused on every path, tokens or not; a foreign Origin
// too; bad credentials on any path count against the source address, and
// past the limit every path answers a bad token 429 with Retry-After, while
// a good token from that address is served (THREATS 125); visits without
// credentials do not count.
func TestDoorGuardsEveryPath(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+goodToken || r.URL.Path == "/ui/login" && r.Method == http.MethodGet {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})
	tokens, err := Parse(strings.NewReader("alice " + goodToken))
	if err != nil {
		t.Fatal(err)
	}
	slowStep = time.Millisecond
	door := NewDoor(DoorConfig{Tokens: tokens}).Wrap(inner, true)
	send := func(method, path, host, origin, token, remote string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.Host, r.RemoteAddr = host, remote+":40000"
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if token == "good" {
			token = goodToken
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		door.ServeHTTP(w, r)
		return w
	}
	for _, path := range []string{"/mcp", "/preview/ws/8000/", "/ui/jobs", "/metrics"} {
		for _, host := range []string{"evil.example:8080", "attacker.test", "10.0.0.5:80"} {
			if w := send("GET", path, host, "", "good", "127.0.0.1"); w.Code != http.StatusForbidden {
				t.Errorf("GET %s with Host %s: %d, want 403", path, host, w.Code)
			}
		}
		for _, host := range []string{"127.0.0.1:8080", "localhost:1", "[::1]:9", "LOCALHOST"} {
			if w := send("GET", path, host, "", "good", "127.0.0.1"); w.Code != http.StatusOK {
				t.Errorf("GET %s with Host %s: %d, want 200", path, host, w.Code)
			}
		}
		if w := send("POST", path, "127.0.0.1:8080", "http://evil.example", "good", "127.0.0.1"); w.Code != http.StatusForbidden {
			t.Errorf("POST %s from another Origin: %d, want 403", path, w.Code)
		}
	}
	// Visits without credentials never count.
	for i := 0; i < 3*MaxFailedCredentials; i++ {
		send("GET", "/ui/jobs", "127.0.0.1:1", "", "", "127.0.0.2")
	}
	if w := send("GET", "/mcp", "127.0.0.1:1", "", "good", "127.0.0.2"); w.Code != http.StatusOK {
		t.Fatalf("after visits without credentials: %d", w.Code)
	}
	// Bad tokens spread over every path add up for one source.
	paths := []string{"/mcp", "/ui/jobs", "/metrics", "/preview/ws/8000/"}
	for i := 0; i < MaxFailedCredentials; i++ {
		if w := send("GET", paths[i%len(paths)], "127.0.0.1:1", "", "guess", "127.0.0.3"); w.Code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d", i, w.Code)
		}
	}
	for _, path := range paths {
		w := send("GET", path, "127.0.0.1:1", "", "guess", "127.0.0.3")
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Fatalf("a bad token at %s after %d: %d (Retry-After %q), want 429 with Retry-After", path, MaxFailedCredentials, w.Code, w.Header().Get("Retry-After"))
		}
		// A good token from the same address is served: one client's typo
		// locks out no one else behind that address.
		if w := send("GET", path, "127.0.0.1:1", "", "good", "127.0.0.3"); w.Code != http.StatusOK {
			t.Fatalf("a good token at %s from an address that sent bad ones: %d, want 200", path, w.Code)
		}
	}
	if w := send("GET", "/mcp", "127.0.0.1:1", "", "good", "127.0.0.4"); w.Code != http.StatusOK {
		t.Fatalf("another source: %d", w.Code)
	}
}

// TestDoorHostsBeyondLoopback: a listener bound beyond loopback answers the
// names of policy http.hosts only (with their port, or any port when the
// entry has none), and any name when the list is empty.
func TestDoorHostsBeyondLoopback(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, c := range []struct {
		hosts []string
		host  string
		want  int
	}{
		{nil, "anything.example:8080", http.StatusOK},
		{[]string{"sbx.example.com"}, "sbx.example.com:8443", http.StatusOK},
		{[]string{"sbx.example.com"}, "SBX.example.com", http.StatusOK},
		{[]string{"sbx.example.com"}, "evil.example:8443", http.StatusForbidden},
		{[]string{"sbx.example.com:8443"}, "sbx.example.com:9999", http.StatusForbidden},
		{[]string{"sbx.example.com:8443"}, "sbx.example.com:8443", http.StatusOK},
		{[]string{"10.0.0.5", "[fd00::1]"}, "[fd00::1]:80", http.StatusOK},
	} {
		r := httptest.NewRequest("GET", "/mcp", nil)
		r.Host = c.host
		w := httptest.NewRecorder()
		NewDoor(DoorConfig{}).Wrap(ok, false, c.hosts...).ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("hosts %v, Host %s: %d, want %d", c.hosts, c.host, w.Code, c.want)
		}
	}
}

const goodToken = "good-token-0123456789"

// Bad attempts are answered later and later before they are refused; a
// good token is never delayed.
func TestDoorSlowsBadAttempts(t *testing.T) {
	tokens, _ := Parse(strings.NewReader("alice " + goodToken))
	old := slowStep
	slowStep = 20 * time.Millisecond
	defer func() { slowStep = old }()
	door := NewDoor(DoorConfig{Tokens: tokens}).Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if BearerToken(r) != goodToken {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}), false)
	send := func(token string) (int, time.Duration) {
		r := httptest.NewRequest("GET", "/mcp", nil)
		r.RemoteAddr = "192.0.2.7:1"
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		start := time.Now()
		door.ServeHTTP(w, r)
		return w.Code, time.Since(start)
	}
	for i := range SlowAfterFailures {
		send(fmt.Sprint("guess-", i))
	}
	// A lower bound only: the door waited at least its step.
	if code, took := send("guess-slow"); code != http.StatusUnauthorized || took < slowStep {
		t.Errorf("bad attempt %d: %d after %s, want 401 after at least %s", SlowAfterFailures+1, code, took, slowStep)
	}
	if code, _ := send(goodToken); code != http.StatusOK {
		t.Errorf("the good token: %d", code)
	}
}

// Behind a trusted proxy the client is the last X-Forwarded-For hop that
// is not a trusted proxy: clients behind one proxy are counted apart, a
// client cannot escape its count by writing hops of its own, and an
// untrusted peer's header is ignored.
func TestDoorTrustsOnlyItsProxies(t *testing.T) {
	slowStep = time.Millisecond
	tokens, _ := Parse(strings.NewReader("alice " + goodToken))
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::1/128")}
	door := NewDoor(DoorConfig{Tokens: tokens, TrustedProxies: proxies})
	var seen string
	h := door.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = SourceOf(r)
		if BearerToken(r) != goodToken {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}), false)
	send := func(peer, xff, token string) int {
		r := httptest.NewRequest("GET", "/mcp", nil)
		r.RemoteAddr = net.JoinHostPort(peer, "1")
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i := range MaxFailedCredentials {
		send("10.0.0.1", "198.51.100.1", fmt.Sprint("typo-", i))
	}
	if seen != "198.51.100.1" {
		t.Errorf("the source behind the proxy: %q", seen)
	}
	if code := send("10.0.0.1", "198.51.100.1", "typo"); code != http.StatusTooManyRequests {
		t.Errorf("the client with typos: %d, want 429", code)
	}
	if code := send("10.0.0.1", "203.0.113.9, 198.51.100.1", "typo"); code != http.StatusTooManyRequests {
		t.Errorf("the client writing a hop of its own: %d, want 429", code)
	}
	if code := send("10.0.0.2", "198.51.100.2", "typo"); code != http.StatusUnauthorized {
		t.Errorf("another client behind the same proxy: %d, want 401", code)
	}
	if code := send("10.0.0.1", "198.51.100.1, 10.0.0.3", goodToken); code != http.StatusOK || seen != "198.51.100.1" {
		t.Errorf("a good token from the client with typos, through two proxies: %d from %q", code, seen)
	}
	if send("192.0.2.50", "198.51.100.1", "typo"); seen != "192.0.2.50" {
		t.Errorf("an untrusted peer's X-Forwarded-For was believed: %q", seen)
	}
	if send("fd00::1", "2001:db8::5", "typo"); seen != "2001:db8::5" {
		t.Errorf("IPv6 behind a trusted proxy: %q", seen)
	}
}

// A listener whose credentials are judged by its own rule (the E2B API's
// keys): bad ones count whatever the handler answers (a 404 too) and are
// refused past the limit; good ones never are.
func TestDoorCountsOtherCredentials(t *testing.T) {
	old := slowStep
	slowStep = time.Millisecond
	defer func() { slowStep = old }()
	creds := func(r *http.Request) (bool, bool) {
		key := r.Header.Get("X-Key")
		return key != "", key == goodToken
	}
	door := NewDoor(DoorConfig{}).WrapWith(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") != goodToken {
			w.WriteHeader(http.StatusNotFound) // as the E2B API answers a wrong sandbox token
		}
	}), creds, false)
	send := func(key string) int {
		r := httptest.NewRequest("GET", "/files", nil)
		r.RemoteAddr = "192.0.2.9:1"
		if key != "" {
			r.Header.Set("X-Key", key)
		}
		w := httptest.NewRecorder()
		door.ServeHTTP(w, r)
		return w.Code
	}
	for i := range MaxFailedCredentials {
		if code := send(fmt.Sprint("guess-", i)); code != http.StatusNotFound {
			t.Fatalf("bad attempt %d: %d", i+1, code)
		}
	}
	if code := send("guess-more"); code != http.StatusTooManyRequests {
		t.Errorf("bad attempt past the limit: %d, want 429", code)
	}
	if code := send(goodToken); code != http.StatusOK {
		t.Errorf("the good key after the limit: %d", code)
	}
	if code := send(""); code != http.StatusNotFound {
		t.Errorf("no key at all (not a credential): %d", code)
	}
}

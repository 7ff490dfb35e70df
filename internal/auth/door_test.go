package auth

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestDoorGuardsEveryPath (THREATS 28, 109): on a loopback listener a
// foreign Host is refused on every path, tokens or not; a foreign Origin
// too; bad credentials on any path count against the source address, and
// past the limit every path answers 429 with Retry-After, good token or not;
// visits without credentials do not count.
func TestDoorGuardsEveryPath(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer good" || r.URL.Path == "/ui/login" && r.Method == http.MethodGet {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})
	door := NewDoor().Wrap(inner, true)
	send := func(method, path, host, origin, token, remote string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.Host, r.RemoteAddr = host, remote+":40000"
		if origin != "" {
			r.Header.Set("Origin", origin)
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
		w := send("GET", path, "127.0.0.1:1", "", "good", "127.0.0.3")
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Fatalf("%s after %d bad tokens: %d (Retry-After %q), want 429 with Retry-After", path, MaxFailedCredentials, w.Code, w.Header().Get("Retry-After"))
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
		NewDoor().Wrap(ok, false, c.hosts...).ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("hosts %v, Host %s: %d, want %d", c.hosts, c.host, w.Code, c.want)
		}
	}
}

package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseListAndMatch(t *testing.T) {
	l, err := ParseList([]string{"*.example.com", "pkg.internal:443", "172.17.0.1:8080", "Exact.ORG."})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		port int
		ok   bool
	}{
		{"a.example.com", 443, true}, {"a.b.example.com", 80, true}, {"example.com", 443, false},
		{"a.example.com", 8443, false}, {"evilexample.com", 443, false},
		{"pkg.internal", 443, true}, {"pkg.internal", 80, false},
		{"172.17.0.1", 8080, true}, {"172.17.0.1", 80, false}, {"172.17.0.2", 8080, false},
		{"exact.org", 443, true}, {"EXACT.org.", 80, true}, {"www.exact.org", 443, false},
	} {
		if _, ok := l.Match(c.host, c.port); ok != c.ok {
			t.Errorf("Match(%s, %d) = %v, want %v", c.host, c.port, ok, c.ok)
		}
	}
	for _, bad := range []string{"", "*.1.2.3.4", "a b.com", "x.com:0", "x.com:99999", "-x.com", "http://x.com", "x.com/path"} {
		if _, err := ParseList([]string{bad}); err == nil {
			t.Errorf("ParseList(%q): no error", bad)
		}
	}
}

func TestPrivate(t *testing.T) {
	for a, want := range map[string]bool{
		"10.1.2.3": true, "172.17.0.1": true, "192.168.1.1": true, "127.0.0.1": true, "::1": true,
		"169.254.169.254": true, "100.64.0.1": true, "0.0.0.0": true, "fd00::1": true, "::ffff:127.0.0.1": true,
		"8.8.8.8": false, "2001:4860:4860::8888": false,
	} {
		if got := Private(netip.MustParseAddr(a)); got != want {
			t.Errorf("Private(%s) = %v, want %v", a, got, want)
		}
	}
}

// names is a resolver of fixed answers.
type names map[string]string

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

// connectThrough sends CONNECT target through the proxy with a token
// ("" = no credentials) and returns the status and, on 200, the tunnel.
func connectThrough(t *testing.T, proxyAddr, token, target string) (int, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if token != "" {
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("sbx:"+token)) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return resp.StatusCode, nil, nil
	}
	return resp.StatusCode, c, br
}

func TestProxyAllowsOnlyTheList(t *testing.T) {
	// The upstream counts its connections: a refusal must make none.
	var mu sync.Mutex
	accepted := 0
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			mu.Unlock()
			go func() { // echo one line, upper-cased
				defer c.Close()
				l, _ := bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, strings.ToUpper(l))
			}()
		}
	}()
	upPort := up.Addr().(*net.TCPAddr).Port

	var events []Event
	var evMu sync.Mutex
	p := &Proxy{Resolver: names{"gw.sbx.test": "127.0.0.1", "inner.wild.test": "10.0.0.7"}, Audit: func(e Event) {
		evMu.Lock()
		events = append(events, e)
		evMu.Unlock()
	}}
	allow, err := ParseList([]string{fmt.Sprintf("gw.sbx.test:%d", upPort), fmt.Sprintf("*.wild.test:%d", upPort)})
	if err != nil {
		t.Fatal(err)
	}
	token, revoke := p.Add(Grant{Tenant: "alice", Job: "j1", Allow: allow})
	srv := httptest.NewServer(p)
	defer srv.Close()
	proxyAddr := strings.TrimPrefix(srv.URL, "http://")

	// Allowed: a name the list names exactly, even though it is loopback.
	code, c, br := connectThrough(t, proxyAddr, token, fmt.Sprintf("gw.sbx.test:%d", upPort))
	if code != http.StatusOK {
		t.Fatalf("allowed CONNECT: %d", code)
	}
	io.WriteString(c, "hello\n")
	if l, _ := br.ReadString('\n'); l != "HELLO\n" {
		t.Fatalf("through the tunnel: %q", l)
	}
	c.Close()

	// Refused, with no connection made: a name not on the list, a raw IP,
	// a wildcard's name that resolves to a private address, another port,
	// no credentials, an unknown token, and a revoked grant.
	for _, c := range []struct {
		token, target string
		want          int
	}{
		{token, fmt.Sprintf("other.sbx.test:%d", upPort), http.StatusForbidden},
		{token, fmt.Sprintf("127.0.0.1:%d", upPort), http.StatusForbidden},
		{token, fmt.Sprintf("inner.wild.test:%d", upPort), http.StatusForbidden},
		{token, "gw.sbx.test:443", http.StatusForbidden},
		{"", fmt.Sprintf("gw.sbx.test:%d", upPort), http.StatusProxyAuthRequired},
		{"nope", fmt.Sprintf("gw.sbx.test:%d", upPort), http.StatusProxyAuthRequired},
	} {
		if code, _, _ := connectThrough(t, proxyAddr, c.token, c.target); code != c.want {
			t.Errorf("CONNECT %s: %d, want %d", c.target, code, c.want)
		}
	}
	revoke()
	if code, _, _ := connectThrough(t, proxyAddr, token, fmt.Sprintf("gw.sbx.test:%d", upPort)); code != http.StatusProxyAuthRequired {
		t.Errorf("CONNECT after revoke: %d", code)
	}
	mu.Lock()
	n := accepted
	mu.Unlock()
	if n != 1 {
		t.Errorf("the upstream accepted %d connections, want 1 (the allowed one)", n)
	}

	// Every decision with credentials is audited: tenant, job, host, port, bytes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		evMu.Lock()
		got := append([]Event(nil), events...)
		evMu.Unlock()
		if len(got) >= 5 || time.Now().After(deadline) {
			if len(got) != 5 {
				t.Fatalf("audit events: %+v", got)
			}
			ok := got[0]
			for _, e := range got {
				if e.Allowed {
					ok = e
				}
			}
			if !ok.Allowed || ok.Tenant != "alice" || ok.Job != "j1" || ok.Host != "gw.sbx.test" || ok.Port != upPort || ok.BytesUp != 6 || ok.BytesDown != 6 {
				t.Errorf("allowed event: %+v", ok)
			}
			refused := 0
			for _, e := range got {
				if !e.Allowed && e.Reason != "" && e.Addr == "" {
					refused++
				}
			}
			if refused != 4 {
				t.Errorf("refused events: %+v", got)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProxyForwardsPlainHTTP(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" {
			t.Error("the proxy passed its credentials on")
		}
		io.WriteString(w, "hi "+r.URL.Path)
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	var ev Event
	p := &Proxy{Resolver: names{"mirror.sbx.test": "127.0.0.1"}, Audit: func(e Event) { ev = e }}
	allow, _ := ParseList([]string{"mirror.sbx.test:" + port})
	token, _ := p.Add(Grant{Tenant: "t", Job: "j", Allow: allow})
	srv := httptest.NewServer(p)
	defer srv.Close()
	proxyURL := ProxyURL(token, strings.TrimPrefix(srv.URL, "http://"))
	req, _ := http.NewRequest("GET", "http://mirror.sbx.test:"+port+"/pkg", nil)
	pu, err := url.Parse(proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "hi /pkg" {
		t.Fatalf("through the proxy: %d %q", resp.StatusCode, b)
	}
	if !ev.Allowed || ev.BytesDown != 7 {
		t.Errorf("event: %+v", ev)
	}
	req, _ = http.NewRequest("GET", "http://elsewhere.sbx.test:"+port+"/", nil)
	resp, err = (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a name off the list: %d", resp.StatusCode)
	}
}

func TestNarrow(t *testing.T) {
	ceiling, err := ParseList([]string{"*.example.com", "pkg.internal:443", "172.17.0.1:8080", "mirror.test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entry    string
		ok       bool
		narrowed bool
	}{
		{"a.example.com", true, true}, {"*.example.com", true, false}, {"*.a.example.com:443", true, false},
		{"pkg.internal:443", true, false}, {"PKG.internal.:443", true, false}, {"172.17.0.1:8080", true, false},
		{"mirror.test", true, false}, {"mirror.test:80", true, false},
		{"example.com", false, false}, {"*.com", false, false}, {"a.example.com:8443", false, false},
		{"pkg.internal", false, false}, // 80 and 443: the policy allows 443 only
		{"pkg.internal:80", false, false}, {"172.17.0.1:80", false, false}, {"172.17.0.2:8080", false, false},
		{"other.test", false, false}, {"*.mirror.test", false, false}, {"evilexample.com", false, false},
	} {
		l, err := Narrow(ceiling, []string{c.entry})
		if (err == nil) != c.ok {
			t.Errorf("Narrow(%q): error %v, want ok=%v", c.entry, err, c.ok)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), c.entry) || !strings.Contains(err.Error(), "*.example.com, pkg.internal:443") {
				t.Errorf("Narrow(%q): the error names neither the entry nor the policy's list: %v", c.entry, err)
			}
			continue
		}
		if l[0].Narrowed != c.narrowed || l[0].Exact() == (c.narrowed || l[0].Wildcard) {
			t.Errorf("Narrow(%q) = %+v, want narrowed=%v", c.entry, l[0], c.narrowed)
		}
	}
	if _, err := Narrow(nil, []string{"a.example.com"}); err == nil || !strings.Contains(err.Error(), "egress.allow is empty") {
		t.Errorf("Narrow under an empty policy list: %v", err)
	}
	if _, err := Narrow(ceiling, []string{"a b"}); err == nil || !strings.Contains(err.Error(), `"a b"`) {
		t.Errorf("Narrow of a bad entry: %v", err)
	}
	many := make([]string, MaxNarrow+1)
	for i := range many {
		many[i] = "mirror.test"
	}
	if _, err := Narrow(ceiling, many); err == nil {
		t.Error("Narrow of too many entries: no error")
	}
}

// An exact name a job narrowed out of a policy wildcard is refused a
// private address as the wildcard is: narrowing never widens.
func TestNarrowedNameKeepsTheWildcardsPrivateRefusal(t *testing.T) {
	ceiling, _ := ParseList([]string{"*.wild.test:8080"})
	l, err := Narrow(ceiling, []string{"inner.wild.test:8080"})
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Resolver: names{"inner.wild.test": "10.0.0.7"}}
	_, err = p.check(context.Background(), Grant{Allow: l}, "inner.wild.test", 8080)
	if err == nil || !strings.Contains(err.Error(), "private address") {
		t.Fatalf("a narrowed name resolving to a private address: %v", err)
	}
}

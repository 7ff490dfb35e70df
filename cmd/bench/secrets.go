package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"

	"github.com/sandboxer/sandboxer/internal/egress"
)

// loopback resolves every name to 127.0.0.1 (the bench's upstream).
type loopback struct{}

func (loopback) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// secretsLatency is what the swapping proxy adds to an HTTPS request: the
// same GET through the egress proxy to a host a secret is bound to (the
// proxy ends TLS, swaps the placeholder, sends it on over TLS) and to a
// host it tunnels (TLS end to end), each on a fresh connection (a curl
// call) and on a kept one (a client's second request), interleaved.
func secretsLatency(ctx context.Context, o options) error {
	dir, err := os.MkdirTemp("", "sandboxer-bench-secrets")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	upCA, err := egress.LoadCA(dir + "/upstream")
	if err != nil {
		return err
	}
	proxyCA, err := egress.LoadCA(dir + "/proxy")
	if err != nil {
		return err
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	up.TLS = &tls.Config{GetCertificate: upCA.ServeAs}
	up.StartTLS()
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(upCA.CertPEM())
	p := &egress.Proxy{Resolver: loopback{}, CA: proxyCA, RootCAs: roots}
	allow, _ := egress.ParseList([]string{fmt.Sprintf("bound.bench.test:%d", port), fmt.Sprintf("free.bench.test:%d", port)})
	hosts, _ := egress.ParseList([]string{fmt.Sprintf("bound.bench.test:%d", port)})
	placeholder := "sbx_placeholder_bench"
	token, revoke := p.Add(egress.Grant{Allow: allow, Secrets: []egress.SecretGrant{{Name: "TOKEN", Placeholder: placeholder, Hosts: hosts,
		Value: func() ([]byte, error) { return []byte("bench-value"), nil }}}})
	defer revoke()
	srv := httptest.NewServer(p)
	defer srv.Close()
	proxyURL, _ := url.Parse(egress.ProxyURL(token, strings.TrimPrefix(srv.URL, "http://")))
	trust := x509.NewCertPool()
	trust.AppendCertsFromPEM(upCA.CertPEM())
	trust.AppendCertsFromPEM(proxyCA.CertPEM())
	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: trust}}}
	}
	get := func(c *http.Client, host string) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("https://%s:%d/", host, port), nil)
		req.Header.Set("Authorization", "Bearer "+placeholder)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %s", host, resp.Status)
		}
		return nil
	}
	n := max(o.runs, 50)
	progress("secrets: %d HTTPS requests each way, fresh and kept connections", n)
	var freshTunnel, freshSwap, keptTunnel, keptSwap stats
	kt, ks := newClient(), newClient()
	for i := 0; i < n+5; i++ {
		for _, c := range []struct {
			host   string
			fresh  bool
			into   *stats
			client *http.Client
		}{{"free.bench.test", true, &freshTunnel, nil}, {"bound.bench.test", true, &freshSwap, nil},
			{"free.bench.test", false, &keptTunnel, kt}, {"bound.bench.test", false, &keptSwap, ks}} {
			cl := c.client
			if c.fresh {
				cl = newClient()
			}
			s, err := sample(1, false, func() error { return get(cl, c.host) })
			if err != nil {
				return err
			}
			if c.fresh {
				cl.CloseIdleConnections()
			}
			if i >= 5 { // the first ones warm caches (the host's certificate)
				*c.into = append(*c.into, s...)
			}
		}
	}
	fmt.Printf("\n%-46s %9s %9s  %s\n", "secrets at the proxy (HTTPS GET, in-process)", "p50 ms", "p95 ms", "goal")
	for _, l := range []struct {
		name string
		s    stats
	}{{"tunnel, fresh connection", freshTunnel}, {"swap, fresh connection", freshSwap},
		{"tunnel, kept connection", keptTunnel}, {"swap, kept connection", keptSwap}} {
		fmt.Printf("%-46s %9.2f %9.2f\n", l.name, ms(l.s.p50()), ms(l.s.p95()))
	}
	added := ms(freshSwap.p50()) - ms(freshTunnel.p50())
	fmt.Printf("  %-60s %8.3f  goal <= 2 ms: %s\n", "added p50 per request, swap - tunnel (fresh), ms", added, metOrMissed(added <= 2))
	addedKept := ms(keptSwap.p50()) - ms(keptTunnel.p50())
	fmt.Printf("  %-60s %8.3f  goal <= 2 ms: %s\n", "added p50 per request, swap - tunnel (kept), ms", addedKept, metOrMissed(addedKept <= 2))
	return nil
}

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

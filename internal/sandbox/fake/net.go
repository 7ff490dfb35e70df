package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// The fake's network, as the curl of its scripts sees it. A fake sandbox
// reaches only:
//   - the egress tunnel at sandbox.EgressTunnelAddr, on network egress of a
//     runtime that tunnels egress (TunnelEgress's proxy, as on Podman and
//     Kubernetes);
//   - an exec's own tunnel (ExecOptions.Proxy) at execTunnelAddr, which the
//     exec's proxy variables name, as the supervisor's tunnel command sets
//     them;
//   - the egress gateway, for real, on network egress of a runtime with an
//     egress network (as Docker's): the host's 127.0.0.2 stands for it.
//
// Nothing else: names do not resolve, its own loopback (127.0.0.1 in the
// fake) refuses, other addresses are unreachable.

// Egress is how a fake runtime's sandboxes on network egress reach the
// egress proxy: the shape of one of the engines.
type Egress int

const (
	// NoEgress: the runtime has no egress part (the default).
	NoEgress Egress = iota
	// EgressGateway, as Docker: sandboxes on network egress reach the
	// host, the network's gateway (Capabilities.EgressNetwork).
	EgressGateway
	// EgressTunnelled, as Podman and Kubernetes: sandboxes have no network;
	// one on network egress reaches the proxy through its tunnel, and
	// installs and volume fills go through an exec's tunnel
	// (Capabilities.EgressTunnel, TunnelInstalls and VolumeFiller).
	EgressTunnelled
)

var (
	// gatewayAddr is the fake egress network's gateway: an address of the
	// host's loopback, where a test's listener is reached for real, that is
	// not the fake sandbox's own loopback address.
	gatewayAddr = netip.MustParseAddr("127.0.0.2")
)

const (
	// gatewayInterface names the host's side of the fake egress network:
	// no real interface, so a fence put up on it fences nothing.
	gatewayInterface = "fake0"
	// execTunnelAddr is where an exec's own tunnel listens inside the
	// sandbox (the supervisor picks a free loopback port; the fake, this).
	execTunnelAddr = "127.0.0.1:40128"
)

// reach is what a fake process can connect to.
type reach struct {
	tunnels map[string]*served // by their address inside the sandbox
	gateway bool               // the egress gateway, for real
	routed  bool               // it has a default route (/proc/net/route)
}

// with is r plus a tunnel at addr.
func (r reach) with(addr string, s *served) reach {
	t := map[string]*served{addr: s}
	for a, o := range r.tunnels {
		if a != addr {
			t[a] = o
		}
	}
	r.tunnels = t
	return r
}

func (r reach) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if s := r.tunnels[addr]; s != nil {
		return s.dial(ctx)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ip, err := netip.ParseAddr(host)
	switch {
	case err != nil:
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	case r.gateway && ip == gatewayAddr:
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	case ip == netip.MustParseAddr("127.0.0.1") || ip == netip.IPv6Loopback():
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	default:
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}
	}
}

// routeTable is /proc/net/route: a default route only for a sandbox on a
// network that leads out of it.
func routeTable(routed bool) string {
	t := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	if routed {
		t += "eth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
			"eth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
	}
	return t
}

// served is a handler served over in-memory connections: a tunnel's far
// end. It is its server's net.Listener.
type served struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	srv   *http.Server
}

func serve(h http.Handler) *served {
	s := &served{conns: make(chan net.Conn), done: make(chan struct{})}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = s.srv.Serve(s) }()
	return s
}

func (s *served) dial(ctx context.Context) (net.Conn, error) {
	near, far := net.Pipe()
	select {
	case s.conns <- far:
		return near, nil
	case <-s.done:
	case <-ctx.Done():
	}
	near.Close()
	far.Close()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

func (s *served) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *served) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

func (s *served) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// shutdown stops serving: what a tunnel's end does.
func (s *served) shutdown() { _ = s.srv.Close() }

// curlCall is one curl command line.
type curlCall struct {
	silent, showErrors, fail, verbose, follow bool
	output, proxy, url                        string
	maxTime                                   time.Duration
}

// parseCurl reads curl [-sSfvL] [-o FILE] [-x URL] [-m SECONDS] URL (and
// the long forms of those options).
func parseCurl(args []string) (curlCall, error) {
	call := curlCall{maxTime: 5 * time.Minute}
	value := func(i *int, opt string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("curl: option %s: requires parameter", opt)
		}
		*i++
		return args[*i], nil
	}
	setValue := func(opt, v string) error {
		switch opt {
		case "o", "output":
			call.output = v
		case "x", "proxy":
			call.proxy = v
		case "m", "max-time":
			secs, err := time.ParseDuration(v + "s")
			if err != nil || secs <= 0 {
				return fmt.Errorf("curl: option --max-time: expected a proper numerical parameter")
			}
			call.maxTime = secs
		}
		return nil
	}
	flags := map[string]*bool{"s": &call.silent, "silent": &call.silent, "S": &call.showErrors, "show-error": &call.showErrors,
		"f": &call.fail, "fail": &call.fail, "v": &call.verbose, "verbose": &call.verbose, "L": &call.follow, "location": &call.follow}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "--"):
			name := a[2:]
			if b := flags[name]; b != nil {
				*b = true
				continue
			}
			if !slices.Contains([]string{"output", "proxy", "max-time"}, name) {
				return call, fmt.Errorf("curl: option %s: is unknown", a)
			}
			v, err := value(&i, a)
			if err == nil {
				err = setValue(name, v)
			}
			if err != nil {
				return call, err
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			for j, r := range a[1:] {
				opt := string(r)
				if b := flags[opt]; b != nil {
					*b = true
					continue
				}
				if !strings.ContainsRune("oxm", r) {
					return call, fmt.Errorf("curl: option -%s: is unknown", opt)
				}
				v := a[2+j:] // -ofile
				if v == "" {
					var err error
					if v, err = value(&i, "-"+opt); err != nil {
						return call, err
					}
				}
				if err := setValue(opt, v); err != nil {
					return call, err
				}
				break
			}
		case call.url != "":
			return call, errors.New("curl: the fake takes one URL")
		default:
			call.url = a
		}
	}
	if call.url == "" {
		return call, errors.New("curl: no URL specified")
	}
	return call, nil
}

// proxyFor is the proxy curl uses for u: -x, else http_proxy (curl reads
// only the lower-case spelling for http), https_proxy or HTTPS_PROXY,
// unless no_proxy names the host.
func (call curlCall) proxyFor(u *url.URL, getenv func(string) string) string {
	if call.proxy != "" {
		return call.proxy
	}
	for _, h := range strings.Split(getenv("no_proxy")+","+getenv("NO_PROXY"), ",") {
		if h = strings.TrimSpace(h); h != "" && h == u.Hostname() {
			return ""
		}
	}
	if u.Scheme == "https" {
		if p := getenv("https_proxy"); p != "" {
			return p
		}
		return getenv("HTTPS_PROXY")
	}
	return getenv("http_proxy")
}

// curlFailure is how curl reports err (its exit code and message; with
// -v, the connect line before it). host and port are what it connected to.
func curlFailure(err error, host, port string, proxied bool, elapsed time.Duration) (code int, verbose, msg string) {
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && proxied:
		return 5, "", "Could not resolve proxy: " + host
	case errors.As(err, &dnsErr):
		return 6, "", "Could not resolve host: " + host
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENETUNREACH):
		why := "Connection refused"
		if errors.Is(err, syscall.ENETUNREACH) {
			why = "Network is unreachable"
		}
		return 7, fmt.Sprintf("* connect to %s port %s failed: %s", host, port, why),
			fmt.Sprintf("Failed to connect to %s port %s after %d ms: Couldn't connect to server", host, port, elapsed.Milliseconds())
	case errors.Is(err, context.DeadlineExceeded), os.IsTimeout(err):
		return 28, "", fmt.Sprintf("Operation timed out after %d milliseconds with 0 bytes received", elapsed.Milliseconds())
	default:
		return 56, "", "Failure when receiving data from the peer"
	}
}

// curl runs one curl command line in c: it fetches the URL through what c
// can reach and writes the body to emit (or -o FILE).
func (c *container) curl(args []string, emit func(string), ignored map[int]bool) (int, error) {
	report := func(call curlCall, code int, verbose, msg string) int {
		if verbose != "" && call.verbose {
			c.write(sandbox.Stderr, verbose+"\n")
		}
		if !call.silent || call.showErrors {
			c.write(sandbox.Stderr, fmt.Sprintf("curl: (%d) %s\n", code, msg))
		}
		return code
	}
	call, err := parseCurl(args)
	if err != nil {
		c.write(sandbox.Stderr, err.Error()+"\n")
		return 2, nil
	}
	u, err := url.Parse(call.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return report(call, 3, "", "URL using bad/illegal format or missing URL"), nil
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	proxy := call.proxyFor(u, c.getenv)
	var proxyURL *url.URL
	if proxy != "" {
		if !strings.Contains(proxy, "://") {
			proxy = "http://" + proxy
		}
		if proxyURL, err = url.Parse(proxy); err != nil || proxyURL.Host == "" {
			return report(call, 5, "", "Could not resolve proxy: "+proxy), nil
		}
		host, port = proxyURL.Hostname(), proxyURL.Port()
		if port == "" {
			port = "1080"
		}
	}
	client := &http.Client{
		Timeout: call.maxTime,
		Transport: &http.Transport{
			Proxy:             func(*http.Request) (*url.URL, error) { return proxyURL, nil },
			DialContext:       c.reach.dial,
			DisableKeepAlives: true,
		},
	}
	if !call.follow {
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		status int
		body   string
		err    error
	}
	var res result
	done := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(done)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, call.url, nil)
		if err != nil {
			res.err = err
			return
		}
		req.Header.Set("User-Agent", "curl/7.88.1")
		resp, err := client.Do(req)
		if err != nil {
			res.err = err
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		res.status, res.body, res.err = resp.StatusCode, string(b), err
	}()
	if err := c.block(done, ignored); err != nil {
		cancel()
		<-done
		return 0, err
	}
	if res.err != nil {
		code, verbose, msg := curlFailure(res.err, host, port, proxyURL != nil, time.Since(began))
		return report(call, code, verbose, msg), nil
	}
	if call.fail && res.status >= 400 {
		return report(call, 22, "", fmt.Sprintf("The requested URL returned error: %d", res.status)), nil
	}
	if call.output != "" && call.output != "-" {
		if err := c.fs.write(call.output, res.body, false); err != nil {
			return report(call, 23, "", "Failure writing output to destination"), nil
		}
		return 0, nil
	}
	emit(res.body)
	return 0, nil
}

// reachOf is what a sandbox on network reaches.
func (r *Runtime) reachOf(network string) reach {
	switch {
	case network == "bridge":
		return reach{routed: true}
	case network != sandbox.NetworkEgress:
		return reach{}
	case r.egress == EgressGateway:
		return reach{gateway: true, routed: true}
	case r.egress == EgressTunnelled && r.egressTunnel.Load() != nil:
		return reach{tunnels: map[string]*served{sandbox.EgressTunnelAddr: r.egressTunnel.Load()}}
	}
	return reach{}
}

// EgressGateway is the fake egress network's: the host's loopback, on an
// interface that does not exist (sandbox.EgressRuntime).
func (r *Runtime) EgressGateway(ctx context.Context) (netip.Addr, string, error) {
	if r.isDown() {
		return netip.Addr{}, "", engineDown()
	}
	return gatewayAddr, gatewayInterface, nil
}

// TunnelEgress serves proxy to every sandbox on network egress, at the
// tunnel's address inside it (sandbox.EgressTunneler).
func (r *Runtime) TunnelEgress(proxy http.Handler) string {
	if old := r.egressTunnel.Swap(serve(proxy)); old != nil {
		old.shutdown()
	}
	return sandbox.EgressTunnelAddr
}

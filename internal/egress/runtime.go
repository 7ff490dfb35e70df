package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/secret"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// Runtime is a sandbox.Runtime in front of the job runtime: a spec on
// network sandbox.NetworkEgress, or one that names secrets, gets a grant of
// its own for the job's life (see Through). Its container is on the egress
// network, whose only peer is the proxy.
type Runtime struct {
	sandbox.Runtime
	proxy *Proxy
	addr  string // host:port of the proxy on the egress network's gateway
	cfg   Config
	srv   *http.Server
	// unfence takes the proxy's port out of the host's fence.
	unfence func()
}

// Config is what the proxy allows and whom it tells.
type Config struct {
	Allow List        // the policy's egress.allow: every grant lies within it
	Hosts Hosts       // egress.hosts: names pinned to addresses
	Audit func(Event) // every decision
	// Secrets are the policy's secrets by name; CA is required with them.
	Secrets map[string]Secret
	CA      *CA
	RootCAs *x509.CertPool // verifies secrets' hosts; nil = the host's trust store
}

// Secret is a policy secret as the proxy uses it.
type Secret struct {
	Hosts   List                   // within Config.Allow
	Tenants []string               // who may use it; empty = every tenant
	Read    func() ([]byte, error) // the value, now
}

func (c Config) proxy() *Proxy {
	return &Proxy{Audit: c.Audit, Resolver: c.Hosts.resolver(net.DefaultResolver), CA: c.CA, RootCAs: c.RootCAs}
}

// Start makes the egress network (through rt), serves the proxy on its
// gateway and returns the runtime that hands grants to jobs.
func Start(ctx context.Context, next sandbox.Runtime, rt sandbox.EgressRuntime, cfg Config) (*Runtime, error) {
	gw, bridge, err := rt.EgressGateway(ctx)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(gw, 0).String())
	if err != nil {
		return nil, err
	}
	unfence, err := fence(bridge, ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		ln.Close()
		return nil, err
	}
	p := cfg.proxy()
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return &Runtime{Runtime: next, proxy: p, addr: ln.Addr().String(), cfg: cfg, srv: srv, unfence: unfence}, nil
}

// StartTunneled is Start for a runtime whose sandboxes have no network
// (sandbox.EgressTunneler): the proxy has no listener, the runtime serves
// it over each egress sandbox's tunnel, and the grants' environment names
// the tunnel's address inside the sandbox. Grants, pins and audit are
// Start's.
func StartTunneled(next sandbox.Runtime, t sandbox.EgressTunneler, cfg Config) *Runtime {
	p := cfg.proxy()
	return &Runtime{Runtime: next, proxy: p, addr: t.TunnelEgress(p), cfg: cfg}
}

// Addr is where the proxy listens (for a tunneled runtime: the tunnel,
// inside the sandbox).
func (r *Runtime) Addr() string { return r.addr }

// Start runs spec through its grant (see Through) when it needs one.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if (spec.Network != sandbox.NetworkEgress && len(spec.Secrets) == 0) || spec.Workspace != "" {
		return r.Runtime.Start(ctx, spec, out)
	}
	return r.Through(ctx, spec, out, r.Runtime.Start)
}

// Through starts spec with start, holding a grant of the proxy for the
// job's life. The grant allows the spec's own list (Egress; nil = the
// policy's) when the spec is on network egress, and each secret's hosts:
// a job with secrets is on the egress path, reaching only the union. Each
// secret (policy's, and the tenant's to use) is in the job's environment
// as its placeholder (spec.Secrets' own, or a fresh one); the job trusts
// the proxy's CA through a bundle of the image's roots and it; and its
// output shows the placeholder wherever the value was printed.
func (r *Runtime) Through(ctx context.Context, spec sandbox.Spec, out sandbox.Output, start sandbox.StartFunc) (sandbox.Handle, error) {
	var allow List
	if spec.Network == sandbox.NetworkEgress {
		allow = r.cfg.Allow
		if spec.Egress != nil {
			var err error
			if allow, err = Narrow(r.cfg.Allow, spec.Egress); err != nil {
				return nil, fmt.Errorf("egress: %w", err)
			}
		}
	}
	g := Grant{Tenant: tenant.Owner(ctx), Job: spec.JobID}
	var redact *secret.Redactor
	env := []string{}
	if len(spec.Secrets) > 0 {
		if r.cfg.CA == nil {
			return nil, errors.New("secrets: the egress proxy has no CA (the policy names no secrets)")
		}
		redact = secret.NewRedactor(out)
		out = redact
		g.OnValue = redact.Add
		uses := make([]sandbox.SecretUse, len(spec.Secrets))
		for i, u := range spec.Secrets {
			s, ok := r.cfg.Secrets[u.Name]
			switch {
			case !ok:
				return nil, fmt.Errorf("secrets: %q is not a secret of the policy (policy key secrets)", u.Name)
			case len(s.Tenants) > 0 && !slices.Contains(s.Tenants, g.Tenant):
				return nil, fmt.Errorf("secrets: tenant %q may not use secret %s (policy key secrets.%s.tenants)", g.Tenant, u.Name, u.Name)
			}
			if u.Placeholder == "" {
				u.Placeholder = secret.NewPlaceholder()
			}
			uses[i] = u
			g.Secrets = append(g.Secrets, SecretGrant{Name: u.Name, Placeholder: u.Placeholder, Hosts: s.Hosts, Value: s.Read})
			allow = append(allow, s.Hosts...)
			if v, err := s.Read(); err == nil {
				redact.Add(v, u.Placeholder) // the value of now; one the proxy reads later is added then
			}
		}
		env = append(env, secret.Env(uses)...)
		env = append(env, CAEnv()...)
		spec.Files = append(append([]proto.File(nil), spec.Files...), CAFiles(r.cfg.CA.CertPEM())...)
	}
	g.Allow = allow
	token, revoke := r.proxy.Add(g)
	spec.Network = sandbox.NetworkEgress
	spec.Env = append(append(append([]string(nil), spec.Env...), env...), ProxyEnv(ProxyURL(token, r.addr))...)
	h, err := start(ctx, spec, out)
	if err != nil {
		revoke()
		return nil, err
	}
	if redact != nil {
		h = &flushing{Handle: h, redact: redact, done: make(chan struct{})}
		go h.(*flushing).wait()
	}
	go func() {
		<-h.Done()
		revoke()
	}()
	return h, nil
}

// flushing is a job whose output is redacted: it is done once the
// redactor has passed on what it held back.
type flushing struct {
	sandbox.Handle
	redact *secret.Redactor
	done   chan struct{}
}

func (f *flushing) wait() {
	<-f.Handle.Done()
	f.redact.Flush()
	close(f.done)
}

func (f *flushing) Done() <-chan struct{} { return f.done }

// Grant gives job (a name for the audit log) the allowlist until revoke,
// and returns the environment that points it at the proxy.
func (r *Runtime) Grant(ctx context.Context, job string) (env []string, revoke func()) {
	token, revoke := r.proxy.Add(Grant{Tenant: tenant.Owner(ctx), Job: job, Allow: r.cfg.Allow})
	return ProxyEnv(ProxyURL(token, r.addr)), revoke
}

// Where a job with secrets finds the proxy's CA: the certificate alone,
// and a bundle of the image's roots and it.
const (
	CAFile     = proto.FilesDir + "egress-ca.pem"
	CABundle   = proto.FilesDir + "ca-bundle.pem"
	imageRoots = "/etc/ssl/certs/ca-certificates.crt"
)

// CAFiles are the files that make a sandbox trust the proxy's CA.
func CAFiles(caPEM []byte) []proto.File {
	return []proto.File{{Path: CAFile, Content: caPEM}, {Path: CABundle, Base: imageRoots, Content: caPEM}}
}

// CAEnv points the common clients at CAFiles: OpenSSL and Go
// (SSL_CERT_FILE), curl, git, Python's requests and pip take the bundle;
// Node adds the CA to its own roots.
func CAEnv() []string {
	return []string{"SSL_CERT_FILE=" + CABundle, "CURL_CA_BUNDLE=" + CABundle, "GIT_SSL_CAINFO=" + CABundle,
		"REQUESTS_CA_BUNDLE=" + CABundle, "PIP_CERT=" + CABundle, "NODE_EXTRA_CA_CERTS=" + CAFile}
}

// ProxyEnv is the environment that points HTTP clients at a proxy URL.
func ProxyEnv(proxyURL string) []string {
	return []string{
		"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "https_proxy=" + proxyURL,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
	}
}

// Close stops the proxy, then closes the runtime behind.
func (r *Runtime) Close() error {
	if r.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.srv.Shutdown(ctx)
		r.unfence()
	}
	return r.Runtime.Close()
}

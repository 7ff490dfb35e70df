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
	// GrantsDir keeps running jobs' grants for a server that adopts them
	// after a restart ("" = not kept: adopted jobs lose their grants).
	GrantsDir string
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
	// The port the kept grants' jobs have in HTTP_PROXY, when it is free.
	ln, err := net.Listen("tcp", net.JoinHostPort(gw.String(), keptPort(cfg.GrantsDir)))
	if err != nil {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(gw, 0).String())
	}
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
	r := &Runtime{Runtime: next, proxy: p, addr: ln.Addr().String(), cfg: cfg, srv: srv, unfence: unfence}
	r.prune(ctx)
	return r, nil
}

// StartTunneled is Start for a runtime whose sandboxes have no network
// (sandbox.EgressTunneler): the proxy has no listener, the runtime serves
// it over each egress sandbox's tunnel, and the grants' environment names
// the tunnel's address inside the sandbox. Grants, pins and audit are
// Start's.
func StartTunneled(next sandbox.Runtime, t sandbox.EgressTunneler, cfg Config) *Runtime {
	p := cfg.proxy()
	r := &Runtime{Runtime: next, proxy: p, addr: t.TunnelEgress(p), cfg: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.prune(ctx)
	return r
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
	var own []string // the job's own hosts, as the policy writes them
	if spec.Network == sandbox.NetworkEgress {
		allow := r.cfg.Allow
		if spec.Egress != nil {
			var err error
			if allow, err = Narrow(r.cfg.Allow, spec.Egress); err != nil {
				return nil, fmt.Errorf("egress: %w", err)
			}
		}
		own = allow.Strings()
	}
	uses := slices.Clone(spec.Secrets)
	for i := range uses {
		if uses[i].Placeholder == "" {
			uses[i].Placeholder = secret.NewPlaceholder()
		}
	}
	who := tenant.Owner(ctx)
	g, redact, err := r.grant(who, spec.JobID, own, uses, out)
	if err != nil {
		return nil, err
	}
	env := []string{}
	if redact != nil {
		out = redact
		env = append(append(env, secret.Env(uses)...), CAEnv()...)
		spec.Files = append(slices.Clone(spec.Files), CAFiles(r.cfg.CA.CertPEM())...)
	}
	token, revoke := r.proxy.Add(g)
	spec.Network = sandbox.NetworkEgress
	spec.Env = append(append(append([]string(nil), spec.Env...), env...), ProxyEnv(ProxyURL(token, r.addr))...)
	h, err := start(ctx, spec, out)
	if err != nil {
		revoke()
		return nil, err
	}
	forget := r.keep(h.ContainerID(), keptGrant{Token: token, Tenant: who, Job: spec.JobID, Allow: own, Secrets: uses, Addr: r.addr})
	return r.hold(h, redact, func() { revoke(); forget() }), nil
}

// grant is a job's grant: its own hosts (within the policy's list of now)
// and each secret's, the secret's placeholder swapped for its value there.
// With secrets, the redactor in front of out learns their values.
func (r *Runtime) grant(who, job string, own []string, uses []sandbox.SecretUse, out sandbox.Output) (Grant, *secret.Redactor, error) {
	g := Grant{Tenant: who, Job: job}
	if len(own) > 0 {
		var err error
		if g.Allow, err = Narrow(r.cfg.Allow, own); err != nil {
			return Grant{}, nil, fmt.Errorf("egress: %w", err)
		}
	}
	if len(uses) == 0 {
		return g, nil, nil
	}
	if r.cfg.CA == nil {
		return Grant{}, nil, errors.New("secrets: the egress proxy has no CA (the policy names no secrets)")
	}
	redact := secret.NewRedactor(out)
	g.OnValue = redact.Add
	for _, u := range uses {
		s, ok := r.cfg.Secrets[u.Name]
		switch {
		case !ok:
			return Grant{}, nil, fmt.Errorf("secrets: %q is not a secret of the policy (policy key secrets)", u.Name)
		case len(s.Tenants) > 0 && !slices.Contains(s.Tenants, who):
			return Grant{}, nil, fmt.Errorf("secrets: tenant %q may not use secret %s (policy key secrets.%s.tenants)", who, u.Name, u.Name)
		}
		g.Secrets = append(g.Secrets, SecretGrant{Name: u.Name, Placeholder: u.Placeholder, Hosts: s.Hosts, Value: s.Read})
		g.Allow = append(g.Allow, s.Hosts...)
		if v, err := s.Read(); err == nil {
			redact.Add(v, u.Placeholder) // the value of now; one the proxy reads later is added then
		}
	}
	return g, redact, nil
}

// hold ends a job's grant (done) when the job ends; with a redactor, the
// job is done once it has passed on what it held back.
func (r *Runtime) hold(h sandbox.Handle, redact *secret.Redactor, done func()) sandbox.Handle {
	if redact != nil {
		f := &flushing{Handle: h, redact: redact, done: make(chan struct{})}
		go f.wait()
		h = f
	}
	go func() {
		<-h.Done()
		done()
	}()
	return h
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

package docker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"
)

// EnvEngineInsecure, set to 1, accepts a TCP engine reached without TLS
// verification (plain HTTP, or TLS that does not check the engine's
// certificate). Without it such an endpoint is refused (THREATS 51): whoever
// can reach or impersonate it runs containers with the server's rights.
const EnvEngineInsecure = "SANDBOXER_ENGINE_INSECURE"

// EnvSSHConfig names an ssh_config file passed to ssh (-F) for ssh:// engines:
// the identity, known hosts and options to use. Unset: ssh's own defaults
// (~/.ssh/config of the user the server runs as).
const EnvSSHConfig = "SANDBOXER_SSH_CONFIG"

// Endpoint is where the engine is and how it is reached, for doctor and logs.
type Endpoint struct {
	Host    string // as configured: unix:///var/run/docker.sock, tcp://h:2376, ssh://u@h
	Context string // the Docker CLI context it came from; "" for DOCKER_HOST or the default
	// Transport is "unix" (a local socket), "tcp+tls" (verified TLS),
	// "tcp" (no TLS verification, accepted by SANDBOXER_ENGINE_INSECURE=1)
	// or "ssh" (ssh to the host, then `docker system dial-stdio` there).
	Transport string
	Remote    bool // reached over the network: the engine may be on another host
}

// String is the endpoint as doctor names it.
func (e Endpoint) String() string {
	s := e.Host
	if e.Context != "" {
		s += " (context " + e.Context + ")"
	}
	if e.Remote {
		s += ", remote over " + e.Transport
	}
	return s
}

// resolveEndpoint finds the engine as the Docker CLI does (DOCKER_HOST and its
// TLS variables, else DOCKER_CONTEXT or the CLI's current context, else the
// local socket) and returns the client options that reach it.
func resolveEndpoint(getenv func(string) string) (Endpoint, []client.Opt, error) {
	name, err := contextName(getenv)
	if err != nil {
		return Endpoint{}, nil, err
	}
	var (
		ep     Endpoint
		tlsCfg *tls.Config
		what   string // names the setting in messages
	)
	if name != "" {
		c, err := loadContext(configDir(getenv), name)
		if err != nil {
			return Endpoint{}, nil, err
		}
		ep = Endpoint{Host: c.Host, Context: name}
		what = "docker context " + name
		if c.TLSDir != "" || c.SkipTLSVerify {
			if tlsCfg, err = tlsFrom(c.TLSDir, !c.SkipTLSVerify); err != nil {
				return Endpoint{}, nil, fmt.Errorf("%s: %w", what, err)
			}
		}
	} else {
		ep = Endpoint{Host: getenv("DOCKER_HOST")}
		if ep.Host == "" {
			ep.Host = client.DefaultDockerHost
		}
		what = "DOCKER_HOST " + ep.Host
		verify := getenv("DOCKER_TLS_VERIFY") != ""
		dir := getenv("DOCKER_CERT_PATH")
		if dir == "" && verify {
			dir = configDir(getenv) // where the CLI looks then
		}
		if dir != "" || verify || getenv("DOCKER_TLS") != "" {
			if tlsCfg, err = tlsFrom(dir, verify); err != nil {
				return Endpoint{}, nil, fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	u, err := url.Parse(ep.Host)
	if err != nil || u.Scheme == "" {
		return Endpoint{}, nil, fmt.Errorf("%s: not an engine address (want unix://, tcp:// or ssh://)", what)
	}
	opts := []client.Opt{client.WithAPIVersionFromEnv()}
	switch u.Scheme {
	case "unix", "npipe":
		ep.Transport = "unix"
		return ep, append(opts, client.WithHost(ep.Host)), nil
	case "ssh":
		dial, err := sshDialer(u, getenv(EnvSSHConfig))
		if err != nil {
			return Endpoint{}, nil, fmt.Errorf("%s: %w", what, err)
		}
		ep.Transport, ep.Remote = "ssh", true
		// The host only names the HTTP requests; every connection is an ssh process.
		return ep, append(opts, client.WithHost("http://docker.example.com"), client.WithDialContext(dial)), nil
	case "tcp", "http", "https":
		ep.Remote = true
		ep.Transport = "tcp+tls"
		if tlsCfg == nil || tlsCfg.InsecureSkipVerify {
			ep.Transport = "tcp"
			if !insecureAllowed(getenv) {
				return Endpoint{}, nil, insecureRefusal(what, tlsCfg != nil)
			}
		}
		if tlsCfg != nil {
			// Set before the host, which configures the transport this client carries.
			opts = append(opts, client.WithHTTPClient(&http.Client{
				Transport:     &http.Transport{TLSClientConfig: tlsCfg},
				CheckRedirect: client.CheckRedirect,
			}))
		}
		return ep, append(opts, client.WithHost(ep.Host)), nil
	}
	return Endpoint{}, nil, fmt.Errorf("%s: scheme %q is not supported (want unix://, tcp:// or ssh://)", what, u.Scheme)
}

func insecureAllowed(getenv func(string) string) bool {
	v := strings.ToLower(getenv(EnvEngineInsecure))
	return v == "1" || v == "true" || v == "yes"
}

func insecureRefusal(what string, tlsNoVerify bool) error {
	how := "without TLS"
	if tlsNoVerify {
		how = "with TLS that does not verify the engine's certificate"
	}
	return fmt.Errorf("%s is reached over TCP %s, so whoever can reach or impersonate it runs containers as this server: "+
		"set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH to a directory with ca.pem, cert.pem and key.pem "+
		"(or a context with TLS material), use ssh://, or set %s=1 to accept the risk", what, how, EnvEngineInsecure)
}

// tlsFrom is the client's TLS configuration from dir's ca.pem, cert.pem and
// key.pem. With verify, the engine's certificate must chain to ca.pem (only)
// or, without one, to the system's roots. Messages name files, never their
// contents.
func tlsFrom(dir string, verify bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: !verify} //nolint:gosec // refused above unless the operator says so
	if dir == "" {
		return cfg, nil
	}
	ca := filepath.Join(dir, "ca.pem")
	if pem, err := os.ReadFile(ca); err == nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", ca)
		}
		cfg.RootCAs = pool
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", ca, err)
	}
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_, certErr := os.Stat(cert)
	_, keyErr := os.Stat(key)
	switch {
	case certErr == nil && keyErr == nil:
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("client certificate %s with key %s: %w", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case certErr == nil || keyErr == nil:
		return nil, fmt.Errorf("%s has only one of cert.pem and key.pem: a client certificate needs both", dir)
	}
	if verify && cfg.RootCAs == nil && len(cfg.Certificates) == 0 {
		return nil, fmt.Errorf("%s has none of ca.pem, cert.pem, key.pem", dir)
	}
	return cfg, nil
}

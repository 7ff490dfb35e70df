// Package config assembles the server's configuration: flags override
// SANDBOXER_* environment variables, which override the policy file, which
// overrides the built-in defaults. Validate says loudly what is wrong.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxer/sandboxer/internal/backend"
	"github.com/sandboxer/sandboxer/internal/policy"
)

// Environment variables read here (the policy reads its own SANDBOXER_* ones).
const (
	EnvStateDir = "SANDBOXER_STATE_DIR"
	EnvPolicy   = "SANDBOXER_POLICY"
	EnvToolsets = "SANDBOXER_TOOLSETS"
	EnvLogLevel = "SANDBOXER_LOG_LEVEL"
	EnvMetrics  = "SANDBOXER_METRICS_ADDR"
	EnvTokens   = "SANDBOXER_TOKEN_FILE"
	EnvHTTP     = "SANDBOXER_HTTP_ADDR"
	EnvE2B      = "SANDBOXER_E2B_ADDR"
)

// Config is everything the server needs to start.
type Config struct {
	StateDir   string
	PolicyPath string // "" = built-in defaults
	Toolsets   []string
	LogLevel   string
	Policy     *policy.Policy
	// MetricsAddr is where /metrics is served ("" = not served); a bare
	// ":PORT" listens on loopback only. TokenFile guards it (internal/auth).
	MetricsAddr string
	TokenFile   string
	// HTTPAddr, when set, serves MCP over Streamable HTTP at /mcp there
	// instead of stdio. HTTPRate is each tenant's requests a second (0 =
	// unlimited); TLSCert and TLSKey make it HTTPS.
	HTTPAddr string
	HTTPRate float64
	// E2BAddr, when set, serves E2B's API there (internal/e2b): the e2b
	// SDK's E2B_API_URL and E2B_SANDBOX_URL; TLS as --http's.
	E2BAddr         string
	TLSCert, TLSKey string
	// BuildImages builds the sandbox images the engine lacks in the
	// background once the server serves (backend docker): a first start
	// serves before its images are made.
	BuildImages bool
}

// DefaultStateDir is $XDG_STATE_HOME/sandboxer, else ~/.local/state/sandboxer.
func DefaultStateDir(getenv func(string) string) string {
	if x := getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "sandboxer")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return filepath.Join(os.TempDir(), "sandboxer-state")
	}
	return filepath.Join(home, ".local", "state", "sandboxer")
}

// Flags registers the serve flags on fs; Load applies them after fs.Parse.
type Flags struct {
	stateDir, policyPath, toolsets, logLevel *string
	metricsAddr, tokenFile                   *string
	httpAddr, tlsCert, tlsKey, e2bAddr       *string
	httpRate                                 *float64
	allowBlockEdits, buildImages             *bool
}

func RegisterFlags(fs *flag.FlagSet) *Flags {
	return &Flags{
		stateDir:    fs.String("state-dir", "", "directory for the job database and job output (env "+EnvStateDir+"; default $XDG_STATE_HOME/sandboxer or ~/.local/state/sandboxer)"),
		policyPath:  fs.String("policy", "", "policy YAML file (env "+EnvPolicy+"; default: built-in defaults, the same as policies/default.yaml)"),
		toolsets:    fs.String("toolsets", "", "comma-separated toolsets (exec, jobs, info, workspaces, admin, templates) or presets (all, core, workspace, minimal) to enable (env "+EnvToolsets+"; default every toolset but templates)"),
		logLevel:    fs.String("log-level", "", "debug, info, warn or error (env "+EnvLogLevel+"; default info)"),
		metricsAddr: fs.String("metrics-addr", "", "serve Prometheus /metrics on this address, e.g. :9464 (loopback) or 0.0.0.0:9464; needs --token-file (env "+EnvMetrics+"; default: not served)"),
		httpAddr:    fs.String("http", "", "serve MCP over Streamable HTTP at /mcp on this address (e.g. 127.0.0.1:8080) instead of stdio; beyond loopback it needs --token-file (env "+EnvHTTP+")"),
		e2bAddr:     fs.String("e2b", "", "serve E2B's API (control plane and envd, for the e2b SDK: E2B_API_URL and E2B_SANDBOX_URL) on this address, e.g. 127.0.0.1:3000; beyond loopback it needs --token-file (its tokens are the API keys) (env "+EnvE2B+")"),
		httpRate:    fs.Float64("http-rate", 50, "requests a second one tenant may make over HTTP, bursts of twice that; past it, 429 with Retry-After (0 = unlimited)"),
		tlsCert:     fs.String("tls-cert", "", "certificate file (PEM) for HTTPS on --http"),
		tlsKey:      fs.String("tls-key", "", "private key file (PEM) for --tls-cert"),
		tokenFile:   fs.String("token-file", "", "file of client tokens, one 'NAME TOKEN [ROLE]' a line (TOKEN literal or sha256:HEX; ROLE user, readonly, metrics or admin), mode 600 (env "+EnvTokens+")"),
		allowBlockEdits: fs.Bool("allow-block-edits", false, "let agents add and remove their own block-list entries (policy block.agent_edits; env "+
			policy.EnvAllowBlockEdits+"); also switches the admin toolset on"),
		buildImages: fs.Bool("build-images", false, "build the sandbox images the engine lacks in the background after starting (backend docker; make run sets it): "+
			"until an image is built, a job on it fails saying so, and list_languages shows it as building"),
	}
}

// Load resolves flags > env > policy file > defaults.
func (f *Flags) Load(getenv func(string) string) (*Config, error) {
	pick := func(flagVal, env, def string) string {
		if flagVal != "" {
			return flagVal
		}
		if v := getenv(env); v != "" {
			return v
		}
		return def
	}
	c := &Config{
		StateDir:   pick(*f.stateDir, EnvStateDir, DefaultStateDir(getenv)),
		PolicyPath: pick(*f.policyPath, EnvPolicy, ""),
		LogLevel:   pick(*f.logLevel, EnvLogLevel, "info"),
	}
	if f.metricsAddr != nil {
		c.MetricsAddr, c.TokenFile = pick(*f.metricsAddr, EnvMetrics, ""), pick(*f.tokenFile, EnvTokens, "")
	}
	if f.httpAddr != nil {
		c.HTTPAddr, c.HTTPRate, c.TLSCert, c.TLSKey = pick(*f.httpAddr, EnvHTTP, ""), *f.httpRate, *f.tlsCert, *f.tlsKey
		c.E2BAddr = pick(*f.e2bAddr, EnvE2B, "")
	}
	if ts := pick(*f.toolsets, EnvToolsets, ""); ts != "" {
		for _, t := range strings.Split(ts, ",") {
			if t = strings.TrimSpace(t); t != "" {
				c.Toolsets = append(c.Toolsets, t)
			}
		}
	}
	var err error
	if c.PolicyPath != "" {
		c.Policy, err = policy.Load(c.PolicyPath)
		if err != nil {
			return nil, err
		}
	} else {
		c.Policy = policy.Default()
	}
	if c.TokenFile == "" {
		c.TokenFile = c.Policy.HTTP.TokenFile
	}
	if err := c.Policy.ApplyEnv(getenv); err != nil {
		return nil, err
	}
	if f.allowBlockEdits != nil && *f.allowBlockEdits {
		c.Policy.Block.AgentEdits = true
	}
	c.BuildImages = f.buildImages != nil && *f.buildImages
	return c, c.Validate()
}

// Validate checks the whole configuration and names every problem.
func (c *Config) Validate() error {
	var errs []error
	if c.StateDir == "" {
		errs = append(errs, errors.New("state dir is empty"))
	} else if abs, err := filepath.Abs(c.StateDir); err != nil {
		errs = append(errs, fmt.Errorf("state dir %q: %v", c.StateDir, err))
	} else {
		c.StateDir = abs
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	if c.TLSCert != "" && c.HTTPAddr == "" && c.E2BAddr == "" {
		errs = append(errs, errors.New("--tls-cert serves --http or --e2b: give one of them too"))
	}
	if c.HTTPRate < 0 {
		errs = append(errs, errors.New("--http-rate must be >= 0"))
	}
	if b, ok := backend.Lookup(c.Policy.Backend); ok && c.BuildImages && !b.Images {
		errs = append(errs, fmt.Errorf("--build-images builds through the Docker Engine API: give it with backend docker or podman, not %s (whose images are loaded by its own script)", c.Policy.Backend))
	}
	if c.MetricsAddr != "" && c.TokenFile == "" {
		errs = append(errs, errors.New("--metrics-addr needs --token-file: /metrics is served only to tokens of role metrics or admin"))
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := backend.Validate(c.Policy); err != nil {
		errs = append(errs, err)
	}
	c.Policy.ServerPaths = serverPaths(c.StateDir, getenvOS("DOCKER_HOST"))
	for i, m := range c.Policy.Mounts {
		// (The policy's own check named what it finds without these paths.)
		if problem := policy.MountSourceProblem(m.Source, c.Policy.ServerPaths); problem != "" && policy.MountSourceProblem(m.Source, nil) == "" {
			errs = append(errs, fmt.Errorf("policy: mounts[%d].source: %s", i, problem))
		}
	}
	return errors.Join(errs...)
}

// serverPaths are the server's own places no granted mount may reach: its
// state directory, its binary, and its engine's socket (a unix DOCKER_HOST)
// with the directory holding it.
func serverPaths(stateDir, dockerHost string) []string {
	paths := []string{stateDir}
	if exe, err := os.Executable(); err == nil {
		paths = append(paths, exe)
	}
	if sock, ok := strings.CutPrefix(dockerHost, "unix://"); ok && filepath.IsAbs(sock) {
		paths = append(paths, sock, filepath.Dir(sock))
	}
	return paths
}

// getenvOS is os.Getenv (a name the tests can look for).
var getenvOS = os.Getenv

// Instance names this server's containers: one per state directory, so two
// servers with different state never adopt or remove each other's sandboxes.
func (c *Config) Instance() string {
	sum := sha256.Sum256([]byte(c.StateDir))
	return hex.EncodeToString(sum[:6])
}

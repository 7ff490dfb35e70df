package docker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Docker CLI contexts, resolved as the CLI resolves them (docker/cli's
// cli/command and cli/context/store), reimplemented here because only this
// small part is needed: DOCKER_HOST wins, then DOCKER_CONTEXT, then the
// config file's currentContext; "default" means the environment.

// defaultContext is the CLI's name for "no context: use the environment".
const defaultContext = "default"

// dockerContext is one context's Docker endpoint.
type dockerContext struct {
	Name          string
	Host          string
	SkipTLSVerify bool
	// TLSDir holds the context's ca.pem, cert.pem and key.pem; "" when it has none.
	TLSDir string
}

// configDir is the Docker CLI's configuration directory: DOCKER_CONFIG, else ~/.docker.
func configDir(getenv func(string) string) string {
	if d := getenv("DOCKER_CONFIG"); d != "" {
		return d
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".docker")
}

// contextName is the context the CLI would use, or "" for the default.
func contextName(getenv func(string) string) (string, error) {
	if getenv("DOCKER_HOST") != "" {
		return "", nil
	}
	name := getenv("DOCKER_CONTEXT")
	if name == "" {
		var err error
		if name, err = currentContext(configDir(getenv)); err != nil {
			return "", err
		}
	}
	if name == defaultContext {
		return "", nil
	}
	return name, nil
}

// currentContext reads currentContext from the CLI's config.json (absent file: none).
func currentContext(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("docker config: %w", err)
	}
	var cfg struct {
		CurrentContext string `json:"currentContext"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("docker config %s: %w", filepath.Join(dir, "config.json"), err)
	}
	return cfg.CurrentContext, nil
}

// contextID is the directory name the CLI's context store gives a context.
func contextID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

// loadContext reads a context's Docker endpoint from the CLI's context store.
func loadContext(dir, name string) (dockerContext, error) {
	id := contextID(name)
	metaPath := filepath.Join(dir, "contexts", "meta", id, "meta.json")
	data, err := os.ReadFile(metaPath)
	if errors.Is(err, os.ErrNotExist) {
		return dockerContext{}, fmt.Errorf("docker context %q does not exist (no %s): create it with `docker context create`, or unset DOCKER_CONTEXT / `docker context use default`", name, metaPath)
	}
	if err != nil {
		return dockerContext{}, fmt.Errorf("docker context %q: %w", name, err)
	}
	var meta struct {
		Name      string
		Endpoints map[string]struct {
			Host          string
			SkipTLSVerify bool
		}
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return dockerContext{}, fmt.Errorf("docker context %q: %s: %w", name, metaPath, err)
	}
	ep, ok := meta.Endpoints["docker"]
	if !ok || ep.Host == "" {
		return dockerContext{}, fmt.Errorf("docker context %q has no docker endpoint host (%s)", name, metaPath)
	}
	c := dockerContext{Name: name, Host: ep.Host, SkipTLSVerify: ep.SkipTLSVerify}
	tlsDir := filepath.Join(dir, "contexts", "tls", id, "docker")
	if _, err := os.Stat(filepath.Join(tlsDir, "ca.pem")); err == nil {
		c.TLSDir = tlsDir
	} else if _, err := os.Stat(filepath.Join(tlsDir, "cert.pem")); err == nil {
		c.TLSDir = tlsDir
	}
	return c, nil
}

package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func load(t *testing.T, args []string, env map[string]string) (*Config, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f := RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.Load(func(k string) string { return env[k] })
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("jobs:\n  max_concurrent: 3\nlimits:\n  timeout_s:\n    default: 20\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Defaults only.
	c, err := load(t, nil, map[string]string{"XDG_STATE_HOME": dir})
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != filepath.Join(dir, "sandboxer") || c.Policy.Jobs.MaxConcurrent != 4 || c.LogLevel != "info" {
		t.Fatalf("defaults: %+v", c)
	}
	// The file overrides defaults; env overrides the file; flags override env.
	c, err = load(t, []string{"--policy", pol}, map[string]string{"SANDBOXER_JOB_TIMEOUT": "25"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy.Jobs.MaxConcurrent != 3 || c.Policy.Limits.TimeoutS.Default != 25 {
		t.Fatalf("file+env: max_concurrent %d timeout %d", c.Policy.Jobs.MaxConcurrent, c.Policy.Limits.TimeoutS.Default)
	}
	c, err = load(t, []string{"--state-dir", filepath.Join(dir, "flag"), "--toolsets", "exec, jobs"},
		map[string]string{EnvStateDir: filepath.Join(dir, "env"), EnvToolsets: "info"})
	if err != nil {
		t.Fatal(err)
	}
	if c.StateDir != filepath.Join(dir, "flag") || strings.Join(c.Toolsets, ",") != "exec,jobs" {
		t.Fatalf("flags: %+v", c)
	}
}

func TestBadConfigNamesTheProblem(t *testing.T) {
	_, err := load(t, nil, map[string]string{"SANDBOXER_MAX_JOBS": "lots"})
	if err == nil || !strings.Contains(err.Error(), "SANDBOXER_MAX_JOBS") {
		t.Fatalf("want error naming SANDBOXER_MAX_JOBS, got %v", err)
	}
	_, err = load(t, []string{"--policy", "/nonexistent/policy.yaml"}, nil)
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/policy.yaml") {
		t.Fatalf("want error naming the file, got %v", err)
	}
}

// --build-images builds through the Docker Engine API: other backends refuse it.
func TestBuildImagesNeedsDocker(t *testing.T) {
	dir := t.TempDir()
	c, err := load(t, []string{"--state-dir", dir, "--build-images"}, nil)
	if err != nil || !c.BuildImages {
		t.Fatalf("--build-images on docker: %v, %+v", err, c)
	}
	pol := filepath.Join(dir, "k.yaml")
	if err := os.WriteFile(pol, []byte("backend: kubernetes\nnetwork: none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = load(t, []string{"--state-dir", dir, "--policy", pol, "--build-images"}, nil)
	if err == nil || !strings.Contains(err.Error(), "--build-images") || !strings.Contains(err.Error(), "kubernetes") {
		t.Fatalf("--build-images on kubernetes: %v, want an error naming the flag and the backend", err)
	}
}

func TestInstanceFollowsStateDir(t *testing.T) {
	a := Config{StateDir: "/a"}
	b := Config{StateDir: "/b"}
	if a.Instance() == b.Instance() || a.Instance() != (&Config{StateDir: "/a"}).Instance() || len(a.Instance()) != 12 {
		t.Fatalf("instances: %s %s", a.Instance(), b.Instance())
	}
}

func TestTokenFileFromPolicyOrFlag(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("http:\n  token_file: /etc/sandboxer/tokens\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := load(t, []string{"--policy", pol, "--state-dir", dir}, nil)
	if err != nil || c.TokenFile != "/etc/sandboxer/tokens" {
		t.Fatalf("policy http.token_file: %q %v", c.TokenFile, err)
	}
	c, err = load(t, []string{"--policy", pol, "--state-dir", dir, "--token-file", "/x/tokens"}, nil)
	if err != nil || c.TokenFile != "/x/tokens" {
		t.Fatalf("--token-file over the policy: %q %v", c.TokenFile, err)
	}
	if _, err := load(t, []string{"--state-dir", dir, "--tls-cert", "/c.pem"}, nil); err == nil {
		t.Fatal("--tls-cert without --tls-key and --http was accepted")
	}
}

// TestMountsNeverReachTheServer: a mount whose source is, holds, or lies
// inside the server's state directory is refused, named by its key, also
// through a link to the state directory's parent (THREATS 106).
func TestMountsNeverReachTheServer(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "srv", "state")
	if err := os.MkdirAll(filepath.Join(state, "jobs"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "innocent")
	if err := os.Symlink(filepath.Join(dir, "srv"), link); err != nil {
		t.Fatal(err)
	}
	for source, want := range map[string]string{
		link:                          "(it resolves to " + filepath.Join(dir, "srv") + ") holds " + state,
		filepath.Join(state, "jobs"):  "lies inside " + state,
		filepath.Join(link, "state"):  "is " + state,
		filepath.Join(dir, "nothing"): "no such file",
	} {
		pol := filepath.Join(dir, "p.yaml")
		if err := os.WriteFile(pol, []byte("mounts:\n  - {name: proj, source: "+source+"}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := load(t, []string{"--policy", pol, "--state-dir", state}, nil)
		if err == nil || !strings.Contains(err.Error(), "mounts[0].source") || !strings.Contains(err.Error(), want) {
			t.Errorf("mount %s: %v, want an error naming mounts[0].source with %q", source, err, want)
		}
	}
}

package backend

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/containerd"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
)

// Finding is what is known of one component under the sandboxes: its
// name and version, read through the engine, and the known escapes it has.
type Finding struct {
	What    string // "engine" or "runtime"
	Name    string // "Docker", "runc", "sandboxer-runc", "runsc"
	Version string // "" when it cannot be read
	Escapes []Escape
	// Unread says why the version could not be read, if it could not.
	Unread string
	// Missing: the policy names this runtime and the engine has none of
	// that name. Nothing runs then: a job never runs on another runtime.
	Missing []string // the runtimes the engine has
	Key     string   // with Missing: the policy key that names it
}

// FixCommand is what fixes a finding on the engines this project sets up.
const FixCommand = "run `make engine` (it builds a current runc from the Go module proxy and registers it as " + docker.PatchedRuntime +
	" for sandboxes), or name a patched runtime in the policy's runtime key"

// Open are the escapes sandboxer does not mitigate: a finding with any
// fails doctor and, with refuse_known_escapes, stops serve.
func (f Finding) Open() []Escape {
	var out []Escape
	for _, e := range f.Escapes {
		if e.Mitigated == "" {
			out = append(out, e)
		}
	}
	return out
}

// Sentence is the finding for a log line or doctor.
func (f Finding) Sentence() string {
	who := f.Name
	if f.Missing != nil {
		return fmt.Sprintf("policy key %s names %q, which the engine does not have (it has %s): no sandbox runs on another", f.Key, f.Name, strings.Join(f.Missing, ", "))
	}
	if f.Version != "" {
		who += " " + f.Version
	}
	if f.Unread != "" {
		return fmt.Sprintf("%s %s: version not read (%s): not checked against the known escapes", f.What, who, f.Unread)
	}
	if len(f.Escapes) == 0 {
		return fmt.Sprintf("%s %s: no known escape", f.What, who)
	}
	var open, mitigated []string
	for _, e := range f.Escapes {
		if e.Mitigated == "" {
			open = append(open, e.CVE)
		} else {
			mitigated = append(mitigated, e.CVE+" (mitigated: "+e.Mitigated+")")
		}
	}
	var parts []string
	if len(open) > 0 {
		parts = append(parts, "has known escapes: "+strings.Join(open, ", "))
	}
	if len(mitigated) > 0 {
		parts = append(parts, "has "+strings.Join(mitigated, "; "))
	}
	return fmt.Sprintf("%s %s %s", f.What, who, strings.Join(parts, "; and "))
}

// dockerFindings are the engine and the runtime its sandboxes will use,
// checked against the table: the runtime the policy names, else the
// patched one where the engine has it, else the engine's default.
func dockerFindings(ctx context.Context, e sandbox.Engine, pol *policy.Policy) ([]Finding, error) {
	rt, ok := e.(*docker.Runtime)
	if !ok {
		return nil, nil
	}
	info, err := rt.EngineInfo(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	if info.Product == string(docker.ProductDocker) {
		f := Finding{What: "engine", Name: info.Product, Version: info.ServerVersion}
		f.Escapes, err = EscapesOf("docker", info.ServerVersion, "")
		if err != nil {
			f.Unread = err.Error()
		}
		out = append(out, f)
	}
	// Every runtime the policy names must be the engine's: a job never runs
	// on another than the one it was given.
	for _, rk := range pol.Runtimes() {
		if !slices.Contains(info.Runtimes, rk.Runtime) {
			return append(out, Finding{What: "runtime", Name: rk.Runtime, Key: rk.Key, Missing: info.Runtimes}), nil
		}
	}
	// The runtime of sandboxes with no runtime of their own, then each
	// other the policy names (a template's, snapshots').
	name := pol.Runtime
	if name == "" && slices.Contains(info.Runtimes, docker.PatchedRuntime) {
		name = docker.PatchedRuntime
	}
	if name == "" || info.Product == string(docker.ProductPodman) {
		name = info.DefaultRT // Podman runs every container on its service's runtime
	}
	names := []string{name}
	for _, rk := range pol.Runtimes() {
		if !slices.Contains(names, rk.Runtime) {
			names = append(names, rk.Runtime)
		}
	}
	for _, name := range names {
		version, component, unread := runtimeVersion(ctx, name, info)
		pkg := ""
		if version == info.RuncVersion {
			pkg = info.RuncPackage
		}
		out = append(out, runtimeFinding(name, version, component, pkg, unread))
	}
	return out, nil
}

// runtimeFinding is a runtime's version checked against the known escapes
// (pkg: the distribution's package version, for its backports).
func runtimeFinding(name, version, component, pkg, unread string) Finding {
	f := Finding{What: "runtime", Name: name, Version: version, Unread: unread}
	if unread == "" && component != "" {
		var err error
		if f.Escapes, err = EscapesOf(component, version, pkg); err != nil {
			f.Unread = err.Error()
		}
	}
	return f
}

// runtimeVersion reads a runtime's version: the engine's own runc from the
// engine's version report; another from its binary, named by the engine,
// where the engine runs on this host.
func runtimeVersion(ctx context.Context, name string, info docker.EngineInfo) (version, component, unread string) {
	path := info.RuntimePaths[name]
	if (name == "runc" && (path == "" || path == "runc")) && info.RuncVersion != "" {
		return info.RuncVersion, "runc", ""
	}
	if path == "" {
		return "", "", "the engine names no binary for it"
	}
	if info.Endpoint.Remote {
		return "", "", "the engine is remote: its runtimes' binaries are on its host"
	}
	version, component, _, unread = binaryVersion(ctx, path)
	return version, component, unread
}

// binaryVersion runs a runtime's binary with --version: its version, its
// component ("runc", or "" for one no escape is listed for) and the commit
// line (Debian's runc names its package version there).
func binaryVersion(ctx context.Context, path string) (version, component, commit, unread string) {
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", "", "", fmt.Sprintf("%s --version: %v", path, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if c, ok := strings.CutPrefix(line, "commit: "); ok {
			commit = strings.TrimSpace(c)
		}
	}
	first, _, _ := strings.Cut(string(out), "\n")
	fields := strings.Fields(first) // "runc version 1.5.3", "runsc version release-20221219.0"
	if len(fields) < 3 || fields[1] != "version" {
		return "", "", "", fmt.Sprintf("%s --version said %q", path, first)
	}
	if fields[0] == "runc" {
		// Debian's "1.1.5+ds1": the upstream version before the "+".
		v, _, _ := strings.Cut(fields[2], "+")
		return v, "runc", commit, ""
	}
	return fields[2], "", commit, "" // no known escape is listed for it
}

// containerdFindings: the runc containerd's shim runs for sandboxes (the
// project's patched one, or the one on containerd's PATH on this host).
// kubernetesFindings names each node's runtime. The API does not say which
// runc runs under it, so that is said, not guessed (the test cluster of
// make k8s-cluster gives its containerd the patched runc).
func kubernetesFindings(ctx context.Context, e sandbox.Engine, _ *policy.Policy) ([]Finding, error) {
	rt, ok := e.(*kubernetes.Runtime)
	if !ok {
		return nil, nil
	}
	nodes, err := rt.NodeRuntimes(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, n := range nodes {
		out = append(out, Finding{What: "runtime", Name: "runc on " + n.Node,
			Unread: fmt.Sprintf("the node reports %s and kernel %s; the Kubernetes API does not name the runc under its runtime (scripts/k8s-cluster.sh gives its containerd the patched runc)", n.Runtime, n.Kernel)})
	}
	return out, nil
}

func containerdFindings(ctx context.Context, e sandbox.Engine, _ *policy.Policy) ([]Finding, error) {
	rt, ok := e.(*containerd.Runtime)
	if !ok {
		return nil, nil
	}
	name, path := "runc", rt.Runc()
	if path != "" {
		name = "sandboxer-runc"
	} else if p, err := exec.LookPath("runc"); err == nil {
		path = p
	} else {
		return []Finding{{What: "runtime", Name: name, Unread: "no runc on this host's PATH (the shim runs containerd's)"}}, nil
	}
	version, component, commit, unread := binaryVersion(ctx, path)
	return []Finding{runtimeFinding(name, version, component, commit, unread)}, nil
}

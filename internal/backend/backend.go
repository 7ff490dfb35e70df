// Package backend is the one table of sandbox backends: for each name a
// policy's backend key may give, how its engine is opened, what its policy
// may ask of it, and what doctor checks. The assembly (internal/server),
// the configuration's validation, doctor and the templates read it; no
// other package knows a backend by name. What an engine can do is its
// declared sandbox.Capabilities, the same whether or not it answers; what
// it is running (its version, its runtimes) is read from it at run time.
package backend

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/containerd"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
	"github.com/sandboxer/sandboxer/internal/sandbox/kubernetes"
)

// Backend is one row of the table.
type Backend struct {
	Name string
	// Networks are the policy network modes its sandboxes can have;
	// NoBridge says why bridge is not among them.
	Networks []string
	NoBridge string
	// NoRuntime, when set, says why the policy's runtime key must be
	// empty on it.
	NoRuntime string
	// NoPause, when set, says why workspaces.pause_after_s must be 0 on it
	// (its engine cannot freeze a workspace).
	NoPause string
	// Images: it builds images (templates, snapshots, --build-images).
	Images bool
	// Open connects to its engine; it succeeds while the engine is down.
	Open func(Options) (sandbox.Engine, error)
	// Doctor checks the engine and a hardened probe sandbox on it.
	Doctor func(ctx context.Context, o Options, report Report) error
	// Findings read the engine's and its sandboxes' runtime's versions
	// through the engine and check them against KnownEscapes (nil: this
	// backend's are not checked).
	Findings func(ctx context.Context, e sandbox.Engine, pol *policy.Policy) ([]Finding, error)
}

// Options are what opening an engine needs.
type Options struct {
	Policy   *policy.Policy
	Instance string                 // a hash of the state directory, on every label
	Server   string                 // the server's identity (serverlock)
	OnError  func(operation string) // counts failed engine calls; may be nil
}

// Report is one check's outcome, as doctor prints it. A check that passes
// with a detail beginning "warning: " is printed as a warning with its fix.
type Report func(ok bool, what, detail, fix string)

var all = []Backend{
	{
		Name: policy.BackendDocker, Networks: []string{policy.NetworkNone, policy.NetworkEgress, policy.NetworkBridge},
		Images: true, Open: openDocker(docker.ProductDocker), Doctor: doctorDocker(docker.ProductDocker), Findings: dockerFindings,
	},
	{
		Name: policy.BackendPodman, Networks: []string{policy.NetworkNone, policy.NetworkEgress, policy.NetworkBridge},
		NoRuntime: "its Docker-compatible API ignores a container's runtime: the service's own is every sandbox's (scripts/podman.sh starts it with --runtime sandboxer-runc)",
		Images:    true, Open: openDocker(docker.ProductPodman), Doctor: doctorDocker(docker.ProductPodman), Findings: dockerFindings,
	},
	{
		Name: policy.BackendKubernetes, Networks: []string{policy.NetworkNone, policy.NetworkEgress},
		NoBridge: "pods have no network; their only way out is the egress tunnel to the server's proxy",
		NoPause:  "a pod cannot be frozen: Kubernetes has no pause",
		Open:     openKubernetes, Doctor: doctorKubernetes, Findings: kubernetesFindings,
	},
	{
		Name: policy.BackendContainerd, Networks: []string{policy.NetworkNone, policy.NetworkEgress},
		NoBridge:  "its sandboxes have no network; their only way out is the egress tunnel to the server's proxy",
		NoRuntime: "it runs containerd's runc shim",
		NoPause:   "it keeps no workspaces",
		Open:      openContainerd, Doctor: doctorContainerd, Findings: containerdFindings,
	},
}

// Lookup is the backend of name.
func Lookup(name string) (Backend, bool) {
	i := slices.IndexFunc(all, func(b Backend) bool { return b.Name == name })
	if i < 0 {
		return Backend{}, false
	}
	return all[i], true
}

// Names are the backends, in the table's order.
func Names() []string {
	names := make([]string, len(all))
	for i, b := range all {
		names[i] = b.Name
	}
	return names
}

// Of is the policy's backend; an unknown name is an error naming the key.
func Of(p *policy.Policy) (Backend, error) {
	b, ok := Lookup(p.Backend)
	if !ok {
		return Backend{}, fmt.Errorf("policy: backend: must be one of %s, got %q", strings.Join(Names(), ", "), p.Backend)
	}
	return b, nil
}

// Validate checks what the policy asks of its backend: a network its
// sandboxes can have, a runtime where it takes one, templates where it
// builds images. Each problem names the key.
func Validate(p *policy.Policy) error {
	b, err := Of(p)
	if err != nil {
		return err
	}
	var problems []string
	if !slices.Contains(b.Networks, p.Network) {
		problems = append(problems, fmt.Sprintf("network: must be %s with backend: %s (%s), got %q", orList(b.Networks), b.Name, b.NoBridge, p.Network))
	}
	for _, rk := range p.Runtimes() {
		if b.NoRuntime == "" {
			break
		}
		problems = append(problems, fmt.Sprintf("%s: must be empty with backend: %s (%s), got %q", rk.Key, b.Name, b.NoRuntime, rk.Runtime))
	}
	if p.Workspaces.PauseAfterS > 0 && b.NoPause != "" {
		problems = append(problems, fmt.Sprintf("workspaces.pause_after_s: must be 0 with backend: %s (%s), got %d", b.Name, b.NoPause, p.Workspaces.PauseAfterS))
	}
	if len(p.Templates) > 0 && !b.Images {
		problems = append(problems, fmt.Sprintf("templates: templates need a backend that builds images (%s): on %s, build the image yourself, put it where the backend finds it, and map a language to it (languages.<name>.image)",
			strings.Join(builders(), ", "), b.Name))
	}
	if len(problems) > 0 {
		return fmt.Errorf("policy: %s", strings.Join(problems, "; "))
	}
	return nil
}

// builders are the backends that build images.
func builders() []string {
	var out []string
	for _, b := range all {
		if b.Images {
			out = append(out, b.Name)
		}
	}
	return out
}

// orList is "a", "a or b", "a, b or c", each quoted.
func orList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

func openDocker(product docker.Product) func(Options) (sandbox.Engine, error) {
	return func(o Options) (sandbox.Engine, error) {
		opts := []docker.Option{docker.WithServer(o.Server), docker.WithProduct(product)}
		if o.OnError != nil {
			opts = append(opts, docker.WithErrorHook(o.OnError))
		}
		return docker.New(o.Instance, opts...)
	}
}

func openKubernetes(o Options) (sandbox.Engine, error) {
	opts := []kubernetes.Option{kubernetes.WithServer(o.Server)}
	if o.OnError != nil {
		opts = append(opts, kubernetes.WithErrorHook(o.OnError))
	}
	k := o.Policy.Kubernetes
	return kubernetes.New(o.Instance, kubernetes.Config{Kubeconfig: k.Kubeconfig, Namespace: k.Namespace, MountBytes: k.MountMB << 20}, opts...)
}

func openContainerd(o Options) (sandbox.Engine, error) {
	opts := []containerd.Option{containerd.WithServer(o.Server)}
	if o.OnError != nil {
		opts = append(opts, containerd.WithErrorHook(o.OnError))
	}
	c := o.Policy.Containerd
	return containerd.New(o.Instance, containerd.Config{Address: c.Address, Namespace: c.Namespace, Runc: patchedRunc()}, opts...)
}

// patchedRunc is the project's current runc when its setup installed one
// (containerd's socket is on this host, so its shim runs this binary).
func patchedRunc() string {
	if fi, err := os.Stat(containerd.PatchedRunc); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return containerd.PatchedRunc
	}
	return ""
}

package backend

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/fake"
)

// What a policy asks of its backend is checked against the backend's row,
// each refusal naming the key.
func TestValidate(t *testing.T) {
	tmpl := policy.Template{Context: "/srv/t"}
	for _, c := range []struct {
		name   string
		mutate func(p *policy.Policy)
		want   string
	}{
		{"unknown", func(p *policy.Policy) { p.Backend = "nomad" }, `policy: backend: must be one of docker, podman, kubernetes, containerd, got "nomad"`},
		{"empty", func(p *policy.Policy) { p.Backend = "" }, `policy: backend: must be one of docker, podman, kubernetes, containerd, got ""`},
		{"containerd network", func(p *policy.Policy) { p.Backend, p.Network = policy.BackendContainerd, policy.NetworkBridge },
			`policy: network: must be "none" or "egress" with backend: containerd (its sandboxes have no network`},
		{"containerd runtime", func(p *policy.Policy) { p.Backend, p.Runtime = policy.BackendContainerd, "runsc" },
			`policy: runtime: must be empty with backend: containerd (it runs containerd's runc shim), got "runsc"`},
		{"kubernetes network", func(p *policy.Policy) { p.Backend, p.Network = policy.BackendKubernetes, policy.NetworkBridge },
			`policy: network: must be "none" or "egress" with backend: kubernetes (pods have no network`},
		{"kubernetes templates", func(p *policy.Policy) { p.Backend = policy.BackendKubernetes; p.Templates["t"] = tmpl },
			"policy: templates: templates need a backend that builds images (docker, podman): on kubernetes"},
		{"containerd templates", func(p *policy.Policy) { p.Backend = policy.BackendContainerd; p.Templates["t"] = tmpl },
			"templates need a backend that builds images (docker, podman): on containerd"},
		{"kubernetes pause", func(p *policy.Policy) { p.Backend, p.Workspaces.PauseAfterS = policy.BackendKubernetes, 60 },
			"policy: workspaces.pause_after_s: must be 0 with backend: kubernetes (a pod cannot be frozen: Kubernetes has no pause), got 60"},
		{"snapshot runtime on containerd", func(p *policy.Policy) { p.Backend, p.Snapshots.Runtime = policy.BackendContainerd, "runsc" },
			`policy: snapshots.runtime: must be empty with backend: containerd (it runs containerd's runc shim), got "runsc"`},
	} {
		p := policy.Default()
		c.mutate(p)
		if err := Validate(p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
	for _, name := range Names() {
		p := policy.Default()
		p.Backend = name
		if err := Validate(p); err != nil {
			t.Errorf("backend %s with the other defaults: %v", name, err)
		}
	}
	p := policy.Default()
	p.Backend, p.Network, p.Templates["t"] = policy.BackendPodman, policy.NetworkBridge, tmpl
	if err := Validate(p); err != nil {
		t.Errorf("podman with bridge and a template: %v", err)
	}
}

// Every row is whole: a backend added to the table without a way to open
// it or a doctor is caught here, not by a server that treats it as another.
func TestEveryRowIsWhole(t *testing.T) {
	for _, b := range all {
		if b.Name == "" || b.Open == nil || b.Doctor == nil || len(b.Networks) == 0 {
			t.Errorf("row %q is missing a part: %+v", b.Name, b)
		}
		if !strings.Contains(strings.Join(b.Networks, " "), policy.NetworkBridge) && b.NoBridge == "" {
			t.Errorf("row %q refuses bridge without saying why", b.Name)
		}
	}
}

// Podman is known by its backend, not by asking the daemon: a Podman
// server that starts while its socket is down has the tunnel's parts, and
// a Docker one the egress network, from the first call on.
func TestPodmanBeforeItsSocket(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/podman.sock") // nothing listens there
	for _, c := range []struct {
		backend         string
		network, tunnel bool
	}{{policy.BackendPodman, false, true}, {policy.BackendDocker, true, false}} {
		b, _ := Lookup(c.backend)
		e, err := b.Open(Options{Policy: policy.Default(), Instance: "test"})
		if err != nil {
			t.Fatalf("%s: %v", c.backend, err)
		}
		caps := e.Capabilities()
		if (caps.EgressNetwork != nil) != c.network || (caps.EgressTunnel != nil) != c.tunnel || (caps.TunnelInstalls != nil) != c.tunnel {
			t.Errorf("%s before its socket: egress network %v, tunnel %v, tunnel installs %v", c.backend, caps.EgressNetwork != nil, caps.EgressTunnel != nil, caps.TunnelInstalls != nil)
		}
		e.Close()
	}
}

// refusingCheckpointer refuses every runtime but runsc.
type refusingCheckpointer struct{ sandbox.WorkspaceCheckpointer }

func (refusingCheckpointer) CheckpointRefusal(_ context.Context, runtime string) string {
	if runtime == "runsc" {
		return ""
	}
	return "runc needs CRIU"
}

// TestReportHibernation: doctor names, per runtime the policy names, whether
// its workspaces hibernate or are stopped instead, and why; nothing without
// hibernate_after_s.
func TestReportHibernation(t *testing.T) {
	pol := policy.Default()
	pol.Templates = map[string]policy.Template{"gv": {Runtime: "runsc"}}
	var lines []string
	report := func(ok bool, what, detail, fix string) { lines = append(lines, what+": "+detail) }
	reportHibernation(context.Background(), pol, refusingCheckpointer{}, report)
	if len(lines) != 0 {
		t.Fatalf("reported without hibernate_after_s: %q", lines)
	}
	pol.Workspaces.HibernateAfterS = 60
	reportHibernation(context.Background(), pol, refusingCheckpointer{}, report)
	want := []string{
		"hibernation: workspaces on the default runtime (runtime) are stopped instead of hibernated after workspaces.hibernate_after_s: runc needs CRIU",
		"hibernation: workspaces on runsc (templates.gv.runtime) are checkpointed after workspaces.hibernate_after_s",
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("doctor said %q, want %q", lines, want)
	}
	lines = nil
	reportHibernation(context.Background(), pol, nil, report)
	if len(lines) != 2 || !strings.Contains(lines[1], "the engine has no checkpoints") {
		t.Fatalf("an engine without checkpoints: %q", lines)
	}
}

// doctor's room: the default policy's pool and concurrent jobs on a node
// of two CPUs is a warning with the numbers; on one of 64 it fits.
func TestReportRoom(t *testing.T) {
	for _, c := range []struct {
		cpus int64
		want string
	}{
		{2, "warning: the pool's 3 warm sandboxes and 4 concurrent jobs at 1 CPU and 512 MiB each ask 7 CPUs and 3584 MiB; 1 node(s) hold 2 CPUs"},
		{64, "the pool's 3 warm sandboxes and 4 concurrent jobs at 1 CPU and 512 MiB each ask 7 CPUs and 3584 MiB; 1 node(s) hold 64 CPUs"},
	} {
		eng := fake.NewEngine()
		eng.SetCapacity(c.cpus * 1e9)
		var got []string
		reportRoom(context.Background(), policy.Default(), eng.Runtime("room", "").Capabilities().Capacity, func(ok bool, what, detail, fix string) {
			if !ok {
				t.Errorf("room on %d CPUs failed: %s", c.cpus, detail)
			}
			got = append(got, detail)
		})
		if len(got) != 1 || !strings.HasPrefix(got[0], c.want) {
			t.Errorf("room on %d CPUs: %q, want it to begin %q", c.cpus, got, c.want)
		}
	}
}

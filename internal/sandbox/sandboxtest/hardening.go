package sandboxtest

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/hardening"
)

// HardeningOptions say what a runtime's sandbox is beyond the profile every
// engine applies (hardening.Want).
type HardeningOptions struct {
	// Runtime is the spec's OCI runtime ("" for the engine's, "runsc").
	Runtime string
	// Kernel is "gvisor" when the sandbox runs on gVisor's kernel.
	Kernel string
	// OwnUserNamespace: the engine gives each sandbox its own user namespace.
	OwnUserNamespace bool
	// Differs lists what the engine's API cannot give a sandbox the way the
	// profile says, each the start of a finding of hardening.Check and why
	// it differs. A finding listed here is logged, not failed; one listed
	// that is not found fails (the list stays what the engine does).
	Differs map[string]string
}

// RunHardening reads the hardening profile back from inside a sandbox (the
// supervisor's probe: ids and capabilities, NoNewPrivs and seccomp, the
// filtered calls refused, the read-only root, tmpfs sizes and owners,
// rlimits, the cgroup's limits, interfaces and routes, masked and read-only
// kernel paths, no engine socket, namespaces of its own) and checks it
// against the spec's limits. image must carry the supervisor.
func RunHardening(t *testing.T, newRuntime NewRuntime, image string, o HardeningOptions) {
	rt := newRuntime(t)
	spec := Spec(image, images.SupervisorPath+" "+hardening.ProbeCommand)
	spec.Runtime = o.Runtime
	out := newBuffer()
	h := start(t, rt, spec, out)
	if st := waitDone(t, h, "the probe"); st.ExitCode != 0 || !cleanEnd(st) {
		t.Fatalf("the probe: %s\nstdout: %s\nstderr: %s", describe(st), out.Stdout(), out.Stderr())
	}
	var v hardening.View
	if err := json.Unmarshal([]byte(strings.TrimSpace(out.Stdout())), &v); err != nil {
		t.Fatalf("the probe's view: %v\n%s", err, out.Stdout())
	}
	l := spec.Limits
	w := hardening.Want{
		UID: "1000", GID: "1000", WorkDir: spec.WorkDir,
		MemoryBytes: l.MemoryBytes, Pids: l.Pids, NanoCPUs: l.NanoCPUs,
		OpenFiles: l.OpenFiles, FileSizeBytes: l.FileSizeBytes, TmpBytes: l.TmpBytes, WorkdirBytes: l.WorkdirBytes,
		Kernel: o.Kernel, OwnUserNamespace: o.OwnUserNamespace, HostNamespaces: ownNamespaces(),
	}
	var bad []string
	seen := map[string]bool{}
	for _, finding := range hardening.Check(v, w) {
		declared := false
		for prefix, why := range o.Differs {
			if strings.HasPrefix(finding, prefix) {
				t.Logf("declared difference: %s (%s)", finding, why)
				seen[prefix], declared = true, true
			}
		}
		if !declared {
			bad = append(bad, finding)
		}
	}
	for prefix := range o.Differs {
		if !seen[prefix] {
			bad = append(bad, fmt.Sprintf("the declared difference %q is not found: take it out of the engine's list", prefix))
		}
	}
	if len(bad) > 0 {
		view, _ := json.MarshalIndent(v, "", "  ")
		t.Errorf("the hardening profile read from inside differs:\n- %s\nthe view: %s", strings.Join(bad, "\n- "), view)
	}
}

// ownNamespaces are the test process's namespaces: a sandbox's must differ
// (the initial namespaces' numbers are the same on every Linux host, so
// this holds for a remote kernel too). Not the cgroup namespace: Podman 4.3
// on cgroup v1 keeps the host's whatever is asked (docs/engines.md).
func ownNamespaces() map[string]string {
	ns := map[string]string{}
	for _, n := range []string{"pid", "user", "net", "mnt", "ipc", "uts"} {
		if l, err := os.Readlink("/proc/self/ns/" + n); err == nil {
			ns[n] = l
		}
	}
	return ns
}

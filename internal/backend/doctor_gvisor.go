package backend

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
)

// reportGVisor says whether the engine has gVisor (runtime runsc) and, when it
// has, whether a tiny sandbox runs under it and sees gVisor's kernel. Without
// it nothing fails unless the policy asks for runsc (reported separately).
func reportGVisor(ctx context.Context, pol *policy.Policy, rt *docker.Runtime, info docker.EngineInfo, report Report) {
	if info.Product == "Podman" {
		// Podman lists every OCI runtime it knows a path for, registered or
		// not; sandboxer supports runsc on Docker only (docs/engines.md).
		report(true, "gvisor", "not checked on Podman (runtime runsc is supported on Docker only)", "")
		return
	}
	has := false
	for _, r := range info.Runtimes {
		has = has || r == policy.RuntimeRunsc
	}
	if !has {
		report(true, "gvisor", "not registered (optional second boundary: `make gvisor`, then `runtime: runsc` in the policy)", "")
		return
	}
	limits, err := pol.Resolve(policy.Request{})
	if err != nil {
		report(false, "gvisor", err.Error(), "")
		return
	}
	if limits.Pids < policy.MinPidsRunsc {
		limits.Pids = policy.MinPidsRunsc
	}
	out := &sandbox.Buffer{Max: 64 << 10}
	started := time.Now()
	h, err := rt.Start(ctx, sandbox.Spec{
		JobID: "doctor-gvisor", Kind: "doctor", Image: images.Tag("base"), Cmd: []string{"cat", "/proc/version"},
		WorkDir: "/workspace", Network: policy.NetworkNone, Runtime: policy.RuntimeRunsc,
		Limits: job.SandboxLimits(limits, 64<<10),
	}, out)
	if err != nil {
		report(false, "gvisor", "registered, but a sandbox under runsc did not start: "+err.Error(), "see /var/log/dockerd.log; `make gvisor` re-registers it")
		return
	}
	select {
	case <-h.Done():
	case <-time.After(doctorProbeTimeout):
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = h.Destroy(dctx)
		cancel()
		report(false, "gvisor", fmt.Sprintf("a sandbox under runsc did not finish within %s", doctorProbeTimeout), "see /var/log/dockerd.log")
		return
	}
	st := h.Status()
	first, _, _ := strings.Cut(strings.TrimSpace(out.Stdout()), "\n")
	ok := st.ExitCode == 0 && st.Err == nil && strings.Contains(out.Stdout(), "gvisor")
	version, _, unread := runtimeVersion(ctx, policy.RuntimeRunsc, info)
	if unread != "" {
		version = "version unread: " + unread
	}
	report(ok, "gvisor", fmt.Sprintf("runsc works (%s; %s): a sandbox ran in %d ms, its kernel says %q",
		version, runscArgs(info.RuntimeArgs[policy.RuntimeRunsc]), time.Since(started).Milliseconds(), first),
		"see /var/log/dockerd.log; `make gvisor` re-registers it")
}

// runscBlind are the probe facts gVisor reports differently from the host's
// kernel: NoNewPrivs shows 0 inside (the host's no-new-privileges holds the
// Sentry), Seccomp shows the OCI filter only where runsc runs with
// --oci-seccomp (make gvisor registers it so; a cluster's runsc may not),
// and it has no /sys/class/net. The container's configuration is the same
// as under runc.
var runscBlind = map[string]bool{"NoNewPrivs": true, "Seccomp": true, "ifaces": true}

// runscArgs names the platform and whether the engine's seccomp profile
// applies inside, from the arguments the engine passes runsc.
func runscArgs(args []string) string {
	platform, seccomp := "platform systrap (runsc's default)", "the OCI seccomp profile not applied inside (no --oci-seccomp: `make gvisor` adds it)"
	for _, a := range args {
		if p, ok := strings.CutPrefix(a, "--platform="); ok {
			platform = "platform " + p
		}
		if a == "--oci-seccomp" || a == "--oci-seccomp=true" {
			seccomp = "the OCI seccomp profile applied inside"
		}
	}
	return platform + ", " + seccomp
}

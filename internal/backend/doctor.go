package backend

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/docker"
)

// probeScript prints, from inside a sandbox, the facts the hardening profile promises.
const probeScript = `echo uid=$(id -u)
grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t' | tr ':' '='
touch /rootfs-write-test 2>/dev/null && echo rootfs=writable || echo rootfs=readonly
echo ifaces=$(ls /sys/class/net | tr '\n' ' ')
test -S /var/run/docker.sock && echo docker_sock=present || echo docker_sock=absent`

// doctorProbeTimeout bounds the hardened test container's run.
const doctorProbeTimeout = 60 * time.Second

// doctorDocker checks a Docker or Podman engine: it answers, it can hold
// the limits, its runtimes, the images, the pool, gVisor where it is, and a
// hardened probe sandbox reads its profile from inside.
func doctorDocker(product docker.Product) func(ctx context.Context, o Options, report Report) error {
	return func(ctx context.Context, o Options, report Report) error {
		e, err := openDocker(product)(o)
		if err != nil {
			return err
		}
		defer e.Close()
		return checkDocker(ctx, e.(*docker.Runtime), o, report)
	}
}

func checkDocker(ctx context.Context, rt *docker.Runtime, o Options, report Report) error {
	pol := o.Policy

	info, err := rt.EngineInfo(ctx)
	if err != nil {
		report(false, "engine", rt.Endpoint().String()+": "+err.Error(), "run `make engine` (installs and starts dockerd on Debian as root) or set DOCKER_HOST")
		return nil
	}
	report(true, "engine", fmt.Sprintf("%s, %s %s, API %s (engine max %s)", info.Endpoint, info.Product, info.ServerVersion, info.APIVersion, info.MaxAPIVersion), "")
	if info.Endpoint.Remote {
		report(true, "remote engine", "sandboxes run where the engine is; the state directory stays here. Mount sources name paths on the engine's host", "")
	}
	if info.Unenforced != "" {
		report(false, "limits", info.Unenforced, "sandboxer starts no sandbox on such an engine (docs/engines.md)")
	} else {
		report(true, "cgroups", "v"+info.CgroupVersion+" ("+info.CgroupDriver+")", "")
	}
	report(info.StorageDriver != "", "storage driver", info.StorageDriver, "")
	rts := strings.Join(info.Runtimes, ", ")
	report(true, "runtimes", rts+" (default "+info.DefaultRT+")", "")
	// A runtime the policy names and the engine lacks is a finding too.
	findings, err := dockerFindings(ctx, rt, pol)
	reportFindings(report, findings, err)
	baseBuilt := reportImages(ctx, rt, report)
	reportPool(ctx, pol, rt, report)
	reportHibernation(ctx, pol, rt.Capabilities().Checkpointer, report)
	if !baseBuilt {
		return nil
	}
	reportGVisor(ctx, pol, rt, info, report)
	limits, err := pol.Resolve(policy.Request{})
	if err != nil {
		return err
	}
	facts, ok := runProbe(ctx, rt, sandbox.Spec{
		JobID: "doctor", Kind: "doctor", Image: images.Tag("base"), Cmd: []string{"bash", "-c", probeScript},
		WorkDir: "/workspace", Network: probeNetwork(pol.Network), Runtime: pol.Runtime,
		Limits: job.SandboxLimits(limits, 1<<20),
	}, "check the engine's log (/var/log/dockerd.log)", report)
	if !ok {
		return nil
	}
	want := []struct{ key, value, what string }{
		{"uid", "1000", "non-root user"},
		{"CapEff", "0000000000000000", "no capabilities"},
		{"NoNewPrivs", "1", "no-new-privileges"},
		{"Seccomp", "2", "seccomp filter"},
		{"rootfs", "readonly", "read-only root"},
		{"ifaces", "lo", "network none"},
		{"docker_sock", "absent", "no Docker socket"},
	}
	if probeNetwork(pol.Network) != policy.NetworkNone {
		want = want[:5]
	}
	for _, w := range want {
		if pol.Runtime == policy.RuntimeRunsc && runscBlind[w.key] {
			continue
		}
		report(facts[w.key] == w.value, w.what, w.key+"="+facts[w.key], "")
	}
	reportMounts(ctx, pol, rt, job.SandboxLimits(limits, 1<<20), report)
	return nil
}

// reportHibernation says, with workspaces.hibernate_after_s, which of the
// policy's runtimes are checkpointed and which are stopped instead, and why.
func reportHibernation(ctx context.Context, pol *policy.Policy, cp sandbox.WorkspaceCheckpointer, report Report) {
	if pol.Workspaces.HibernateAfterS <= 0 {
		return
	}
	keys := pol.Runtimes()
	if pol.Runtime == "" {
		keys = append([]policy.RuntimeKey{{Key: "runtime", Runtime: ""}}, keys...)
	}
	for _, k := range keys {
		name := k.Runtime
		if name == "" {
			name = "the default runtime"
		}
		why := "the engine has no checkpoints"
		if cp != nil {
			why = cp.CheckpointRefusal(ctx, k.Runtime)
		}
		if why == "" {
			report(true, "hibernation", fmt.Sprintf("workspaces on %s (%s) are checkpointed after workspaces.hibernate_after_s", name, k.Key), "")
			continue
		}
		report(true, "hibernation", fmt.Sprintf("workspaces on %s (%s) are stopped instead of hibernated after workspaces.hibernate_after_s: %s", name, k.Key, why), "")
	}
}

// reportRoom compares what the policy may ask of an engine whose sandboxes
// wait for room (the warm pool's sandboxes and jobs.max_concurrent jobs, at
// the default limits) with the nodes' allocatable and the namespace's
// quota. More than fits is a warning, not a failure: jobs beyond it wait
// in the queue, saying why, and the pool gives its idle sandboxes back.
func reportRoom(ctx context.Context, pol *policy.Policy, c sandbox.CapacityReporter, report Report) {
	if c == nil {
		return
	}
	room, err := c.Room(ctx)
	if err != nil {
		report(false, "room", err.Error(), "")
		return
	}
	warm := 0
	if pol.Pool.Enabled {
		for _, n := range pol.Pool.Size {
			warm += n
		}
	}
	cpus, mem := pol.Limits.CPUs.Default, int64(pol.Limits.MemoryMB.Default)
	sandboxes := warm + pol.Jobs.MaxConcurrent
	needCPUs, needMem := float64(sandboxes)*cpus, int64(sandboxes)*mem
	asked := fmt.Sprintf("the pool's %d warm sandboxes and %d concurrent jobs at %g CPU and %d MiB each ask %g CPUs and %d MiB",
		warm, pol.Jobs.MaxConcurrent, cpus, mem, needCPUs, needMem)
	var have []string
	fitCPUs, fitMem := 0.0, int64(0)
	least := func(cur, v float64) float64 {
		if cur == 0 || v < cur {
			return v
		}
		return cur
	}
	if room.Nodes > 0 {
		have = append(have, fmt.Sprintf("%d node(s) hold %g CPUs and %d MiB", room.Nodes, float64(room.NanoCPUs)/1e9, room.MemoryBytes>>20))
		fitCPUs, fitMem = float64(room.NanoCPUs)/1e9, room.MemoryBytes>>20
	}
	if room.QuotaNanoCPUs > 0 || room.QuotaMemory > 0 || room.QuotaPods > 0 {
		have = append(have, fmt.Sprintf("the namespace's quota allows %g CPUs, %d MiB and %d pods (0: no limit)",
			float64(room.QuotaNanoCPUs)/1e9, room.QuotaMemory>>20, room.QuotaPods))
		if room.QuotaNanoCPUs > 0 {
			fitCPUs = least(fitCPUs, float64(room.QuotaNanoCPUs)/1e9)
		}
		if room.QuotaMemory > 0 {
			fitMem = int64(least(float64(fitMem), float64(room.QuotaMemory>>20)))
		}
	}
	if len(have) == 0 {
		report(true, "room", asked+"; the engine's room is not readable by this account (nodes, resourcequotas)", "")
		return
	}
	short := (fitCPUs > 0 && needCPUs > fitCPUs) || (fitMem > 0 && needMem > fitMem) ||
		(room.QuotaPods > 0 && int64(sandboxes) > room.QuotaPods)
	detail := asked + "; " + strings.Join(have, "; ")
	if !short {
		report(true, "room", detail, "")
		return
	}
	report(true, "room", "warning: "+detail+": jobs beyond what fits wait in the queue with the scheduler's reason, and the pool gives its idle sandboxes back while they wait",
		"for jobs that start at once, lower pool.size, jobs.max_concurrent or limits.cpus.default / limits.memory_mb.default, or give the namespace more room")
}

// reportPool says what the policy asks of the warm pool and how many warm
// sandboxes of this state directory's servers wait on the engine now.
func reportPool(ctx context.Context, pol *policy.Policy, rt sandbox.Runtime, report Report) {
	if !pol.Pool.Enabled {
		report(true, "warm pool", "off (pool.enabled: false): every job starts a container", "")
		return
	}
	var want []string
	for _, name := range sortedKeys(pol.Pool.Size) {
		if n := pol.Pool.Size[name]; n > 0 {
			want = append(want, fmt.Sprintf("%s %d", name, n))
		}
	}
	cs, err := rt.List(ctx)
	if err != nil {
		report(false, "warm pool", err.Error(), "")
		return
	}
	waiting, servers := 0, map[string]bool{}
	for _, c := range cs {
		if c.Kind == sandbox.KindPool && c.JobID == "" && c.Running {
			waiting++
			servers[c.Server] = true
		}
	}
	report(true, "warm pool", fmt.Sprintf("on, per server: %s; %d warm sandboxes waiting now, kept by %d running server(s)",
		strings.Join(want, ", "), waiting, len(servers)), "")
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// reportMounts checks each granted mount from the engine's side: a sandbox
// with it sees a readable directory it cannot write (a remote engine may not
// have the path at all).
func reportMounts(ctx context.Context, pol *policy.Policy, rt sandbox.Runtime, limits sandbox.Limits, report Report) {
	for _, m := range pol.Mounts {
		target := policy.MountTarget(m.Name)
		out := &sandbox.Buffer{Max: 1 << 16}
		what := "mount " + m.Name
		fix := "make " + m.Source + " exist as a directory on the engine's host, or remove the grant from the policy (mounts)"
		h, err := rt.Start(ctx, sandbox.Spec{
			JobID: "doctor", Kind: "doctor", Image: images.Tag("base"), WorkDir: "/workspace", Network: policy.NetworkNone,
			Runtime: pol.Runtime, Limits: limits, Mounts: []sandbox.Mount{{Source: m.Source, Target: target, ReadOnly: true}},
			Cmd: []string{"sh", "-c", `ls "$1" >/dev/null && if touch "$1/.sandboxer-doctor" 2>/dev/null; then echo writable; else echo read-only; fi`, "sh", target},
		}, out)
		if err != nil {
			report(false, what, err.Error(), fix)
			continue
		}
		select {
		case <-h.Done():
		case <-time.After(doctorProbeTimeout):
			_ = h.Destroy(context.WithoutCancel(ctx))
			report(false, what, "the check did not finish", "")
			continue
		}
		got := strings.TrimSpace(out.Stdout())
		report(got == "read-only", what, m.Source+" at "+target+": "+strings.TrimSpace(got+" "+out.Stderr()), fix)
	}
}

// probeNetwork is the network of doctor's probe: the policy's, but none for
// egress (its network and proxy are the server's, made when it serves).
func probeNetwork(network string) string {
	if network == policy.NetworkEgress {
		return policy.NetworkNone
	}
	return network
}

// reportImages checks each sandbox image on the engine; it says whether base is there.
func reportImages(ctx context.Context, rt sandbox.Runtime, report Report) bool {
	baseBuilt := false
	for _, img := range images.All() {
		tag := images.Tag(img.Name)
		ok, err := rt.ImageExists(ctx, tag)
		if err != nil {
			report(false, "image "+img.Name, err.Error(), "")
			continue
		}
		if img.Name == "base" {
			baseBuilt = ok
		}
		fix := "run `make images` (or `sandboxer images build`)"
		if images.Supervisor() == nil {
			fix = images.ErrNoSupervisor.Error() + ", then `make images`"
		}
		report(ok, "image "+img.Name, tag, fix)
	}
	return baseBuilt
}

// runProbe runs spec (the probe script) in a hardened sandbox and returns the
// key=value facts it printed; false (reported) when it could not run.
func runProbe(ctx context.Context, rt sandbox.Runtime, spec sandbox.Spec, fix string, report Report) (map[string]string, bool) {
	out := &sandbox.Buffer{Max: 1 << 20}
	h, err := rt.Start(ctx, spec, out)
	if err != nil {
		report(false, "hardened container", err.Error(), "")
		return nil, false
	}
	started := time.Now()
	select {
	case <-h.Done():
	case <-time.After(doctorProbeTimeout):
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = h.Destroy(dctx)
		dcancel()
		report(false, "hardened container", fmt.Sprintf("did not finish within %s", doctorProbeTimeout), fix)
		return nil, false
	}
	st := h.Status()
	report(st.ExitCode == 0 && st.Err == nil, "hardened container", fmt.Sprintf("ran in %d ms, exit %d", time.Since(started).Milliseconds(), st.ExitCode), "")
	facts := map[string]string{}
	for _, line := range strings.Split(out.Stdout(), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			facts[k] = strings.TrimSpace(v)
		}
	}
	return facts, true
}

// reportFindings reports each finding of the engine's and its runtime's
// versions against the known escapes: a FAIL names the CVE and the fix.
func reportFindings(report Report, findings []Finding, err error) {
	if err != nil {
		report(false, "known escapes", err.Error(), "")
		return
	}
	for _, f := range findings {
		fix := FixCommand
		if f.Missing != nil {
			fix = "register the runtime with the engine (`make gvisor` for runsc), or change the policy's runtime key"
		}
		report(len(f.Open()) == 0 && f.Missing == nil, f.What+" "+f.Name, f.Sentence(), fix)
	}
}

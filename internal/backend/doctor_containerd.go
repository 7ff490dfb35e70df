package backend

import (
	"context"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// containerdProbe adds the network to the probe: loopback only.
const containerdProbe = probeScript + `
echo interfaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | paste -sd,)
echo default_route=$(awk '$2=="00000000"' /proc/net/route | wc -l)`

// doctorContainerd checks backend containerd: containerd answers, the
// images are in its namespace, and a sandbox reads its hardening from inside.
func doctorContainerd(ctx context.Context, o Options, report Report) error {
	rt, err := openContainerd(o)
	if err != nil {
		report(false, "containerd", err.Error(), "set containerd.address in the policy")
		return nil
	}
	defer rt.Close()
	if err := rt.Ping(ctx); err != nil {
		report(false, "containerd", err.Error(), "run `bash scripts/containerd.sh` (installs and starts Debian's containerd as root) or set containerd.address")
		return nil
	}
	report(true, "containerd", rt.Host()+" answers", "")
	baseBuilt := reportImages(ctx, rt, report)
	reportPool(ctx, o.Policy, rt, report)
	if !baseBuilt {
		return nil
	}
	limits, err := o.Policy.Resolve(policy.Request{})
	if err != nil {
		return err
	}
	facts, ok := runProbe(ctx, rt, sandbox.Spec{
		JobID: "doctor", Kind: "doctor", Image: images.Tag("base"), Cmd: []string{"bash", "-c", containerdProbe},
		WorkDir: "/workspace", Network: policy.NetworkNone, Limits: job.SandboxLimits(limits, 1<<20),
	}, "look at containerd's log (/var/log/sandboxer-containerd.log)", report)
	if !ok {
		return nil
	}
	reportFacts(facts, append(hardeningFacts(), fact{"interfaces", "lo", "loopback only"}, fact{"default_route", "0", "no route out"}), false, report)
	reportMounts(ctx, o.Policy, rt, job.SandboxLimits(limits, 1<<20), report)
	return nil
}

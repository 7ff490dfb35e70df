package main

import (
	"context"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/config"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/sandbox/containerd"
)

// containerdProbe adds the network to the probe: loopback only.
const containerdProbe = probeScript + `
echo interfaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | paste -sd,)
echo default_route=$(awk '$2=="00000000"' /proc/net/route | wc -l)`

// doctorContainerd checks backend containerd: containerd answers, the
// images are in its namespace, and a sandbox reads its hardening from inside.
func doctorContainerd(cfg *config.Config, server string, report func(ok bool, what, detail, fix string)) error {
	rt, err := containerd.New(cfg.Instance(), containerd.Config{
		Address: cfg.Policy.Containerd.Address, Namespace: cfg.Policy.Containerd.Namespace,
	}, containerd.WithServer(server))
	if err != nil {
		report(false, "containerd", err.Error(), "set containerd.address in the policy")
		return nil
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := rt.Ping(ctx); err != nil {
		report(false, "containerd", err.Error(), "run `bash scripts/containerd.sh` (installs and starts Debian's containerd as root) or set containerd.address")
		return nil
	}
	report(true, "containerd", rt.Host()+" answers", "")
	baseBuilt := reportImages(ctx, rt, report)
	reportPool(ctx, cfg.Policy, rt, report)
	if !baseBuilt {
		return nil
	}
	limits, err := cfg.Policy.Resolve(policy.Request{})
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
	reportMounts(ctx, cfg.Policy, rt, job.SandboxLimits(limits, 1<<20), report)
	return nil
}

package backend

import (
	"context"
)

// containerdProbe adds the network to the probe: loopback only.
const containerdProbe = probeScript + `
echo interfaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | paste -sd,)
echo default_route=$(awk '$2=="00000000"' /proc/net/route | wc -l)`

// doctorContainerd checks backend containerd: containerd answers, the
// images are in its namespace, and a sandbox reads its hardening from inside.
func doctorContainerd(ctx context.Context, o Options, report Report) error {
	return checkEngine(ctx, o, report, engineCheck{
		name: "containerd", open: openContainerd, probe: containerdProbe, findings: containerdFindings,
		openFix: "set containerd.address in the policy",
		pingFix: "run `bash scripts/containerd.sh` (installs and starts Debian's containerd as root) or set containerd.address",
		runFix:  "look at containerd's log (/var/log/sandboxer-containerd.log)",
		facts:   []fact{{"interfaces", "lo", "loopback only"}, {"default_route", "0", "no route out"}},
	})
}

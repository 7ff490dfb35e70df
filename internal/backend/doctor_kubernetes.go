package backend

import (
	"context"
	"fmt"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/job"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// kubernetesProbe adds what only a pod could leak to the probe: a service
// account token, and a route out.
const kubernetesProbe = probeScript + `
ls -d /var/run/secrets/kubernetes.io /run/secrets/kubernetes.io >/dev/null 2>&1 && echo sa_token=present || echo sa_token=absent
echo default_route=$(awk '$2=="00000000"' /proc/net/route | wc -l)`

// doctorKubernetes checks backend kubernetes: the API answers, the images
// are on the node(s), and a pod reads its hardening from inside.
func doctorKubernetes(ctx context.Context, o Options, report Report) error {
	return checkEngine(ctx, o, report, engineCheck{
		name: "kubernetes", open: openKubernetes, probe: kubernetesProbe,
		openFix:  "set kubernetes.kubeconfig in the policy, or KUBECONFIG",
		pingFix:  "start the cluster (`make k8s-cluster` here) or fix the kubeconfig",
		runFix:   "kubectl describe the namespace's pods; is the node Ready?",
		facts:    []fact{{"sa_token", "absent", "no SA token"}, {"default_route", "0", "no route out"}},
		runtime:  true, // the policy's runtime is a RuntimeClass
		findings: kubernetesFindings,
	})
}

// engineCheck is what doctor checks of an engine reached over its API
// (Kubernetes, containerd): how to open it, the probe, what it must show.
type engineCheck struct {
	name                     string
	open                     func(Options) (sandbox.Engine, error)
	probe                    string // the probe script
	openFix, pingFix, runFix string
	facts                    []fact // beyond hardeningFacts
	runtime                  bool   // the policy's runtime applies
	// findings read the runtime's version against the known escapes (nil:
	// the engine's runtimes are not on this host to read).
	findings func(context.Context, sandbox.Engine, *policy.Policy) ([]Finding, error)
}

// checkEngine: it opens and answers, the images, the pool, a probe sandbox
// reading its hardening from inside, the granted mounts.
func checkEngine(ctx context.Context, o Options, report Report, c engineCheck) error {
	rt, err := c.open(o)
	if err != nil {
		report(false, c.name, err.Error(), c.openFix)
		return nil
	}
	defer rt.Close()
	if err := rt.Ping(ctx); err != nil {
		report(false, c.name, rt.Host()+": "+err.Error(), c.pingFix)
		return nil
	}
	report(true, c.name, rt.Host()+" answers", "")
	if c.findings != nil {
		findings, err := c.findings(ctx, rt, o.Policy)
		reportFindings(report, findings, err)
	}
	baseBuilt := reportImages(ctx, rt, report)
	reportPool(ctx, o.Policy, rt, report)
	reportRoom(ctx, o.Policy, rt.Capabilities().Capacity, report)
	reportHibernation(ctx, o.Policy, rt.Capabilities().Checkpointer, report)
	if !baseBuilt {
		return nil
	}
	limits, err := o.Policy.Resolve(policy.Request{})
	if err != nil {
		return err
	}
	spec := sandbox.Spec{
		JobID: "doctor", Kind: "doctor", Image: images.Tag("base"), Cmd: []string{"bash", "-c", c.probe},
		WorkDir: "/workspace", Network: policy.NetworkNone, Limits: job.SandboxLimits(limits, 1<<20),
	}
	if c.runtime {
		spec.Runtime = o.Policy.Runtime
	}
	facts, ok := runProbe(ctx, rt, spec, c.runFix, report)
	if !ok {
		return nil
	}
	reportFacts(facts, append(hardeningFacts(), c.facts...), c.runtime && o.Policy.Runtime == policy.RuntimeRunsc, report)
	// Granted mounts: where the server copies them in, a copy the job cannot write.
	reportMounts(ctx, o.Policy, rt, job.SandboxLimits(limits, 1<<20), report)
	return nil
}

// fact is one line of a probe's output that doctor checks: key=value.
type fact struct{ key, value, what string }

// hardeningFacts are what every backend's sandbox shows from inside.
func hardeningFacts() []fact {
	return []fact{
		{"uid", "1000", "non-root user"},
		{"CapEff", "0000000000000000", "no capabilities"},
		{"NoNewPrivs", "1", "no-new-privileges"},
		{"Seccomp", "2", "seccomp filter"},
		{"rootfs", "readonly", "read-only root"},
		{"docker_sock", "absent", "no Docker socket"},
	}
}

// reportFacts reports each fact of the probe's output (under gVisor,
// those it cannot show are left out).
func reportFacts(facts map[string]string, want []fact, runsc bool, report Report) {
	for _, w := range want {
		if runsc && runscBlind[w.key] {
			continue
		}
		report(facts[w.key] == w.value, w.what, fmt.Sprintf("%s=%s", w.key, facts[w.key]), "")
	}
}

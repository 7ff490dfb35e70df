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
	rt, err := openKubernetes(o)
	if err != nil {
		report(false, "kubernetes", err.Error(), "set kubernetes.kubeconfig in the policy, or KUBECONFIG")
		return nil
	}
	defer rt.Close()
	if err := rt.Ping(ctx); err != nil {
		report(false, "kubernetes", rt.Host()+": "+err.Error(), "start the cluster (`make k8s-cluster` here) or fix the kubeconfig")
		return nil
	}
	report(true, "kubernetes", "API "+rt.Host()+" answers", "")
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
		JobID: "doctor", Kind: "doctor", Image: images.Tag("base"), Cmd: []string{"bash", "-c", kubernetesProbe},
		WorkDir: "/workspace", Network: policy.NetworkNone, Limits: job.SandboxLimits(limits, 1<<20),
		Runtime: o.Policy.Runtime, // a RuntimeClass
	}, "kubectl describe the namespace's pods; is the node Ready?", report)
	if !ok {
		return nil
	}
	reportFacts(facts, append(hardeningFacts(), fact{"sa_token", "absent", "no SA token"}, fact{"default_route", "0", "no route out"}),
		o.Policy.Runtime == policy.RuntimeRunsc, report)
	// Granted mounts: a copy the server takes into the pod, which the job cannot write.
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

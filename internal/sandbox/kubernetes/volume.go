package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// A volume (a dependency cache, sandbox.VolumeRuntime) is a
// PersistentVolumeClaim of the namespace's default StorageClass, named as
// the caller names it. Its labels are the caller's keys with hashed values
// (labelValue: a label value cannot hold an image reference or a list) and
// its annotations the exact values, which ListVolumes returns. It is filled
// by a filler pod (StartFiller) through the tunnel, and mounted by job and
// warm pods as the spec's Mounts say (read-only for scripts). The claim is
// ReadWriteOnce: every pod that mounts it must run on one node (the test
// cluster has one); a cluster of several nodes needs a StorageClass with
// ReadOnlyMany (or ReadWriteMany) for the scripts' read-only mounts.

var (
	_ sandbox.VolumeRuntime      = (*Runtime)(nil)
	_ sandbox.TunnelVolumeFiller = (*Runtime)(nil)
)

// volumeClaimSize is what a volume's claim requests; the policy's
// scripts.dependency_cache_mb (the installs' measured sizes) is what binds.
const volumeClaimSize = 1 << 30

// CreateVolume creates the claim with the managed and instance labels.
func (r *Runtime) CreateVolume(ctx context.Context, name string, labels map[string]string) error {
	l := map[string]string{
		sandbox.LabelManaged:  "true",
		sandbox.LabelInstance: labelValue(r.instance),
		sandbox.LabelServer:   labelValue(r.server),
	}
	ann := map[string]string{annInstance: r.instance, annServer: r.server}
	for k, v := range labels {
		l[k] = labelValue(v)
		ann[k] = v
	}
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: ann},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(volumeClaimSize, resource.BinarySI),
			}},
		},
	}
	if _, err := r.core.PersistentVolumeClaims(r.namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return r.engineErr(fmt.Errorf("create persistent volume claim %s: %w", name, err))
	}
	return nil
}

// ListVolumes returns this instance's claims carrying label ("key" or
// "key=value"), with their exact labels; claims being deleted are left out.
func (r *Runtime) ListVolumes(ctx context.Context, label string) ([]sandbox.Volume, error) {
	sel := label
	if k, v, ok := strings.Cut(label, "="); ok {
		sel = k + "=" + labelValue(v)
	}
	list, err := r.core.PersistentVolumeClaims(r.namespace).List(ctx, metav1.ListOptions{LabelSelector: r.selector() + "," + sel})
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("list persistent volume claims: %w", err))
	}
	out := make([]sandbox.Volume, 0, len(list.Items))
	for _, c := range list.Items {
		if c.DeletionTimestamp != nil {
			continue
		}
		labels := maps.Clone(c.Annotations)
		delete(labels, annInstance)
		delete(labels, annServer)
		labels[sandbox.LabelManaged] = "true"
		labels[sandbox.LabelInstance] = r.instance
		out = append(out, sandbox.Volume{Name: c.Name, Labels: labels, CreatedAt: c.CreationTimestamp.Time})
	}
	return out, nil
}

// VolumeSizes knows none: the API reports a claim's requested capacity, not
// what its files take, and a StorageClass's provisioner (here a host-path
// loop) tells no usage. The dependency manager keeps the size its install
// measured (du) while the server runs; after a restart the size is unknown.
func (r *Runtime) VolumeSizes(ctx context.Context) (map[string]int64, error) {
	return map[string]int64{}, nil
}

// RemoveVolume deletes the claim; one already gone is no error. A claim
// still mounted by a pod stays (Terminating, no longer listed) until that
// pod goes: Kubernetes' own protection, where Docker refuses a volume in use.
func (r *Runtime) RemoveVolume(ctx context.Context, name string) error {
	err := r.core.PersistentVolumeClaims(r.namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return r.engineErr(fmt.Errorf("delete persistent volume claim %s: %w", name, err))
	}
	return nil
}

// StartFiller makes a pod of spec (podFor's hardening, its mounts as given:
// read-write for an install) whose main process sleeps, for Exec through
// the tunnel: it has no network, like every pod here.
func (r *Runtime) StartFiller(ctx context.Context, spec sandbox.Spec) (string, error) {
	if err := checkMounts(spec); err != nil {
		return "", err
	}
	pod := r.podFor(spec)
	pod.GenerateName = podPrefix + "fill-"
	c := &pod.Spec.Containers[0]
	c.Command = []string{"sleep", "infinity"}
	c.Stdin, c.StdinOnce = false, false
	pod, err := r.core.Pods(r.namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return "", r.engineErr(fmt.Errorf("create pod: %w", err))
	}
	if err := r.waitRunning(ctx, pod, spec.Image); err != nil {
		r.removeQuietly(pod.Name)
		return "", err
	}
	return pod.Name, nil
}

// checkMounts refuses what a pod cannot mount: a workspace's container
// (workspace jobs go through StartIn). Granted host paths are copied in
// (hostMounts), claims mounted (claimMounts).
func checkMounts(spec sandbox.Spec) error {
	if spec.Workspace != "" {
		return errors.New("the kubernetes backend runs a workspace's jobs in its pod (StartIn), not in a pod of their own")
	}
	return nil
}

// claimMounts are spec's volume mounts as pod volumes (claims) and mounts.
func claimMounts(spec sandbox.Spec) ([]corev1.Volume, []corev1.VolumeMount) {
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for i, m := range spec.Mounts {
		if m.Volume == "" {
			continue
		}
		name := fmt.Sprintf("claim-%d", i)
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: m.Volume, ReadOnly: m.ReadOnly},
		}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.Target, ReadOnly: m.ReadOnly})
	}
	return vols, mounts
}

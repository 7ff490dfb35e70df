package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// resizeTimeout bounds the wait for the kubelet to apply a claimed pod's limits.
const resizeTimeout = 15 * time.Second

var _ sandbox.Warmer = (*Runtime)(nil)

// Prepare starts a pod of spec's shape whose supervisor waits for its job.
func (r *Runtime) Prepare(ctx context.Context, spec sandbox.Spec) (sandbox.Warm, error) {
	spec.Kind, spec.JobID = sandbox.KindPool, ""
	if err := checkMounts(spec); err != nil {
		return nil, err
	}
	if err := r.checkNetwork(spec.Network); err != nil {
		return nil, err
	}
	if _, err := hostMounts(spec.Mounts); err != nil {
		return nil, err
	}
	// A warm pod that does not fit fails at once (and goes): it must not
	// hold a place in the scheduler's queue ahead of a job's pod.
	room := &roomWait{warm: true}
	pod, err := r.createPod(ctx, r.podFor(spec), room)
	if err != nil {
		return nil, err
	}
	if err := r.waitPod(ctx, pod, spec.Image, room); err != nil {
		r.removeQuietly(pod.Name)
		return nil, err
	}
	if err := r.checkHello(ctx, pod.Name); err != nil {
		r.removeQuietly(pod.Name)
		return nil, err
	}
	h := newHandle(r, pod.Name)
	if err := h.attach(); err != nil {
		r.removeQuietly(pod.Name)
		return nil, err
	}
	go h.waitForEnd()
	return &warm{h: h, prepared: spec}, nil
}

// warm is a prepared pod waiting in a pool.
type warm struct {
	h        *handle
	prepared sandbox.Spec
}

func (w *warm) ContainerID() string               { return w.h.name }
func (w *warm) Ended() <-chan struct{}            { return w.h.C.Drained() }
func (w *warm) Discard(ctx context.Context) error { return w.h.Destroy(ctx) }

// Launch hands the pod its job: its labels say whose it is now, its memory
// and CPU are resized in place when they differ from the pool's (pods/resize),
// then the job frame goes to its supervisor.
func (w *warm) Launch(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	h, r := w.h, w.h.rt
	if spec.PoolKey() != w.prepared.PoolKey() {
		return nil, fmt.Errorf("warm pod %s has another shape than the job", h.name)
	}
	if h.ended() {
		return nil, fmt.Errorf("warm pod %s ended before its job came", h.name)
	}
	if l, p := spec.Limits, w.prepared.Limits; l.MemoryBytes != p.MemoryBytes || l.NanoCPUs != p.NanoCPUs {
		if err := r.resize(ctx, h.name, spec); err != nil {
			return nil, err
		}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]string{sandbox.LabelJobID: labelValue(spec.JobID), sandbox.LabelKind: labelValue(spec.Kind)},
		"annotations": map[string]string{annJobID: spec.JobID, sandbox.LabelKind: spec.Kind},
	}})
	if _, err := r.core.Pods(r.namespace).Patch(ctx, h.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return nil, r.engineErr(fmt.Errorf("label pod %s with its job: %w", h.name, err))
	}
	// Granted mounts: a copy taken now, at the job's start.
	hm, err := hostMounts(spec.Mounts)
	if err != nil {
		return nil, err
	}
	if err := r.scanMounts(hm); err != nil {
		return nil, err
	}
	if err := r.fillMounts(ctx, h.name, hm); err != nil {
		return nil, err
	}
	// The tunnel and its grant are the job's, never the warm pod's.
	if err := h.openTunnel(ctx, spec); err != nil {
		return nil, err
	}
	if err := h.launch(ctx, spec, out); err != nil {
		if h.tunnel != nil {
			h.tunnel.Close()
		}
		return nil, err
	}
	return h, nil
}

// resize sets the pod's memory and CPU (limits equal to requests) in place
// and waits until the kubelet has applied them.
func (r *Runtime) resize(ctx context.Context, name string, spec sandbox.Spec) error {
	res := r.podFor(spec).Spec.Containers[0].Resources
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"containers": []any{
		map[string]any{"name": containerName, "resources": res},
	}}})
	if _, err := r.core.Pods(r.namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "resize"); err != nil {
		return r.engineErr(fmt.Errorf("resize pod %s: %w", name, err))
	}
	ctx, cancel := context.WithTimeout(ctx, resizeTimeout)
	defer cancel()
	for {
		pod, err := r.core.Pods(r.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return r.engineErr(fmt.Errorf("resize pod %s: %w", name, err))
		}
		if applied(pod, res) {
			return nil
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodResizePending && c.Status == corev1.ConditionTrue && c.Reason == "Infeasible" {
				return fmt.Errorf("resize pod %s: %s", name, c.Message)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("resize pod %s: not applied within %s", name, resizeTimeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// applied says whether the container runs with res (its status says so and
// no resize is pending or in progress).
func applied(pod *corev1.Pod, res corev1.ResourceRequirements) bool {
	for _, c := range pod.Status.Conditions {
		if (c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress) && c.Status == corev1.ConditionTrue {
			return false
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerName || cs.Resources == nil {
			continue
		}
		for k, want := range res.Limits {
			if got, ok := cs.Resources.Limits[k]; !ok || got.Cmp(want) != 0 {
				return false
			}
		}
		return true
	}
	return false
}

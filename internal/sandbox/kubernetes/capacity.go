package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// A pod no node has room for yet (the scheduler's Unschedulable), or one
// the namespace's ResourceQuota refuses, is a job waiting in the queue, not
// a failed start: the start tells its context why (the job shows as
// queued with that reason; the warm pool gives back its idle pods) and
// goes on waiting as long as the job does. A warm pod that does not fit
// fails at once instead, and is removed, so that it never holds a place
// in the scheduler's queue ahead of a job (docs/kubernetes.md).

// quotaRetry is how often a start the namespace's quota refused tries again.
const quotaRetry = 2 * time.Second

// roomWait is one start's wait for room.
type roomWait struct {
	warm     bool        // a warm pod: no room fails at once
	why      string      // the reason it waits now ("": it does not)
	deadline *time.Timer // the start's own deadline, held while it waits
}

// wait tells ctx that the start waits for room (why). It fails a warm
// pod's start, and one whose context nobody listens to waits no longer
// than startTimeout.
func (w *roomWait) wait(ctx context.Context, why string) error {
	if w.warm {
		return fmt.Errorf("%w: %s", sandbox.ErrNoRoom, why)
	}
	if why == w.why {
		return nil
	}
	if !sandbox.WaitingForCapacity(ctx, why) {
		return nil // nobody waits on it: its deadline stands
	}
	if w.why == "" && w.deadline != nil {
		w.deadline.Stop()
	}
	w.why = why
	return nil
}

// placed follows a pod's scheduling: Unschedulable is a wait for room;
// scheduled ends one.
func (w *roomWait) placed(ctx context.Context, p *corev1.Pod) error {
	if why := unschedulable(p); why != "" {
		return w.wait(ctx, "no node has room for it yet: "+why)
	}
	if w.why != "" && p.Spec.NodeName != "" {
		w.why = ""
		sandbox.WaitingForCapacity(ctx, "")
		if w.deadline != nil {
			w.deadline.Reset(startTimeout)
		}
	}
	return nil
}

// unschedulable is the scheduler's message for a pod it found no node for
// ("" when it did not say so).
func unschedulable(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			if c.Message == "" {
				return "the scheduler found no node for it"
			}
			return c.Message
		}
	}
	return ""
}

// exceededQuota says whether err is the namespace's ResourceQuota refusing a pod.
func exceededQuota(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota")
}

// createPod creates pod; while the namespace's quota refuses it, a job's
// start waits and tries again (room), a warm pod's fails.
func (r *Runtime) createPod(ctx context.Context, pod *corev1.Pod, room *roomWait) (*corev1.Pod, error) {
	for {
		p, err := r.core.Pods(r.namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			return p, nil
		}
		if !exceededQuota(err) {
			return nil, r.engineErr(fmt.Errorf("create pod: %w", err))
		}
		if werr := room.wait(ctx, "the namespace's quota has no room for it yet: "+quotaMessage(err)); werr != nil {
			return nil, werr
		}
		if room.why == "" { // nobody waits on this start
			return nil, r.engineErr(fmt.Errorf("create pod: %w", err))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("create pod: waited for the namespace's quota (%s): %w", quotaMessage(err), ctx.Err())
		case <-time.After(quotaRetry):
		}
	}
}

// quotaMessage is the API server's sentence, without its Forbidden prefix.
func quotaMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}

// largestKeep is how long LargestSandbox's answer stands: it is asked at
// every job's submission, and nodes and quotas change far more rarely
// than jobs come (two API calls a job otherwise).
const largestKeep = 30 * time.Second

// largest is LargestSandbox's last answer and when it was read.
type largest struct {
	mu            sync.Mutex
	at            time.Time
	nanoCPUs, mem int64
}

// LargestSandbox is the largest node's allocatable CPU and memory, within
// the namespace's ResourceQuota: one pod never gets more.
func (r *Runtime) LargestSandbox(ctx context.Context) (nanoCPUs, memoryBytes int64, err error) {
	r.largest.mu.Lock()
	defer r.largest.mu.Unlock()
	if !r.largest.at.IsZero() && time.Since(r.largest.at) < largestKeep {
		return r.largest.nanoCPUs, r.largest.mem, nil
	}
	room, err := r.room(ctx)
	if err != nil {
		return 0, 0, err
	}
	r.largest.at = time.Now()
	r.largest.nanoCPUs = minKnown(room.largestCPUs, room.QuotaNanoCPUs)
	r.largest.mem = minKnown(room.largestMemory, room.QuotaMemory)
	return r.largest.nanoCPUs, r.largest.mem, nil
}

// minKnown is the smaller of a and b where 0 is unknown (or no limit).
func minKnown(a, b int64) int64 {
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

// Room is the nodes' allocatable CPU and memory and the namespace's quota.
func (r *Runtime) Room(ctx context.Context) (sandbox.Room, error) {
	room, err := r.room(ctx)
	return room.Room, err
}

// nodeRoom is Room with the largest node's share.
type nodeRoom struct {
	sandbox.Room
	largestCPUs, largestMemory int64
}

// room reads the nodes and the namespace's quotas. What the server's account
// may not read (nodes are cluster-wide) is left unknown (0).
func (r *Runtime) room(ctx context.Context) (nodeRoom, error) {
	var room nodeRoom
	if nodes, err := r.core.Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range nodes.Items {
			room.Nodes++
			cpu, mem := n.Status.Allocatable.Cpu().MilliValue()*1e6, n.Status.Allocatable.Memory().Value()
			room.NanoCPUs += cpu
			room.MemoryBytes += mem
			room.largestCPUs, room.largestMemory = max(room.largestCPUs, cpu), max(room.largestMemory, mem)
		}
	} else if !apierrors.IsForbidden(err) {
		return room, r.engineErr(fmt.Errorf("list nodes: %w", err))
	}
	quotas, err := r.core.ResourceQuotas(r.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return room, nil
		}
		return room, r.engineErr(fmt.Errorf("list resource quotas: %w", err))
	}
	for _, q := range quotas.Items {
		for name, v := range q.Spec.Hard {
			switch name {
			case corev1.ResourceLimitsCPU, corev1.ResourceRequestsCPU, corev1.ResourceCPU:
				room.QuotaNanoCPUs = minKnown(room.QuotaNanoCPUs, v.MilliValue()*1e6)
			case corev1.ResourceLimitsMemory, corev1.ResourceRequestsMemory, corev1.ResourceMemory:
				room.QuotaMemory = minKnown(room.QuotaMemory, v.Value())
			case corev1.ResourcePods:
				room.QuotaPods = minKnown(room.QuotaPods, v.Value())
			}
		}
	}
	return room, nil
}

// NodeRuntime is a node's container runtime as its status reports it.
type NodeRuntime struct {
	Node, Runtime, Kernel string // "localhost", "containerd://1.6.20", "6.18.0"
}

// NodeRuntimes lists each node's container runtime and kernel (doctor):
// the API names the runtime (containerd, CRI-O) but not the runc under it.
func (r *Runtime) NodeRuntimes(ctx context.Context) ([]NodeRuntime, error) {
	nodes, err := r.core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("list nodes: %w", err))
	}
	out := make([]NodeRuntime, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		out = append(out, NodeRuntime{Node: n.Name, Runtime: n.Status.NodeInfo.ContainerRuntimeVersion, Kernel: n.Status.NodeInfo.KernelVersion})
	}
	return out, nil
}

package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// A pod the scheduler marked Unschedulable is a wait for room, told to a
// job's start with the scheduler's words and ended once the pod is bound to
// a node; a warm pod's fails at once; one nobody listens to keeps its
// deadline running.
func TestRoomWaitFollowsScheduling(t *testing.T) {
	pending := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 Insufficient cpu.",
	}}}}
	bound := pending.DeepCopy()
	bound.Spec.NodeName = "localhost"

	var heard []string
	ctx := sandbox.WithCapacityWait(context.Background(), func(why string) { heard = append(heard, why) })
	deadline := time.NewTimer(time.Hour)
	defer deadline.Stop()
	job := &roomWait{deadline: deadline}
	if err := job.placed(ctx, pending); err != nil {
		t.Fatal(err)
	}
	if err := job.placed(ctx, pending); err != nil { // the same reason again: said once
		t.Fatal(err)
	}
	if err := job.placed(ctx, bound); err != nil {
		t.Fatal(err)
	}
	if len(heard) != 2 || !strings.Contains(heard[0], "Insufficient cpu") || heard[1] != "" {
		t.Fatalf("heard %q, want the scheduler's reason once, then the placing", heard)
	}

	if err := (&roomWait{warm: true}).placed(ctx, pending); !errors.Is(err, sandbox.ErrNoRoom) || !strings.Contains(err.Error(), "Insufficient cpu") {
		t.Fatalf("a warm pod without room: %v, want it failed at once", err)
	}
	alone := &roomWait{deadline: deadline}
	if err := alone.placed(context.Background(), pending); err != nil || alone.why != "" {
		t.Fatalf("a start nobody listens to: %v, waiting %q; want its own deadline kept", err, alone.why)
	}
}

// The API server's refusal for a quota is told apart from other refusals.
func TestExceededQuota(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	quota := apierrors.NewForbidden(gr, "p", errorString(`exceeded quota: q, requested: limits.cpu=1, used: limits.cpu=2, limited: limits.cpu=2`))
	if !exceededQuota(quota) || !strings.Contains(quotaMessage(quota), "exceeded quota: q") {
		t.Fatalf("quota refusal: %v / %q", exceededQuota(quota), quotaMessage(quota))
	}
	if exceededQuota(apierrors.NewForbidden(gr, "p", errorString("violates PodSecurity"))) {
		t.Fatal("a PodSecurity refusal read as a quota")
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

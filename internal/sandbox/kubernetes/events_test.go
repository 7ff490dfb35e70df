package kubernetes

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A start that misses its deadline quotes the pod's last events, oldest
// first, whichever timestamp the cluster filled in.
func TestPodEventsSayWhy(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ev := func(reason, msg string, at time.Time, series bool) corev1.Event {
		e := corev1.Event{Reason: reason, Message: msg}
		if series {
			e.EventTime = metav1.NewMicroTime(at)
		} else {
			e.LastTimestamp = metav1.NewTime(at)
		}
		return e
	}
	evs := []corev1.Event{
		ev("Pulled", "image present", t0.Add(3*time.Second), false),
		ev("Scheduled", "assigned to node-1", t0, true),
		ev("FailedCreatePodSandBox", "failed to create the sandbox: "+strings.Repeat("x", 400), t0.Add(5*time.Second), false),
		ev("Created", "created container", t0.Add(4*time.Second), true),
	}
	got := podEvents(evs, 3)
	want := "events: Pulled: image present | Created: created container | FailedCreatePodSandBox: failed to create the sandbox: "
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "…") || strings.Contains(got, "Scheduled") {
		t.Fatalf("podEvents = %q\nwant the last 3, oldest first, long messages cut", got)
	}
	if podEvents(nil, 3) != "no events" {
		t.Error("no events: want it said")
	}
}

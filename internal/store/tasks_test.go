package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// TestTasks: a task is its tenant's (another's lookup is not found, its
// listing leaves it out); it ends once; a working task of a gone server is
// ended as failed, a job's task never (its job says); ended tasks past their
// ttl are pruned.
func TestTasks(t *testing.T) {
	s, _ := openTemp(t)
	alice := tenant.With(context.Background(), tenant.Tenant{Name: "alice"})
	bob := tenant.With(context.Background(), tenant.Tenant{Name: "bob"})
	old := time.Now().Add(-2 * time.Hour)
	for _, task := range []*record.Task{
		{ID: "t-run", Tool: "benchmark_script", Status: record.TaskWorking, ServerID: "gone", TTLMS: 60000, CreatedAt: old, UpdatedAt: old},
		{ID: "t-job", Tool: "run_command", JobID: "t-job", Status: record.TaskWorking, ServerID: "gone", TTLMS: 60000, CreatedAt: old, UpdatedAt: old},
		{ID: "t-new", Tool: "install_packages", Status: record.TaskWorking, ServerID: "alive", TTLMS: 60000, CreatedAt: time.Now(), UpdatedAt: time.Now()},
	} {
		if err := s.CreateTask(alice, task); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.GetTask(bob, "t-run"); !errors.Is(err, record.ErrTaskNotFound) {
		t.Errorf("bob's lookup of alice's task: %v", err)
	}
	if l, _, err := s.ListTasks(bob, "", 0); err != nil || len(l) != 0 {
		t.Errorf("bob's list: %v %v", l, err)
	}
	l, next, err := s.ListTasks(alice, "", 2)
	if err != nil || len(l) != 2 || l[0].ID != "t-new" || next == "" {
		t.Fatalf("alice's first page: %v %q %v", l, next, err)
	}
	if l2, _, err := s.ListTasks(alice, next, 2); err != nil || len(l2) != 1 {
		t.Errorf("alice's second page: %v %v", l2, err)
	}
	n, err := s.FailOrphanTasks(alice, func(server string) bool { return server == "alive" })
	if err != nil || n != 1 {
		t.Fatalf("orphans ended: %d %v (want only t-run)", n, err)
	}
	if got, _ := s.GetTask(alice, "t-run"); got.Status != record.TaskFailed || got.Message == "" {
		t.Errorf("orphan: %+v", got)
	}
	if got, _ := s.GetTask(alice, "t-job"); got.Status != record.TaskWorking {
		t.Errorf("a job's task was ended: %+v", got)
	}
	if ok, err := s.EndTask(alice, "t-new", record.TaskCompleted, "done", []byte(`{"content":[]}`)); !ok || err != nil {
		t.Fatalf("end: %v %v", ok, err)
	}
	if ok, _ := s.EndTask(alice, "t-new", record.TaskCancelled, "late", nil); ok {
		t.Error("a task ended twice")
	}
	if got, _ := s.GetTask(alice, "t-new"); got.Status != record.TaskCompleted || string(got.Result) != `{"content":[]}` {
		t.Errorf("ended task: %+v", got)
	}
	pruned, err := s.PruneTasks(context.Background(), time.Now())
	if err != nil || pruned != 1 {
		t.Errorf("pruned %d %v: want t-run only (ended, past its ttl)", pruned, err)
	}
}

package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/tenant"
)

// TestTenantsSeeOnlyTheirOwn: a tenant's lookups, lists and prunes never
// reach another tenant's jobs or workspaces; an admin's and the server's
// own (no tenant) reach all.
func TestTenantsSeeOnlyTheirOwn(t *testing.T) {
	s, _ := openTemp(t)
	alice := tenant.With(context.Background(), tenant.Tenant{Name: "alice"})
	bob := tenant.With(context.Background(), tenant.Tenant{Name: "bob"})
	admin := tenant.With(context.Background(), tenant.Tenant{Name: "ops", Admin: true})
	a, b := fullJob("00000000-0000-4000-8000-00000000000a"), fullJob("00000000-0000-4000-8000-00000000000b")
	if err := s.CreateJob(alice, a); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateJob(bob, b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetJob(bob, a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("bob reads alice's job: %v", err)
	}
	if _, err := s.GetJob(alice, a.ID); err != nil {
		t.Fatal(err)
	}
	for ctx, want := range map[context.Context]int{alice: 1, bob: 1, admin: 2, context.Background(): 2} {
		jobs, _, err := s.ListJobs(ctx, ListFilter{})
		if err != nil || len(jobs) != want {
			t.Fatalf("list: %d jobs (%v), want %d", len(jobs), err, want)
		}
	}
	if ids, err := s.DeleteJobs(bob, PruneFilter{}); err != nil || len(ids) != 1 || ids[0] != b.ID {
		t.Fatalf("bob's prune removed %v (%v)", ids, err)
	}
	if _, err := s.GetJob(admin, a.ID); err != nil {
		t.Fatalf("alice's job after bob's prune: %v", err)
	}
	if err := s.CreateWorkspace(alice, &Workspace{Name: "proj", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetWorkspace(bob, "proj"); !errors.Is(err, ErrWorkspaceNotFound) {
		t.Fatalf("bob sees alice's workspace: %v", err)
	}
	if l, _ := s.ListWorkspaces(bob); len(l) != 0 {
		t.Fatalf("bob lists %d workspaces", len(l))
	}
	if l, _ := s.ListWorkspaces(admin); len(l) != 1 {
		t.Fatalf("admin lists %d workspaces", len(l))
	}
}

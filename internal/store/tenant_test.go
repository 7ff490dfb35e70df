package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
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
	if _, err := s.GetJob(bob, a.ID); !errors.Is(err, record.ErrJobNotFound) {
		t.Fatalf("bob reads alice's job: %v", err)
	}
	if _, err := s.GetJob(alice, a.ID); err != nil {
		t.Fatal(err)
	}
	for ctx, want := range map[context.Context]int{alice: 1, bob: 1, admin: 2, context.Background(): 2} {
		jobs, _, err := s.ListJobs(ctx, record.ListFilter{})
		if err != nil || len(jobs) != want {
			t.Fatalf("list: %d jobs (%v), want %d", len(jobs), err, want)
		}
	}
	if ids, err := s.DeleteJobs(bob, record.PruneFilter{}); err != nil || len(ids) != 1 || ids[0] != b.ID {
		t.Fatalf("bob's prune removed %v (%v)", ids, err)
	}
	if _, err := s.GetJob(admin, a.ID); err != nil {
		t.Fatalf("alice's job after bob's prune: %v", err)
	}
	if err := s.CreateWorkspace(alice, &record.Workspace{Name: "proj", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetWorkspace(bob, "proj"); !errors.Is(err, record.ErrWorkspaceNotFound) {
		t.Fatalf("bob sees alice's workspace: %v", err)
	}
	if l, _ := s.ListWorkspaces(bob); len(l) != 0 {
		t.Fatalf("bob lists %d workspaces", len(l))
	}
	if l, _ := s.ListWorkspaces(admin); len(l) != 1 {
		t.Fatalf("admin lists %d workspaces", len(l))
	}
}

// TestTenantKeys: a workspace name is unique per tenant, so bob makes his
// own "proj" beside alice's (never "already exists"); a new workspace under
// an old name has a new identity; writes under one tenant never reach
// another's rows; an admin names another tenant's workspace TENANT/NAME
// (THREATS 104).
func TestTenantKeys(t *testing.T) {
	s, _ := openTemp(t)
	alice := tenant.With(context.Background(), tenant.Tenant{Name: "alice"})
	bob := tenant.With(context.Background(), tenant.Tenant{Name: "bob"})
	admin := tenant.With(context.Background(), tenant.Tenant{Name: "ops", Admin: true})
	a := &record.Workspace{Name: "proj", Language: "python"}
	if err := s.CreateWorkspace(alice, a); err != nil {
		t.Fatal(err)
	}
	b := &record.Workspace{Name: "proj", Language: "bash"}
	if err := s.CreateWorkspace(bob, b); err != nil {
		t.Fatalf("bob's proj beside alice's: %v", err)
	}
	if a.ID == b.ID || a.Tenant != "alice" || b.Tenant != "bob" {
		t.Fatalf("ids %q %q, tenants %q %q", a.ID, b.ID, a.Tenant, b.Tenant)
	}
	if got, err := s.GetWorkspace(bob, "proj"); err != nil || got.ID != b.ID || got.Language != "bash" {
		t.Fatalf("bob's proj: %+v %v", got, err)
	}
	if _, err := s.GetWorkspace(bob, "alice/proj"); !errors.Is(err, record.ErrWorkspaceNotFound) {
		t.Fatalf("bob names alice/proj: %v", err)
	}
	if got, err := s.GetWorkspace(admin, "alice/proj"); err != nil || got.ID != a.ID {
		t.Fatalf("admin's alice/proj: %+v %v", got, err)
	}
	// Bob's writes with alice's id find nothing, and change nothing.
	forged := *b
	forged.ID, forged.Language = a.ID, "forged"
	for what, err := range map[string]error{
		"update": s.UpdateWorkspace(bob, &forged),
		"touch":  s.TouchWorkspace(bob, a.ID, time.Now()),
		"delete": s.DeleteWorkspace(bob, a.ID),
	} {
		if !errors.Is(err, record.ErrWorkspaceNotFound) {
			t.Fatalf("bob's %s of alice's workspace: %v", what, err)
		}
	}
	if got, err := s.GetWorkspaceByID(alice, a.ID); err != nil || got.Language != "python" {
		t.Fatalf("alice's workspace after bob's writes: %+v %v", got, err)
	}
	// A job's writes: the same.
	j := fullJob("00000000-0000-4000-8000-0000000000aa")
	if err := s.CreateJob(alice, j); err != nil {
		t.Fatal(err)
	}
	j2 := *j
	j2.Status = "killed"
	if err := s.UpdateJob(bob, &j2); !errors.Is(err, record.ErrJobNotFound) {
		t.Fatalf("bob's update of alice's job: %v", err)
	}
	if err := s.SetReadCursors(bob, j.ID, 1, 1, 1); !errors.Is(err, record.ErrJobNotFound) {
		t.Fatalf("bob's read cursors on alice's job: %v", err)
	}
	if got, _ := s.GetJob(alice, j.ID); got.Status != j.Status || got.ReadCursor != j.ReadCursor {
		t.Fatalf("alice's job after bob's writes: %+v", got)
	}
	// Deleted and made again: a new identity.
	if err := s.DeleteWorkspace(alice, a.ID); err != nil {
		t.Fatal(err)
	}
	again := &record.Workspace{Name: "proj"}
	if err := s.CreateWorkspace(alice, again); err != nil || again.ID == a.ID {
		t.Fatalf("alice's new proj: id %q (old %q), %v", again.ID, a.ID, err)
	}
}

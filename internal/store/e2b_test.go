package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// TestE2BSandboxes: a sandbox is its tenant's (another's lookup is not
// found, its listing and delete leave it alone); a put again moves only its
// timeout, and never across tenants; the reaper sees every tenant's due ones.
func TestE2BSandboxes(t *testing.T) {
	s, _ := openTemp(t)
	alice := tenant.With(context.Background(), tenant.Tenant{Name: "alice"})
	bob := tenant.With(context.Background(), tenant.Tenant{Name: "bob"})
	now := time.Now()
	a := &record.E2BSandbox{ID: "e2b-a", Template: "base", Token: "tok-a", Envs: map[string]string{"K": "v"},
		StartedAt: now, EndAt: now.Add(time.Minute)}
	if err := s.PutE2BSandbox(alice, a); err != nil {
		t.Fatal(err)
	}
	if err := s.PutE2BSandbox(bob, &record.E2BSandbox{ID: "e2b-b", Template: "bash", Token: "tok-b", StartedAt: now, EndAt: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.E2BSandbox(bob, "e2b-a"); !errors.Is(err, record.ErrE2BSandboxNotFound) {
		t.Errorf("bob's lookup of alice's sandbox: %v", err)
	}
	got, err := s.E2BSandbox(alice, "e2b-a")
	if err != nil || got.Tenant != "alice" || got.Token != "tok-a" || got.Envs["K"] != "v" || got.Metadata == nil || !got.EndAt.Equal(a.EndAt.UTC()) {
		t.Fatalf("alice's sandbox: %+v %v", got, err)
	}
	if l, err := s.ListE2BSandboxes(bob); err != nil || len(l) != 1 || l[0].ID != "e2b-b" {
		t.Errorf("bob's list: %v %v", l, err)
	}
	// Bob cannot move alice's timeout by putting her id, nor delete it.
	if err := s.PutE2BSandbox(bob, &record.E2BSandbox{ID: "e2b-a", Token: "x", StartedAt: now, EndAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteE2BSandbox(bob, "e2b-a"); err != nil {
		t.Fatal(err)
	}
	got, err = s.E2BSandbox(alice, "e2b-a")
	if err != nil || !got.EndAt.Equal(a.EndAt.UTC()) || got.Token != "tok-a" {
		t.Fatalf("alice's sandbox after bob's put and delete: %+v %v", got, err)
	}
	a.EndAt = now.Add(2 * time.Hour)
	if err := s.PutE2BSandbox(alice, a); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.E2BSandboxForToken(context.Background(), "e2b-a"); got == nil || !got.EndAt.Equal(a.EndAt.UTC()) {
		t.Fatalf("the timeout was not moved: %+v", got)
	}
	due, err := s.DueE2BSandboxes(context.Background(), now)
	if err != nil || len(due) != 1 || due[0].ID != "e2b-b" || due[0].Tenant != "bob" {
		t.Fatalf("due: %v %v", due, err)
	}
	if err := s.DeleteE2BSandbox(alice, "e2b-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.E2BSandboxForToken(context.Background(), "e2b-a"); !errors.Is(err, record.ErrE2BSandboxNotFound) {
		t.Errorf("deleted sandbox: %v", err)
	}
}

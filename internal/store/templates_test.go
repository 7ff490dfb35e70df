package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

// TestTemplates: the policy's templates (tenant "") are everyone's; a
// snapshot is its tenant's alone, found before a policy template of its
// name; a rebuild replaces the record; the budget's view lists them all.
func TestTemplates(t *testing.T) {
	s, _ := openTemp(t)
	ctx := context.Background()
	alice := tenant.With(ctx, tenant.Tenant{Name: "alice"})
	bob := tenant.With(ctx, tenant.Tenant{Name: "bob"})
	now := time.Now()
	for _, r := range []*record.Template{
		{Name: "stack", Tenant: "", Source: record.TemplateDockerfile, Language: "python", Key: "k1", Image: "sandboxer/template-stack:k1", CreatedAt: now, UsedAt: now},
		{Name: "mine", Tenant: "alice", Source: record.TemplateSnapshot, Language: "bash", Key: "k2", Image: "sandboxer/snapshot-a-mine:k2", Workspace: "w", CreatedAt: now, UsedAt: now},
	} {
		if err := s.PutTemplate(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := s.GetTemplate(bob, "stack"); err != nil || r.Language != "python" {
		t.Fatalf("bob's view of the policy's template: %v %v", r, err)
	}
	if _, err := s.GetTemplate(bob, "mine"); !errors.Is(err, record.ErrTemplateNotFound) {
		t.Fatalf("bob found alice's snapshot: %v", err)
	}
	if r, err := s.GetTemplate(alice, "mine"); err != nil || r.Workspace != "w" {
		t.Fatalf("alice's snapshot: %v %v", r, err)
	}
	if l, _ := s.ListTemplates(bob, false); len(l) != 1 {
		t.Fatalf("bob lists %d templates, want the policy's one", len(l))
	}
	if l, _ := s.ListTemplates(bob, true); len(l) != 2 {
		t.Fatalf("the budget's view lists %d, want 2", len(l))
	}
	rebuilt := &record.Template{Name: "stack", Tenant: "", Source: record.TemplateDockerfile, Language: "python", Key: "k3", Image: "sandboxer/template-stack:k3", CreatedAt: now, UsedAt: now}
	if err := s.PutTemplate(ctx, rebuilt); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.GetTemplate(alice, "stack"); r.Key != "k3" {
		t.Fatalf("the rebuild did not replace the record: %v", r)
	}
	if err := s.TouchTemplate(ctx, "alice", "mine"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTemplate(ctx, "alice", "mine"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTemplate(alice, "mine"); !errors.Is(err, record.ErrTemplateNotFound) {
		t.Fatalf("deleted snapshot still found: %v", err)
	}
}

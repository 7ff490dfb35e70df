package blocklist

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/store"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

func openStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestListEditsOff(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "db"))
	l, err := New([]string{"rm"}, st, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Block(ctx, "curl", "", "x"); !errors.Is(err, ErrEditsOff) {
		t.Fatalf("Block with edits off: %v", err)
	}
	if err := l.Unblock(ctx, "rm"); !errors.Is(err, ErrEditsOff) {
		t.Fatalf("Unblock with edits off: %v", err)
	}
	if e := l.Entries(ctx); len(e) != 1 || e[0].Command != "rm" || e[0].Source != SourcePolicy {
		t.Fatalf("entries changed: %+v", e)
	}
	if d, _ := l.Check(ctx, "/bin/rm x"); d.Allowed {
		t.Fatal("policy entry not enforced")
	}
}

func TestListEditsOnPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	st := openStore(t, path)
	l, err := New([]string{"rm"}, st, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if isNew, err := l.Block(ctx, "curl", "no downloads", "test 1.0"); err != nil || !isNew {
		t.Fatalf("Block: %v %v", isNew, err)
	}
	if d, _ := l.Check(ctx, "curl x"); d.Allowed || d.Rule.Source != SourceAgent || d.Rule.Reason != "no downloads" {
		t.Fatalf("agent entry not enforced: %+v", d)
	}
	if err := l.Unblock(ctx, "rm"); !errors.Is(err, ErrPolicyEntry) {
		t.Fatalf("Unblock policy entry: %v", err)
	}
	if _, err := l.Block(ctx, "rm", "", "x"); err == nil {
		t.Fatal("blocking a policy entry again was accepted")
	}
	if err := l.Unblock(ctx, "wget"); !errors.Is(err, ErrNotBlocked) {
		t.Fatalf("Unblock unknown: %v", err)
	}
	for _, bad := range []string{"", "/usr/bin/rm", "rm;ls", "-rf", strings.Repeat("a", 65), "r m"} {
		if _, err := l.Block(ctx, bad, "", "x"); !errors.Is(err, ErrBadName) {
			t.Errorf("Block(%q): %v", bad, err)
		}
	}
	if _, err := l.Block(ctx, "ok", "bad\x1b[31m", "x"); !errors.Is(err, ErrBadReason) {
		t.Errorf("control characters in reason: %v", err)
	}
	// A restart (a new List on the same database) keeps the agent's entry.
	st.Close()
	st2 := openStore(t, path)
	l2, err := New([]string{"rm"}, st2, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	es := l2.Entries(ctx)
	if len(es) != 2 || es[0].Command != "curl" || es[0].Source != SourceAgent || es[0].AddedBy != "test 1.0" || es[1].Source != SourcePolicy {
		t.Fatalf("after restart: %+v", es)
	}
	if err := l2.Unblock(ctx, "curl"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l2.Check(ctx, "curl x"); !d.Allowed {
		t.Fatal("unblocked command still refused")
	}
}

func TestListRejectsBadPolicyNames(t *testing.T) {
	if _, err := New([]string{"/bin/rm"}, nil, false, nil); err == nil {
		t.Fatal("a path was accepted as a policy entry")
	}
	var l *List
	if d, err := l.Check(context.Background(), "rm x"); err != nil || !d.Allowed {
		t.Fatal("nil list must allow")
	}
}

// TestListEntriesAreTheirTenants: an agent's entry applies to its tenant
// only, another tenant cannot see or lift it, and an admin's entry applies
// to every tenant and only an admin lifts it (THREATS 104).
func TestListEntriesAreTheirTenants(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "db"))
	l, err := New(nil, st, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	alice := tenant.With(context.Background(), tenant.Tenant{Name: "alice"})
	bob := tenant.With(context.Background(), tenant.Tenant{Name: "bob"})
	admin := tenant.With(context.Background(), tenant.Tenant{Name: "ops", Admin: true})
	if _, err := l.Block(alice, "curl", "alice's rule", "a"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Check(alice, "curl x"); d.Allowed {
		t.Fatal("alice's entry does not apply to alice")
	}
	if d, _ := l.Check(bob, "curl x"); !d.Allowed {
		t.Fatal("alice's entry applies to bob")
	}
	if es := l.Entries(bob); len(es) != 0 {
		t.Fatalf("bob sees alice's entries: %+v", es)
	}
	if err := l.Unblock(bob, "curl"); !errors.Is(err, ErrNotBlocked) {
		t.Fatalf("bob's unblock of alice's entry: %v", err)
	}
	if d, _ := l.Check(alice, "curl x"); d.Allowed {
		t.Fatal("bob lifted alice's entry")
	}
	// Bob's own entry of the same name is his, new.
	if isNew, err := l.Block(bob, "curl", "bob's rule", "b"); err != nil || !isNew {
		t.Fatalf("bob's own curl entry: new %v, %v", isNew, err)
	}
	if err := l.Unblock(bob, "curl"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Check(alice, "curl x"); d.Allowed || d.Rule.Reason != "alice's rule" {
		t.Fatalf("bob's unblock of his own entry touched alice's: %+v", d)
	}
	// An admin's entry is everyone's; only an admin lifts it.
	if _, err := l.Block(admin, "wget", "ops", "o"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Check(bob, "wget x"); d.Allowed {
		t.Fatal("the admin's entry does not apply to bob")
	}
	if err := l.Unblock(bob, "wget"); !errors.Is(err, ErrAdminEntry) {
		t.Fatalf("bob lifted an admin's entry: %v", err)
	}
	if err := l.Unblock(admin, "wget"); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.Check(bob, "wget x"); !d.Allowed {
		t.Fatal("the admin's unblock did not lift it")
	}
}

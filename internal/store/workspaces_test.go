package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
)

func TestWorkspaceCRUD(t *testing.T) {
	s, path := openTemp(t)
	ctx := context.Background()
	created := time.Unix(1700000000, 123).UTC()
	w := &record.Workspace{Name: "proj-1", Language: "python", Image: "img:1", ContainerID: "c1", Volume: "v1",
		State: "running", Limits: record.WorkspaceLimits{MemoryBytes: 1 << 30, NanoCPUs: 1e9, Pids: 256, DiskBytes: 1 << 29},
		ServerID: "srv", CreatedAt: created, Details: record.WorkspaceDetails{Installed: map[string][]string{"pip": {"x"}}}}
	if err := s.CreateWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWorkspace(ctx, &record.Workspace{Name: "proj-1"}); !errors.Is(err, record.ErrWorkspaceExists) {
		t.Fatalf("duplicate create: %v, want record.ErrWorkspaceExists", err)
	}
	got, err := s.GetWorkspace(ctx, "proj-1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Fatalf("got %+v\nwant %+v", got, w)
	}
	used := time.Unix(1700000100, 0).UTC()
	got.State, got.ContainerID = "stopped", "c2"
	if err := s.UpdateWorkspace(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchWorkspace(ctx, got.ID, used); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWorkspace(ctx, &record.Workspace{Name: "a-first", Language: "bash"}); err != nil {
		t.Fatal(err)
	}
	// Survives a reopen.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	list, err := s2.ListWorkspaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "a-first" || list[1].Name != "proj-1" {
		t.Fatalf("list: %+v", list)
	}
	if p := list[1]; p.State != "stopped" || p.ContainerID != "c2" || !p.LastUsedAt.Equal(used) || p.Limits.DiskBytes != 1<<29 {
		t.Fatalf("updated record: %+v", p)
	}
	if list[0].LastUsedAt.IsZero() != true {
		t.Fatalf("never used workspace has a last use: %v", list[0].LastUsedAt)
	}
	if n, err := s2.CountWorkspaces(ctx); err != nil || n != 2 {
		t.Fatalf("count = %d, %v", n, err)
	}
	if err := s2.DeleteWorkspace(ctx, got.ID); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"get":    func() error { _, err := s2.GetWorkspace(ctx, "proj-1"); return err }(),
		"delete": s2.DeleteWorkspace(ctx, got.ID),
		"touch":  s2.TouchWorkspace(ctx, got.ID, used),
		"update": s2.UpdateWorkspace(ctx, &record.Workspace{Name: "proj-1"}),
	} {
		if !errors.Is(err, record.ErrWorkspaceNotFound) {
			t.Errorf("%s of a deleted workspace: %v, want record.ErrWorkspaceNotFound", name, err)
		}
	}
}

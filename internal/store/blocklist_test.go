package store

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
)

func TestBlockedCommandsCRUD(t *testing.T) {
	s, path := openTemp(t)
	ctx := context.Background()
	if got, err := s.BlockedCommands(ctx); err != nil || len(got) != 0 {
		t.Fatalf("fresh store: %v, %v", got, err)
	}
	at := time.Unix(1700000000, 5).UTC()
	if isNew, err := s.PutBlockedCommand(ctx, record.BlockedCommand{Command: "rm", Reason: "no deleting", AddedBy: "client 1.0", AddedAt: at}); err != nil || !isNew {
		t.Fatalf("put rm: %v, %v", isNew, err)
	}
	if isNew, err := s.PutBlockedCommand(ctx, record.BlockedCommand{Command: "curl"}); err != nil || !isNew {
		t.Fatalf("put curl: %v, %v", isNew, err)
	}
	if isNew, err := s.PutBlockedCommand(ctx, record.BlockedCommand{Command: "rm", Reason: "still no", AddedBy: "other", AddedAt: at}); err != nil || isNew {
		t.Fatalf("put rm again: %v, %v", isNew, err)
	}
	got, err := s.BlockedCommands(ctx)
	if err != nil || len(got) != 2 || got[0].Command != "curl" || got[1].Command != "rm" {
		t.Fatalf("list: %+v, %v", got, err)
	}
	if got[1].Reason != "still no" || got[1].AddedBy != "other" || !got[1].AddedAt.Equal(at) {
		t.Fatalf("rm entry: %+v", got[1])
	}
	if got[0].AddedAt.IsZero() {
		t.Fatalf("curl entry has no time: %+v", got[0])
	}
	if ok, err := s.DeleteBlockedCommand(ctx, "", "rm"); err != nil || !ok {
		t.Fatalf("delete rm: %v, %v", ok, err)
	}
	if ok, err := s.DeleteBlockedCommand(ctx, "", "rm"); err != nil || ok {
		t.Fatalf("delete rm twice: %v, %v", ok, err)
	}
	// Entries survive a reopen.
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err = s2.BlockedCommands(ctx)
	if err != nil || len(got) != 1 || got[0].Command != "curl" {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
}

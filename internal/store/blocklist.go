package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
)

// BlockedCommands returns every stored entry of every tenant, by tenant and
// command name (the block list keeps them all and applies each tenant's).
func (s *Store) BlockedCommands(ctx context.Context) ([]record.BlockedCommand, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tenant, command, reason, added_by, added_at FROM blocked_commands ORDER BY tenant, command`)
	if err != nil {
		return nil, fmt.Errorf("store: list blocked commands: %w", err)
	}
	defer rows.Close()
	var out []record.BlockedCommand
	for rows.Next() {
		var b record.BlockedCommand
		var at sql.NullInt64
		if err := rows.Scan(&b.Tenant, &b.Command, &b.Reason, &b.AddedBy, &at); err != nil {
			return nil, fmt.Errorf("store: list blocked commands: %w", err)
		}
		b.AddedAt = timeFromDB(at)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list blocked commands: %w", err)
	}
	return out, nil
}

// PutBlockedCommand adds b.Tenant's entry, or replaces the reason and author
// of that tenant's existing one. It reports whether the entry was new.
func (s *Store) PutBlockedCommand(ctx context.Context, b record.BlockedCommand) (bool, error) {
	if b.AddedAt.IsZero() {
		b.AddedAt = time.Now()
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("store: block command: %w", err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM blocked_commands WHERE tenant = ? AND command = ?`, b.Tenant, b.Command).Scan(&n); err != nil {
		return false, fmt.Errorf("store: block command: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO blocked_commands (tenant, command, reason, added_by, added_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(tenant, command) DO UPDATE SET reason = excluded.reason, added_by = excluded.added_by, added_at = excluded.added_at`,
		b.Tenant, b.Command, b.Reason, b.AddedBy, timeToDB(b.AddedAt)); err != nil {
		return false, fmt.Errorf("store: block command: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("store: block command: %w", err)
	}
	return n == 0, nil
}

// DeleteBlockedCommand removes tenant's entry ("" the one for every tenant)
// and reports whether it existed.
func (s *Store) DeleteBlockedCommand(ctx context.Context, tenant, command string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM blocked_commands WHERE tenant = ? AND command = ?`, tenant, command)
	if err != nil {
		return false, fmt.Errorf("store: unblock command: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store: unblock command: %w", err)
	}
	return n > 0, nil
}

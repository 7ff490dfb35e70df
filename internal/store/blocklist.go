package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// BlockedCommand is a block-list entry an agent added (the operator's own
// entries live in the policy file, not here).
type BlockedCommand struct {
	// Tenant is whose entry it is, and whom it applies to: "" for every
	// tenant (an admin's), else the tenant that added it.
	Tenant  string
	Command string
	Reason  string
	AddedBy string // who added it, e.g. the MCP client's name
	AddedAt time.Time
}

// BlockedCommands returns every stored entry of every tenant, by tenant and
// command name (the block list keeps them all and applies each tenant's).
func (s *Store) BlockedCommands(ctx context.Context) ([]BlockedCommand, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tenant, command, reason, added_by, added_at FROM blocked_commands ORDER BY tenant, command`)
	if err != nil {
		return nil, fmt.Errorf("store: list blocked commands: %w", err)
	}
	defer rows.Close()
	var out []BlockedCommand
	for rows.Next() {
		var b BlockedCommand
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
func (s *Store) PutBlockedCommand(ctx context.Context, b BlockedCommand) (bool, error) {
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

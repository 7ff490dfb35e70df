package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

const e2bSelect = `id, tenant, template, token, envs, metadata, started_at, end_at`

// PutE2BSandbox stores an E2B sandbox as ctx's tenant's, replacing its
// earlier record (a new timeout).
func (s *Store) PutE2BSandbox(ctx context.Context, sb *record.E2BSandbox) error {
	sb.Tenant = tenant.Owner(ctx)
	envs, err := json.Marshal(orEmpty(sb.Envs))
	if err != nil {
		return err
	}
	md, err := json.Marshal(orEmpty(sb.Metadata))
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO e2b_sandboxes (`+e2bSelect+`) VALUES (?,?,?,?,?,?,?,?)
		ON CONFLICT (id) DO UPDATE SET end_at = excluded.end_at WHERE tenant = excluded.tenant`,
		sb.ID, sb.Tenant, sb.Template, sb.Token, string(envs), string(md), sb.StartedAt.UnixNano(), sb.EndAt.UnixNano())
	if err != nil {
		return fmt.Errorf("store: put sandbox %s: %w", sb.ID, err)
	}
	return nil
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// E2BSandbox returns ctx's tenant's sandbox id (record.ErrE2BSandboxNotFound
// for another tenant's, as for a missing one: an E2B key reaches its own).
func (s *Store) E2BSandbox(ctx context.Context, id string) (*record.E2BSandbox, error) {
	return s.e2bSandbox(ctx, `id = ? AND tenant = ?`, id, tenant.Owner(ctx))
}

// E2BSandboxForToken returns sandbox id for the in-sandbox API, whose
// credential is the sandbox's own access token, not a tenant's key: the
// caller compares token with the record's in constant time before any use.
func (s *Store) E2BSandboxForToken(ctx context.Context, id string) (*record.E2BSandbox, error) {
	return s.e2bSandbox(ctx, `id = ?`, id)
}

func (s *Store) e2bSandbox(ctx context.Context, where string, args ...any) (*record.E2BSandbox, error) {
	sb, err := scanE2BSandbox(s.db.QueryRowContext(ctx, `SELECT `+e2bSelect+` FROM e2b_sandboxes WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %v", record.ErrE2BSandboxNotFound, args[0])
	}
	if err != nil {
		return nil, fmt.Errorf("store: get sandbox %v: %w", args[0], err)
	}
	return sb, nil
}

// ListE2BSandboxes lists ctx's tenant's sandboxes by id.
func (s *Store) ListE2BSandboxes(ctx context.Context) ([]*record.E2BSandbox, error) {
	return s.e2bSandboxes(ctx, `tenant = ? ORDER BY id`, tenant.Owner(ctx))
}

// DueE2BSandboxes lists every tenant's sandboxes whose timeout has passed
// at now (the reaper's view).
func (s *Store) DueE2BSandboxes(ctx context.Context, now time.Time) ([]*record.E2BSandbox, error) {
	return s.e2bSandboxes(ctx, `end_at < ? ORDER BY end_at`, now.UnixNano())
}

func (s *Store) e2bSandboxes(ctx context.Context, where string, args ...any) ([]*record.E2BSandbox, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+e2bSelect+` FROM e2b_sandboxes WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []*record.E2BSandbox
	for rows.Next() {
		sb, err := scanE2BSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

// DeleteE2BSandbox forgets ctx's tenant's sandbox id.
func (s *Store) DeleteE2BSandbox(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM e2b_sandboxes WHERE id = ? AND tenant = ?`, id, tenant.Owner(ctx))
	if err != nil {
		return fmt.Errorf("store: delete sandbox %s: %w", id, err)
	}
	return nil
}

func scanE2BSandbox(row scanner) (*record.E2BSandbox, error) {
	var sb record.E2BSandbox
	var envs, md string
	var started, end int64
	if err := row.Scan(&sb.ID, &sb.Tenant, &sb.Template, &sb.Token, &envs, &md, &started, &end); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(envs), &sb.Envs); err != nil {
		return nil, fmt.Errorf("sandbox %s envs: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(md), &sb.Metadata); err != nil {
		return nil, fmt.Errorf("sandbox %s metadata: %w", sb.ID, err)
	}
	sb.StartedAt, sb.EndAt = time.Unix(0, started).UTC(), time.Unix(0, end).UTC()
	return &sb, nil
}

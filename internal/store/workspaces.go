package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

const workspaceColumns = `name, language, image, container_id, volume, state, limits, server_id, created_at, last_used_at, details, id, tenant`

func workspaceArgs(w *record.Workspace) ([]any, error) {
	limits, err := json.Marshal(w.Limits)
	if err != nil {
		return nil, err
	}
	details, err := json.Marshal(w.Details)
	if err != nil {
		return nil, err
	}
	return []any{w.Name, w.Language, w.Image, w.ContainerID, w.Volume, w.State, string(limits),
		w.ServerID, w.CreatedAt.UnixNano(), timeToDB(w.LastUsedAt), string(details), w.ID, w.Tenant}, nil
}

func scanWorkspace(sc scanner) (*record.Workspace, error) {
	var w record.Workspace
	var created int64
	var used sql.NullInt64
	var limits, details string
	if err := sc.Scan(&w.Name, &w.Language, &w.Image, &w.ContainerID, &w.Volume, &w.State, &limits,
		&w.ServerID, &created, &used, &details, &w.ID, &w.Tenant); err != nil {
		return nil, err
	}
	w.CreatedAt = time.Unix(0, created).UTC()
	w.LastUsedAt = timeFromDB(used)
	if err := json.Unmarshal([]byte(limits), &w.Limits); err != nil {
		return nil, fmt.Errorf("store: workspace %s limits: %w", w.Name, err)
	}
	if err := json.Unmarshal([]byte(details), &w.Details); err != nil {
		return nil, fmt.Errorf("store: workspace %s details: %w", w.Name, err)
	}
	return &w, nil
}

// CreateWorkspace stores a new workspace of ctx's tenant, giving it its
// Tenant and, unless the caller chose one, its ID; ErrWorkspaceExists when
// the tenant has one of that name.
func (s *Store) CreateWorkspace(ctx context.Context, w *record.Workspace) error {
	if w == nil || w.Name == "" {
		return errors.New("store: CreateWorkspace: name is required")
	}
	if w.CreatedAt.IsZero() {
		w.CreatedAt = time.Now()
	}
	if w.ID == "" {
		w.ID = uuid.NewString()
	}
	w.Tenant = tenant.Owner(ctx)
	args, err := workspaceArgs(w)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO workspaces (`+workspaceColumns+`) VALUES (`+placeholders(len(args))+`)`, args...)
	if err != nil {
		if code, ok := sqliteCode(err); ok && code == sqliteConstraintPrimaryKey {
			return fmt.Errorf("%w: %s", record.ErrWorkspaceExists, w.Name)
		}
		return fmt.Errorf("store: create workspace %s: %w", w.Name, err)
	}
	return nil
}

// workspaceByID scopes a statement to workspace id, within ctx's tenant.
func workspaceByID(ctx context.Context, id string) (string, []any) {
	return tenantScope(ctx, `id = ?`, id)
}

// UpdateWorkspace overwrites every field but ID and Tenant of workspace
// w.ID; ErrWorkspaceNotFound when ctx's tenant has none such.
func (s *Store) UpdateWorkspace(ctx context.Context, w *record.Workspace) error {
	if w == nil {
		return errors.New("store: UpdateWorkspace: nil workspace")
	}
	args, err := workspaceArgs(w)
	if err != nil {
		return err
	}
	where, whereArgs := workspaceByID(ctx, w.ID)
	res, err := s.db.ExecContext(ctx, `UPDATE workspaces SET name = ?, language = ?, image = ?, container_id = ?, volume = ?,
		state = ?, limits = ?, server_id = ?, created_at = ?, last_used_at = ?, details = ? WHERE `+where,
		append(args[:11:11], whereArgs...)...)
	if err != nil {
		return fmt.Errorf("store: update workspace %s: %w", w.Name, err)
	}
	return workspaceAffected(res, w.Name)
}

func workspaceAffected(res sql.Result, name string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: workspace %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", record.ErrWorkspaceNotFound, name)
	}
	return nil
}

// GetWorkspace returns ctx's tenant's workspace of that name. Where ctx may
// see every tenant's (an admin, the server's own work), "TENANT/NAME" names
// another tenant's. ErrWorkspaceNotFound when there is none.
func (s *Store) GetWorkspace(ctx context.Context, name string) (*record.Workspace, error) {
	owner, plain := tenant.Owner(ctx), name
	if t, n, ok := strings.Cut(name, "/"); ok {
		if tenant.Scope(ctx) != "" {
			return nil, fmt.Errorf("%w: %s", record.ErrWorkspaceNotFound, name)
		}
		owner, plain = t, n
	}
	return s.getWorkspace(ctx, name, `tenant = ? AND name = ?`, owner, plain)
}

// GetWorkspaceByID returns the workspace with that ID (within ctx's tenant).
func (s *Store) GetWorkspaceByID(ctx context.Context, id string) (*record.Workspace, error) {
	where, args := workspaceByID(ctx, id)
	return s.getWorkspace(ctx, id, where, args...)
}

func (s *Store) getWorkspace(ctx context.Context, what, where string, args ...any) (*record.Workspace, error) {
	w, err := scanWorkspace(s.db.QueryRowContext(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", record.ErrWorkspaceNotFound, what)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get workspace %s: %w", what, err)
	}
	return w, nil
}

// ListWorkspaces returns every workspace (of ctx's tenant), by tenant and name.
func (s *Store) ListWorkspaces(ctx context.Context) ([]*record.Workspace, error) {
	where, args := tenantScope(ctx, `1 = 1`)
	rows, err := s.db.QueryContext(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE `+where+` ORDER BY tenant, name`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list workspaces: %w", err)
	}
	defer rows.Close()
	var out []*record.Workspace
	for rows.Next() {
		w, err := scanWorkspace(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// CountWorkspaces returns how many workspaces exist (every tenant's: the
// policy's workspaces.max bounds the host).
func (s *Store) CountWorkspaces(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM workspaces`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count workspaces: %w", err)
	}
	return n, nil
}

// TouchWorkspace sets workspace id's last use.
func (s *Store) TouchWorkspace(ctx context.Context, id string, at time.Time) error {
	where, args := workspaceByID(ctx, id)
	res, err := s.db.ExecContext(ctx, `UPDATE workspaces SET last_used_at = ? WHERE `+where, append([]any{timeToDB(at)}, args...)...)
	if err != nil {
		return fmt.Errorf("store: touch workspace %s: %w", id, err)
	}
	return workspaceAffected(res, id)
}

// DeleteWorkspace removes workspace id's record; ErrWorkspaceNotFound when
// ctx's tenant has none such.
func (s *Store) DeleteWorkspace(ctx context.Context, id string) error {
	where, args := workspaceByID(ctx, id)
	res, err := s.db.ExecContext(ctx, `DELETE FROM workspaces WHERE `+where, args...)
	if err != nil {
		return fmt.Errorf("store: delete workspace %s: %w", id, err)
	}
	return workspaceAffected(res, id)
}

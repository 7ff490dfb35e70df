package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxer/sandboxer/internal/tenant"
)

// ErrWorkspaceNotFound: no workspace with that name.
var ErrWorkspaceNotFound = errors.New("store: workspace not found")

// ErrWorkspaceExists: a workspace with that name already exists.
var ErrWorkspaceExists = errors.New("store: workspace already exists")

// WorkspaceLimits are the limits a workspace's container was made with. Stored as JSON.
type WorkspaceLimits struct {
	MemoryBytes int64 `json:"memory_bytes"`
	NanoCPUs    int64 `json:"nano_cpus"`
	Pids        int64 `json:"pids"`
	DiskBytes   int64 `json:"disk_bytes"`
}

// WorkspaceDetails holds what is known about a workspace beyond its columns. Stored as JSON.
type WorkspaceDetails struct {
	// Installed lists packages installed by install_packages, by manager.
	Installed map[string][]string `json:"installed,omitempty"`
	// Egress is the workspace's own allowlist (create_workspace's egress):
	// its container is on the egress network and its jobs reach these
	// hosts through the proxy. Empty: no network.
	Egress []string `json:"egress,omitempty"`
}

// Workspace is one persisted workspace record.
type Workspace struct {
	Name        string
	Language    string
	Image       string
	ContainerID string
	Volume      string
	State       string // "creating", "running", "stopped"
	Limits      WorkspaceLimits
	ServerID    string // the server that created it
	CreatedAt   time.Time
	LastUsedAt  time.Time // zero = never used
	Details     WorkspaceDetails
}

const workspaceColumns = `name, language, image, container_id, volume, state, limits, server_id, created_at, last_used_at, details`

func workspaceArgs(w *Workspace) ([]any, error) {
	limits, err := json.Marshal(w.Limits)
	if err != nil {
		return nil, err
	}
	details, err := json.Marshal(w.Details)
	if err != nil {
		return nil, err
	}
	return []any{w.Name, w.Language, w.Image, w.ContainerID, w.Volume, w.State, string(limits),
		w.ServerID, w.CreatedAt.UnixNano(), timeToDB(w.LastUsedAt), string(details)}, nil
}

func scanWorkspace(sc scanner) (*Workspace, error) {
	var w Workspace
	var created int64
	var used sql.NullInt64
	var limits, details string
	if err := sc.Scan(&w.Name, &w.Language, &w.Image, &w.ContainerID, &w.Volume, &w.State, &limits,
		&w.ServerID, &created, &used, &details); err != nil {
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

// CreateWorkspace stores a new workspace; ErrWorkspaceExists when the name is taken.
func (s *Store) CreateWorkspace(ctx context.Context, w *Workspace) error {
	if w == nil || w.Name == "" {
		return errors.New("store: CreateWorkspace: name is required")
	}
	if w.CreatedAt.IsZero() {
		w.CreatedAt = time.Now()
	}
	args, err := workspaceArgs(w)
	if err != nil {
		return err
	}
	args = append(args, tenant.Owner(ctx))
	_, err = s.db.ExecContext(ctx, `INSERT INTO workspaces (`+workspaceColumns+`, tenant) VALUES (`+placeholders(len(args))+`)`, args...)
	if err != nil {
		if code, ok := sqliteCode(err); ok && code == sqliteConstraintPrimaryKey {
			return fmt.Errorf("%w: %s", ErrWorkspaceExists, w.Name)
		}
		return fmt.Errorf("store: create workspace %s: %w", w.Name, err)
	}
	return nil
}

// UpdateWorkspace overwrites every field of the workspace named w.Name.
func (s *Store) UpdateWorkspace(ctx context.Context, w *Workspace) error {
	if w == nil {
		return errors.New("store: UpdateWorkspace: nil workspace")
	}
	args, err := workspaceArgs(w)
	if err != nil {
		return err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE workspaces SET language = ?, image = ?, container_id = ?, volume = ?,
		state = ?, limits = ?, server_id = ?, created_at = ?, last_used_at = ?, details = ? WHERE name = ?`,
		append(args[1:], args[0])...)
	if err != nil {
		return fmt.Errorf("store: update workspace %s: %w", w.Name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: update workspace %s: %w", w.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrWorkspaceNotFound, w.Name)
	}
	return nil
}

// GetWorkspace returns the workspace with that name, or an error wrapping ErrWorkspaceNotFound.
func (s *Store) GetWorkspace(ctx context.Context, name string) (*Workspace, error) {
	where, args := tenantScope(ctx, `name = ?`, name)
	w, err := scanWorkspace(s.db.QueryRowContext(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", ErrWorkspaceNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get workspace %s: %w", name, err)
	}
	return w, nil
}

// ListWorkspaces returns every workspace (of ctx's tenant), by name.
func (s *Store) ListWorkspaces(ctx context.Context) ([]*Workspace, error) {
	where, args := tenantScope(ctx, `1 = 1`)
	rows, err := s.db.QueryContext(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE `+where+` ORDER BY name`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list workspaces: %w", err)
	}
	defer rows.Close()
	var out []*Workspace
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

// TouchWorkspace sets a workspace's last use time.
func (s *Store) TouchWorkspace(ctx context.Context, name string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE workspaces SET last_used_at = ? WHERE name = ?`, timeToDB(at), name)
	if err != nil {
		return fmt.Errorf("store: touch workspace %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %s", ErrWorkspaceNotFound, name)
	}
	return nil
}

// DeleteWorkspace removes the record; ErrWorkspaceNotFound when there is none.
func (s *Store) DeleteWorkspace(ctx context.Context, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM workspaces WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("store: delete workspace %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %s", ErrWorkspaceNotFound, name)
	}
	return nil
}

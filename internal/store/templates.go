package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

const templateSelect = `name, tenant, source, language, key, image, image_id, size_bytes, workspace, created_at, used_at`

// PutTemplate stores a built template (replacing its earlier build).
func (s *Store) PutTemplate(ctx context.Context, t *record.Template) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO templates (`+templateSelect+`) VALUES (?,?,?,?,?,?,?,?,?,?,?)
		ON CONFLICT (tenant, name) DO UPDATE SET source = excluded.source, language = excluded.language, key = excluded.key,
		image = excluded.image, image_id = excluded.image_id, size_bytes = excluded.size_bytes, workspace = excluded.workspace,
		created_at = excluded.created_at, used_at = excluded.used_at`,
		t.Name, t.Tenant, t.Source, t.Language, t.Key, t.Image, t.ImageID, t.SizeBytes, t.Workspace,
		t.CreatedAt.UnixNano(), t.UsedAt.UnixNano())
	if err != nil {
		return fmt.Errorf("store: put template %s: %w", t.Name, err)
	}
	return nil
}

// visibleTemplates: the policy's templates (tenant "") and ctx's tenant's
// snapshots (every tenant's for an admin or a local caller).
func visibleTemplates(ctx context.Context, where string, args ...any) (string, []any) {
	if t := tenant.Scope(ctx); t != "" {
		return where + ` AND (tenant = '' OR tenant = ?)`, append(args, t)
	}
	return where, args
}

// GetTemplate returns the template called name that ctx's tenant sees:
// its own snapshot before the policy's template of that name.
func (s *Store) GetTemplate(ctx context.Context, name string) (*record.Template, error) {
	where, args := visibleTemplates(ctx, `name = ?`, name)
	order := ` ORDER BY tenant = '' LIMIT 1`
	if tenant.Scope(ctx) == "" { // an admin or local caller: its own first
		where += ` AND (tenant = '' OR tenant = ?)`
		args = append(args, tenant.Owner(ctx))
	}
	t, err := scanTemplate(s.db.QueryRowContext(ctx, `SELECT `+templateSelect+` FROM templates WHERE `+where+order, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", record.ErrTemplateNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get template %s: %w", name, err)
	}
	return t, nil
}

// ListTemplates lists the templates ctx's tenant sees, by name. all lists
// every tenant's (the disk budget's view).
func (s *Store) ListTemplates(ctx context.Context, all bool) ([]*record.Template, error) {
	where, args := `1 = 1`, []any(nil)
	if !all {
		where, args = visibleTemplates(ctx, where)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+templateSelect+` FROM templates WHERE `+where+` ORDER BY name, tenant`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list templates: %w", err)
	}
	defer rows.Close()
	var out []*record.Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list templates: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// TouchTemplate records a use of a template now.
func (s *Store) TouchTemplate(ctx context.Context, tenantName, name string) error {
	_, err := s.db.ExecContext(ctx, `UPDATE templates SET used_at = ? WHERE tenant = ? AND name = ?`, time.Now().UnixNano(), tenantName, name)
	if err != nil {
		return fmt.Errorf("store: touch template %s: %w", name, err)
	}
	return nil
}

// DeleteTemplate forgets a template's build.
func (s *Store) DeleteTemplate(ctx context.Context, tenantName, name string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM templates WHERE tenant = ? AND name = ?`, tenantName, name)
	if err != nil {
		return fmt.Errorf("store: delete template %s: %w", name, err)
	}
	return nil
}

func scanTemplate(row interface{ Scan(...any) error }) (*record.Template, error) {
	var t record.Template
	var created, used int64
	if err := row.Scan(&t.Name, &t.Tenant, &t.Source, &t.Language, &t.Key, &t.Image, &t.ImageID, &t.SizeBytes, &t.Workspace, &created, &used); err != nil {
		return nil, err
	}
	t.CreatedAt, t.UsedAt = time.Unix(0, created), time.Unix(0, used)
	return &t, nil
}

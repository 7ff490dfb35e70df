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

const taskSelect = `id, tenant, tool, job_id, status, message, result, server_id, ttl_ms, created_at, updated_at, pending`

// CreateTask stores a new task as ctx's tenant's.
func (s *Store) CreateTask(ctx context.Context, t *record.Task) error {
	t.Tenant = tenant.Owner(ctx)
	_, err := s.db.ExecContext(ctx, `INSERT INTO tasks (`+taskSelect+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
		t.ID, t.Tenant, t.Tool, t.JobID, t.Status, t.Message, string(t.Result), t.ServerID, t.TTLMS,
		t.CreatedAt.UnixNano(), t.UpdatedAt.UnixNano(), string(t.Pending))
	if err != nil {
		return fmt.Errorf("store: create task %s: %w", t.ID, err)
	}
	return nil
}

// GetTask returns ctx's tenant's task (record.ErrTaskNotFound otherwise).
func (s *Store) GetTask(ctx context.Context, id string) (*record.Task, error) {
	where, args := tenantScope(ctx, `id = ?`, id)
	t, err := scanTask(s.db.QueryRowContext(ctx, `SELECT `+taskSelect+` FROM tasks WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", record.ErrTaskNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get task %s: %w", id, err)
	}
	return t, nil
}

// EndTask records a task's end, once: a task that already ended keeps its
// end (a cancel racing the call's own end). It says whether this call ended it.
func (s *Store) EndTask(ctx context.Context, id, status, message string, result []byte) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE tasks SET status = ?, message = ?, result = ?, pending = '', updated_at = ? WHERE id = ? AND status IN (?, ?)`,
		status, message, string(result), time.Now().UnixNano(), id, record.TaskWorking, record.TaskInputRequired)
	if err != nil {
		return false, fmt.Errorf("store: end task %s: %w", id, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// ResumeTask turns ctx's tenant's input_required task into a working one,
// once: of its job (jobID), or run by this server (jobID ""). It says
// whether this call resumed it (false: it was resumed or ended already).
func (s *Store) ResumeTask(ctx context.Context, id, jobID, server string) (bool, error) {
	where, args := tenantScope(ctx, `id = ? AND status = ?`, id, record.TaskInputRequired)
	res, err := s.db.ExecContext(ctx, `UPDATE tasks SET status = ?, job_id = ?, server_id = ?, pending = '', updated_at = ? WHERE `+where,
		append([]any{record.TaskWorking, jobID, server, time.Now().UnixNano()}, args...)...)
	if err != nil {
		return false, fmt.Errorf("store: resume task %s: %w", id, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// ListTasks lists ctx's tenant's tasks, newest first, a page at a time.
func (s *Store) ListTasks(ctx context.Context, cursor string, limit int) ([]*record.Task, string, error) {
	if limit <= 0 || limit > record.MaxListLimit {
		limit = record.DefaultListLimit
	}
	where, args := tenantScope(ctx, `1 = 1`)
	if cursor != "" {
		ns, id, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		where += ` AND (created_at < ? OR (created_at = ? AND id < ?))`
		args = append(args, ns, ns, id)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+taskSelect+` FROM tasks WHERE `+where+` ORDER BY created_at DESC, id DESC LIMIT ?`, append(args, limit+1)...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list tasks: %w", err)
	}
	defer rows.Close()
	var tasks []*record.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, "", fmt.Errorf("store: list tasks: %w", err)
		}
		tasks = append(tasks, t)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("store: list tasks: %w", err)
	}
	next := ""
	if len(tasks) > limit {
		tasks = tasks[:limit]
		last := tasks[limit-1]
		next = cursorAt(last.CreatedAt, last.ID)
	}
	return tasks, next, nil
}

// FailOrphanTasks ends, as failed, the working tasks a server ran itself
// (not a job's) when that server is gone: nothing will finish them.
func (s *Store) FailOrphanTasks(ctx context.Context, alive func(server string) bool) (int, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, server_id FROM tasks WHERE status = ? AND job_id = ''`, record.TaskWorking)
	if err != nil {
		return 0, fmt.Errorf("store: orphan tasks: %w", err)
	}
	var orphans []string
	for rows.Next() {
		var id, server string
		if err := rows.Scan(&id, &server); err == nil && !alive(server) {
			orphans = append(orphans, id)
		}
	}
	rows.Close()
	n := 0
	for _, id := range orphans {
		if ok, err := s.EndTask(ctx, id, record.TaskFailed, "the server that ran it stopped before it ended", nil); err == nil && ok {
			n++
		}
	}
	return n, nil
}

// PruneTasks deletes the tasks that ended and are past their ttl.
func (s *Store) PruneTasks(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM tasks WHERE status != ? AND created_at + ttl_ms * 1000000 < ?`, record.TaskWorking, now.UnixNano())
	if err != nil {
		return 0, fmt.Errorf("store: prune tasks: %w", err)
	}
	return res.RowsAffected()
}

func scanTask(row interface{ Scan(...any) error }) (*record.Task, error) {
	var t record.Task
	var result, pending string
	var created, updated int64
	if err := row.Scan(&t.ID, &t.Tenant, &t.Tool, &t.JobID, &t.Status, &t.Message, &result, &t.ServerID, &t.TTLMS, &created, &updated, &pending); err != nil {
		return nil, err
	}
	if result != "" {
		t.Result = []byte(result)
	}
	if pending != "" {
		t.Pending = []byte(pending)
	}
	t.CreatedAt, t.UpdatedAt = time.Unix(0, created), time.Unix(0, updated)
	return &t, nil
}

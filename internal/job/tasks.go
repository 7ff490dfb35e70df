package job

import (
	"context"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
)

// MCP tasks' records (record.Task) live in the store beside the jobs, the
// tenant's like them. A job's task follows its job; a task the server runs
// itself (a call of several jobs, or none) is ended here.

// orphanedTask is the message of a task whose server stopped before it ended.
const orphanedTask = "the server that ran it stopped before it ended"

// CreateTask stores a new task of this server, as ctx's tenant's: working,
// unless it is held for input (record.TaskInputRequired).
func (m *Manager) CreateTask(ctx context.Context, t *record.Task) error {
	now := time.Now()
	if t.Status != record.TaskInputRequired {
		t.Status = record.TaskWorking
	}
	t.ServerID, t.CreatedAt, t.UpdatedAt = m.server, now, now
	return m.st.CreateTask(ctx, t)
}

// ResumeTask turns an input_required task into a working one, once: its
// job's (jobID) or one this server runs (""); false when it was not held.
func (m *Manager) ResumeTask(ctx context.Context, id, jobID string) (bool, error) {
	return m.st.ResumeTask(ctx, id, jobID, m.server)
}

// Task returns ctx's tenant's task. A task another server ran itself, whose
// server is gone, is ended as failed first: nothing will finish it.
func (m *Manager) Task(ctx context.Context, id string) (*record.Task, error) {
	t, err := m.st.GetTask(ctx, id)
	if err != nil || t.JobID != "" || t.Status != record.TaskWorking || t.ServerID == m.server || m.othersAlive(t.ServerID) {
		return t, err
	}
	if _, err := m.st.EndTask(ctx, id, record.TaskFailed, orphanedTask, nil); err != nil {
		return nil, err
	}
	return m.st.GetTask(ctx, id)
}

// EndTask records the end of a task the server ran itself, unless it had
// ended already; it says whether this call ended it.
func (m *Manager) EndTask(ctx context.Context, id, status, message string, result []byte) (bool, error) {
	return m.st.EndTask(ctx, id, status, message, result)
}

// ListTasks lists ctx's tenant's tasks, newest first, a page at a time.
func (m *Manager) ListTasks(ctx context.Context, cursor string) ([]*record.Task, string, error) {
	return m.st.ListTasks(ctx, cursor, 0)
}

// cleanTasks ends the tasks of gone servers and deletes those past their ttl.
func (m *Manager) cleanTasks(ctx context.Context) {
	if n, err := m.st.FailOrphanTasks(ctx, func(server string) bool { return server == m.server || m.othersAlive(server) }); err != nil {
		m.log.Warn().Err(err).Msg("orphaned tasks")
	} else if n > 0 {
		m.log.Info().Int("tasks", n).Msg("ended the tasks of gone servers as failed")
	}
	if _, err := m.st.PruneTasks(ctx, time.Now()); err != nil {
		m.log.Warn().Err(err).Msg("prune tasks")
	}
}

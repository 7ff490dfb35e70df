// Package store keeps the server's job records in an embedded SQLite database
// (modernc.org/sqlite, pure Go).
//
// One Store owns one database file. It is safe for concurrent use by many
// goroutines. The database is opened with a single connection
// (SetMaxOpenConns(1)): SQLite allows only one writer at a time anyway, so a
// single connection turns writer contention into Go-side queueing inside
// database/sql instead of SQLITE_BUSY errors and retries, and it makes every
// statement see the writes of every earlier one without cross-connection WAL
// subtleties. The job table is small and the statements are short, so
// serialising readers behind writers costs nothing noticeable.
//
// Times are stored as unix nanoseconds (INTEGER); a zero time.Time is stored
// as NULL and read back as the zero time. Times read back are in UTC and carry
// no monotonic clock reading: compare them with time.Time.Equal.
package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/tenant"
)

var (
	// ErrSchemaTooNew: the database was written by a newer version of the
	// server (its schema version is higher than this build knows). Open
	// returns it instead of setting the file aside, so a downgrade never
	// discards data.
	ErrSchemaTooNew = errors.New("store: database schema is newer than this build supports")
)

// Store is an open job database.
type Store struct {
	db   *sql.DB
	path string

	// SetAside is non-empty when Open found the existing database file
	// unusable (not a database, failed quick_check, or its schema could not be
	// created/validated), moved it aside and started a fresh, empty database.
	// It is the path the old file now has: "<path>.corrupt-<unix seconds>"
	// (its -wal/-shm/-journal companions, if any, were moved to the same name
	// plus "-wal", "-shm", "-journal"). The caller should log it.
	SetAside string
	// SetAsideErr is why the old file was set aside (nil when SetAside is "").
	SetAsideErr error
}

// migrations[i] upgrades the schema from version i to i+1 (PRAGMA
// user_version). Append only; never edit a released entry.
var migrations = []string{
	// 1: initial schema.
	`CREATE TABLE jobs (
		id            TEXT PRIMARY KEY NOT NULL,
		kind          TEXT NOT NULL DEFAULT '',
		status        TEXT NOT NULL DEFAULT '',
		reason        TEXT NOT NULL DEFAULT '',
		exit_code     INTEGER,
		signal        TEXT NOT NULL DEFAULT '',
		command       TEXT NOT NULL DEFAULT '',
		language      TEXT NOT NULL DEFAULT '',
		image         TEXT NOT NULL DEFAULT '',
		workspace     TEXT NOT NULL DEFAULT '',
		cwd           TEXT NOT NULL DEFAULT '',
		env           TEXT NOT NULL DEFAULT 'null',
		limits        TEXT NOT NULL DEFAULT '{}',
		container_id  TEXT NOT NULL DEFAULT '',
		stdin_open    INTEGER NOT NULL DEFAULT 0,
		created_at    INTEGER NOT NULL,
		started_at    INTEGER,
		ended_at      INTEGER,
		stdout_bytes  INTEGER NOT NULL DEFAULT 0,
		stderr_bytes  INTEGER NOT NULL DEFAULT 0,
		dropped_bytes INTEGER NOT NULL DEFAULT 0,
		read_cursor   INTEGER NOT NULL DEFAULT 0,
		error         TEXT NOT NULL DEFAULT ''
	) STRICT;
	CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);
	CREATE INDEX jobs_status ON jobs (status, created_at);
	CREATE INDEX jobs_ended ON jobs (ended_at);`,
	// 2: "new since last read" per stream, not only for the combined one.
	`ALTER TABLE jobs ADD COLUMN stdout_read_cursor INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE jobs ADD COLUMN stderr_read_cursor INTEGER NOT NULL DEFAULT 0;`,
	// 3: the server that runs a job (several servers share one database), and
	// what a job used.
	`ALTER TABLE jobs ADD COLUMN server_id TEXT NOT NULL DEFAULT '';
	ALTER TABLE jobs ADD COLUMN usage TEXT NOT NULL DEFAULT '{}';`,
	// 4: what only some kinds of job have (a session's terminal, a script's
	// source), named persistent workspaces, and the agent-edited block list.
	`ALTER TABLE jobs ADD COLUMN details TEXT NOT NULL DEFAULT '{}';
	CREATE TABLE workspaces (
		name          TEXT PRIMARY KEY NOT NULL,
		language      TEXT NOT NULL DEFAULT '',
		image         TEXT NOT NULL DEFAULT '',
		container_id  TEXT NOT NULL DEFAULT '',
		volume        TEXT NOT NULL DEFAULT '',
		state         TEXT NOT NULL DEFAULT '',
		limits        TEXT NOT NULL DEFAULT '{}',
		server_id     TEXT NOT NULL DEFAULT '',
		created_at    INTEGER NOT NULL,
		last_used_at  INTEGER,
		details       TEXT NOT NULL DEFAULT '{}'
	) STRICT;
	CREATE TABLE blocked_commands (
		command   TEXT PRIMARY KEY NOT NULL,
		reason    TEXT NOT NULL DEFAULT '',
		added_by  TEXT NOT NULL DEFAULT '',
		added_at  INTEGER NOT NULL
	) STRICT;`,
	// 5: the tenant (a token's client; stdio's is "local") that owns each
	// job and workspace: the store filters by it (internal/tenant).
	`ALTER TABLE jobs ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
	ALTER TABLE workspaces ADD COLUMN tenant TEXT NOT NULL DEFAULT 'local';
	CREATE INDEX jobs_tenant ON jobs (tenant, created_at);`,
	// 6: the tenant is part of every key. A workspace is unique per tenant
	// and has an identity of its own (id: what baselines, caches and cursors
	// key by, so a new workspace under an old name starts clean; a workspace
	// made before keeps its name as its id, which its baseline's directory
	// already is). A block-list entry belongs to the tenant that added it
	// ("" = every tenant: the operator's, or an admin's; older entries were
	// global, so they stay so).
	`CREATE TABLE workspaces6 (
		id            TEXT NOT NULL UNIQUE,
		tenant        TEXT NOT NULL DEFAULT 'local',
		name          TEXT NOT NULL,
		language      TEXT NOT NULL DEFAULT '',
		image         TEXT NOT NULL DEFAULT '',
		container_id  TEXT NOT NULL DEFAULT '',
		volume        TEXT NOT NULL DEFAULT '',
		state         TEXT NOT NULL DEFAULT '',
		limits        TEXT NOT NULL DEFAULT '{}',
		server_id     TEXT NOT NULL DEFAULT '',
		created_at    INTEGER NOT NULL,
		last_used_at  INTEGER,
		details       TEXT NOT NULL DEFAULT '{}',
		PRIMARY KEY (tenant, name)
	) STRICT;
	INSERT INTO workspaces6 (id, tenant, name, language, image, container_id, volume, state, limits, server_id, created_at, last_used_at, details)
		SELECT name, tenant, name, language, image, container_id, volume, state, limits, server_id, created_at, last_used_at, details FROM workspaces;
	DROP TABLE workspaces;
	ALTER TABLE workspaces6 RENAME TO workspaces;
	CREATE TABLE blocked_commands6 (
		tenant    TEXT NOT NULL DEFAULT '',
		command   TEXT NOT NULL,
		reason    TEXT NOT NULL DEFAULT '',
		added_by  TEXT NOT NULL DEFAULT '',
		added_at  INTEGER NOT NULL,
		PRIMARY KEY (tenant, command)
	) STRICT;
	INSERT INTO blocked_commands6 (tenant, command, reason, added_by, added_at)
		SELECT '', command, reason, added_by, added_at FROM blocked_commands;
	DROP TABLE blocked_commands;
	ALTER TABLE blocked_commands6 RENAME TO blocked_commands;`,
	// 7: how long a job waited for a slot, apart from how long it ran.
	`ALTER TABLE jobs ADD COLUMN queued_ms INTEGER NOT NULL DEFAULT 0;`,
	// 8: MCP tasks (tasks.go), the tenant's like its jobs.
	`CREATE TABLE tasks (
		id          TEXT PRIMARY KEY NOT NULL,
		tenant      TEXT NOT NULL DEFAULT 'local',
		tool        TEXT NOT NULL,
		job_id      TEXT NOT NULL DEFAULT '',
		status      TEXT NOT NULL,
		message     TEXT NOT NULL DEFAULT '',
		result      TEXT NOT NULL DEFAULT '',
		server_id   TEXT NOT NULL DEFAULT '',
		ttl_ms      INTEGER NOT NULL,
		created_at  INTEGER NOT NULL,
		updated_at  INTEGER NOT NULL
	) STRICT;
	CREATE INDEX tasks_tenant ON tasks (tenant, created_at DESC, id DESC);`,
	// 9: templates' builds (templates.go): the policy's (tenant '') and
	// the tenants' snapshots.
	`CREATE TABLE templates (
		name        TEXT NOT NULL,
		tenant      TEXT NOT NULL,
		source      TEXT NOT NULL,
		language    TEXT NOT NULL,
		key         TEXT NOT NULL,
		image       TEXT NOT NULL,
		image_id    TEXT NOT NULL DEFAULT '',
		size_bytes  INTEGER NOT NULL DEFAULT 0,
		workspace   TEXT NOT NULL DEFAULT '',
		created_at  INTEGER NOT NULL,
		used_at     INTEGER NOT NULL,
		PRIMARY KEY (tenant, name)
	) STRICT;`,
	// 10: a task held for a person's approval keeps the call it will run.
	`ALTER TABLE tasks ADD COLUMN pending TEXT NOT NULL DEFAULT '';`,
	// 11: the E2B API's sandboxes (e2b.go), each a workspace of its tenant.
	`CREATE TABLE e2b_sandboxes (
		id          TEXT PRIMARY KEY NOT NULL,
		tenant      TEXT NOT NULL,
		template    TEXT NOT NULL,
		token       TEXT NOT NULL,
		envs        TEXT NOT NULL DEFAULT '{}',
		metadata    TEXT NOT NULL DEFAULT '{}',
		started_at  INTEGER NOT NULL,
		end_at      INTEGER NOT NULL
	) STRICT;
	CREATE INDEX e2b_sandboxes_tenant ON e2b_sandboxes (tenant, id);`,
}

// SchemaVersion is the schema version (PRAGMA user_version) this build
// creates and understands; it equals len(migrations).
const SchemaVersion = 11

func init() {
	if len(migrations) != SchemaVersion {
		panic("store: SchemaVersion does not match the migrations list")
	}
}

const jobColumns = `id, kind, status, reason, exit_code, signal, command, language, image,
	workspace, cwd, env, limits, container_id, stdin_open, created_at, started_at, ended_at,
	stdout_bytes, stderr_bytes, dropped_bytes, read_cursor, error, stdout_read_cursor, stderr_read_cursor, server_id, usage, details,
	queued_ms`

// jobSelect is what a job's SELECT reads: its columns and its tenant.
const jobSelect = jobColumns + `, tenant`

// Open opens or creates the job database at path, creating the parent
// directory (mode 0700) if needed.
//
// If the file exists but is unusable (not a SQLite database, PRAGMA
// quick_check fails, or the schema cannot be created or validated), it is
// renamed to "<path>.corrupt-<unix seconds>" together with its -wal/-shm
// files, a fresh database is created, and Open succeeds with Store.SetAside
// set. Environmental failures (permission denied, disk full, I/O errors,
// database locked by another process beyond the busy timeout) and
// ErrSchemaTooNew are returned as errors and leave the file untouched.
func Open(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("store: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("store: create directory: %w", err)
	}
	existed, err := checkHeader(abs)
	var s *Store
	if err == nil {
		s, err = openAndInit(abs)
	}
	if err == nil {
		return s, nil
	}
	if !existed || !isCorruption(err) {
		return nil, err
	}
	aside, aerr := setAside(abs, time.Now())
	if aerr != nil {
		return nil, fmt.Errorf("%w (and moving it aside failed: %v)", err, aerr)
	}
	s, err2 := openAndInit(abs)
	if err2 != nil {
		return nil, fmt.Errorf("store: fresh database after setting %s aside: %w", aside, err2)
	}
	s.SetAside = aside
	s.SetAsideErr = err
	return s, nil
}

// sqliteMagic starts every SQLite 3 database file.
const sqliteMagic = "SQLite format 3\x00"

// checkHeader reports whether path exists and, if it is non-empty but does not
// start with the SQLite magic string, returns a corruption error without
// letting SQLite open it: SQLite would otherwise reset or delete the -wal and
// -shm files next to it before they can be moved aside.
func checkHeader(path string) (existed bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	buf := make([]byte, len(sqliteMagic))
	n, err := io.ReadFull(f, buf)
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		return true, nil // empty file: SQLite treats it as a new database
	case errors.Is(err, io.ErrUnexpectedEOF) || (err == nil && string(buf) != sqliteMagic):
		return true, &corruptError{fmt.Errorf("store: %s is not an SQLite database (bad header)", path)}
	case err != nil:
		return true, fmt.Errorf("store: read %s: %w", path, err)
	}
	return true, nil
}

// dsn builds a file: URI for path with the per-connection pragmas. Using a
// URI (with the path escaped) keeps '?' or '#' in directory names from being
// taken as the start of the query string.
func dsn(path string) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path)}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	u.RawQuery = q.Encode()
	return u.String()
}

func openAndInit(path string) (*Store, error) {
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	// See the package comment: one connection, kept forever (the pragmas are
	// re-applied from the DSN should database/sql ever replace it).
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)

	s := &Store{db: db, path: path}
	if err := s.init(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// corruptError marks an init failure that means "this file is not a usable
// job database" regardless of SQLite's error code.
type corruptError struct{ err error }

func (e *corruptError) Error() string { return e.err.Error() }
func (e *corruptError) Unwrap() error { return e.err }

func (s *Store) init(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("store: open %s: %w", s.path, err)
	}
	var mode string
	if err := s.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fmt.Errorf("store: journal_mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("store: journal_mode is %q, want wal", mode)
	}
	if err := s.quickCheck(ctx); err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	// Validate the table shape whatever user_version claimed.
	rows, err := s.db.QueryContext(ctx, `SELECT `+jobSelect+` FROM jobs LIMIT 0`)
	if err != nil {
		return &corruptError{fmt.Errorf("store: jobs table unusable: %w", err)}
	}
	rows.Close()
	return nil
}

func (s *Store) quickCheck(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `PRAGMA quick_check`)
	if err != nil {
		return fmt.Errorf("store: quick_check: %w", err)
	}
	defer rows.Close()
	var msgs []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return fmt.Errorf("store: quick_check: %w", err)
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: quick_check: %w", err)
	}
	if len(msgs) != 1 || msgs[0] != "ok" {
		return &corruptError{fmt.Errorf("store: quick_check failed: %s", strings.Join(msgs, "; "))}
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	var v int
	if err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("store: read schema version: %w", err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("%w: file has version %d, this build knows %d", ErrSchemaTooNew, v, SchemaVersion)
	}
	if v < 0 {
		return &corruptError{fmt.Errorf("store: invalid schema version %d", v)}
	}
	for ; v < SchemaVersion; v++ {
		if err := s.applyMigration(ctx, v+1, migrations[v]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) applyMigration(ctx context.Context, to int, stmt string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: migrate to schema %d: %w", to, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, stmt); err != nil {
		return wrapSchemaErr(fmt.Errorf("store: migrate to schema %d: %w", to, err))
	}
	// user_version lives in the file header and is covered by the transaction.
	if _, err := tx.ExecContext(ctx, `PRAGMA user_version = `+strconv.Itoa(to)); err != nil {
		return fmt.Errorf("store: set schema version %d: %w", to, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: migrate to schema %d: %w", to, err)
	}
	return nil
}

// wrapSchemaErr marks a failed schema statement as corruption unless SQLite
// says the failure was environmental.
func wrapSchemaErr(err error) error {
	if isEnvironmental(err) {
		return err
	}
	return &corruptError{err}
}

// SQLite primary result codes used for classification.
const (
	sqlitePerm       = 3
	sqliteAbort      = 4
	sqliteBusy       = 5
	sqliteLocked     = 6
	sqliteNoMem      = 7
	sqliteReadOnly   = 8
	sqliteInterrupt  = 9
	sqliteIOErr      = 10
	sqliteCorrupt    = 11
	sqliteFull       = 13
	sqliteCantOpen   = 14
	sqliteProtocol   = 15
	sqliteAuth       = 23
	sqliteNotADB     = 26
	sqliteConstraint = 19

	sqliteConstraintPrimaryKey = sqliteConstraint | 6<<8
)

func sqliteCode(err error) (int, bool) {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code(), true
	}
	return 0, false
}

func isEnvironmental(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code, ok := sqliteCode(err)
	if !ok {
		return false
	}
	switch code & 0xff {
	case sqlitePerm, sqliteAbort, sqliteBusy, sqliteLocked, sqliteNoMem, sqliteReadOnly,
		sqliteInterrupt, sqliteIOErr, sqliteFull, sqliteCantOpen, sqliteProtocol, sqliteAuth:
		return true
	}
	return false
}

// isCorruption reports whether an Open failure means the existing file should
// be set aside.
func isCorruption(err error) bool {
	var ce *corruptError
	if errors.As(err, &ce) {
		return true
	}
	if code, ok := sqliteCode(err); ok {
		switch code & 0xff {
		case sqliteCorrupt, sqliteNotADB:
			return true
		}
	}
	return false
}

// setAside renames path (and its -wal, -shm, -journal companions) to
// "<path>.corrupt-<unix>" (+ suffix), picking a name not already taken.
func setAside(path string, now time.Time) (string, error) {
	base := path + ".corrupt-" + strconv.FormatInt(now.Unix(), 10)
	target := base
	for i := 1; ; i++ {
		if !anyExists(target, "", "-wal", "-shm", "-journal") {
			break
		}
		target = base + "." + strconv.Itoa(i)
	}
	if err := os.Rename(path, target); err != nil {
		return "", err
	}
	for _, sfx := range []string{"-wal", "-shm", "-journal"} {
		if err := os.Rename(path+sfx, target+sfx); err != nil && !errors.Is(err, os.ErrNotExist) {
			return target, fmt.Errorf("move %s aside: %w", path+sfx, err)
		}
	}
	return target, nil
}

func anyExists(base string, suffixes ...string) bool {
	for _, s := range suffixes {
		if _, err := os.Lstat(base + s); err == nil {
			return true
		}
	}
	return false
}

// Close closes the database. SQLite checkpoints the WAL on the last close.
func (s *Store) Close() error {
	return s.db.Close()
}

// Path is the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// --- encoding helpers ---

func timeToDB(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func timeFromDB(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.Unix(0, v.Int64).UTC()
}

func jobArgs(j *record.Job) ([]any, error) {
	env, err := json.Marshal(j.Env)
	if err != nil {
		return nil, fmt.Errorf("store: encode env: %w", err)
	}
	lim, err := json.Marshal(j.Limits)
	if err != nil {
		return nil, fmt.Errorf("store: encode limits: %w", err)
	}
	usage, err := json.Marshal(j.Usage)
	if err != nil {
		return nil, fmt.Errorf("store: encode usage: %w", err)
	}
	details, err := json.Marshal(j.Details)
	if err != nil {
		return nil, fmt.Errorf("store: encode details: %w", err)
	}
	var exit any
	if j.ExitCode != nil {
		exit = int64(*j.ExitCode)
	}
	stdin := 0
	if j.StdinOpen {
		stdin = 1
	}
	created := timeToDB(j.CreatedAt) // nil only reaches UpdateJob, which then keeps the stored value
	return []any{
		j.ID, j.Kind, j.Status, j.Reason, exit, j.Signal, j.Command, j.Language, j.Image,
		j.Workspace, j.Cwd, string(env), string(lim), j.ContainerID, stdin, created,
		timeToDB(j.StartedAt), timeToDB(j.EndedAt),
		j.StdoutBytes, j.StderrBytes, j.DroppedBytes, j.ReadCursor, j.Error,
		j.StdoutReadCursor, j.StderrReadCursor, j.ServerID, string(usage), string(details),
		j.QueuedMS,
	}, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanJob(sc scanner) (*record.Job, error) {
	var (
		j              record.Job
		exit           sql.NullInt64
		env, lim, use  string
		details        string
		stdin          int64
		created        int64
		started, ended sql.NullInt64
	)
	err := sc.Scan(&j.ID, &j.Kind, &j.Status, &j.Reason, &exit, &j.Signal, &j.Command, &j.Language,
		&j.Image, &j.Workspace, &j.Cwd, &env, &lim, &j.ContainerID, &stdin, &created, &started, &ended,
		&j.StdoutBytes, &j.StderrBytes, &j.DroppedBytes, &j.ReadCursor, &j.Error,
		&j.StdoutReadCursor, &j.StderrReadCursor, &j.ServerID, &use, &details, &j.QueuedMS, &j.Tenant)
	if err != nil {
		return nil, err
	}
	if exit.Valid {
		c := int(exit.Int64)
		j.ExitCode = &c
	}
	if err := json.Unmarshal([]byte(env), &j.Env); err != nil {
		return nil, fmt.Errorf("store: job %s: decode env: %w", j.ID, err)
	}
	if err := json.Unmarshal([]byte(lim), &j.Limits); err != nil {
		return nil, fmt.Errorf("store: job %s: decode limits: %w", j.ID, err)
	}
	if err := json.Unmarshal([]byte(use), &j.Usage); err != nil {
		return nil, fmt.Errorf("store: job %s: decode usage: %w", j.ID, err)
	}
	if err := json.Unmarshal([]byte(details), &j.Details); err != nil {
		return nil, fmt.Errorf("store: job %s: decode details: %w", j.ID, err)
	}
	j.StdinOpen = stdin != 0
	j.CreatedAt = time.Unix(0, created).UTC()
	j.StartedAt = timeFromDB(started)
	j.EndedAt = timeFromDB(ended)
	return &j, nil
}

func collectJobs(rows *sql.Rows) ([]*record.Job, error) {
	defer rows.Close()
	var out []*record.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// placeholders returns "?, ?, ?" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func stringArgs(ss []string) []any {
	a := make([]any, len(ss))
	for i, s := range ss {
		a[i] = s
	}
	return a
}

// --- job operations ---

// CreateJob inserts j. j.ID must be non-empty; a duplicate ID yields an error
// wrapping ErrExists. If j.CreatedAt is zero it is set to time.Now() (the
// caller's struct is updated).
func (s *Store) CreateJob(ctx context.Context, j *record.Job) error {
	if j == nil || j.ID == "" {
		return errors.New("store: CreateJob: job ID is required")
	}
	if j.CreatedAt.IsZero() {
		j.CreatedAt = time.Now()
	}
	args, err := jobArgs(j)
	if err != nil {
		return err
	}
	j.Tenant = tenant.Owner(ctx)
	args = append(args, j.Tenant)
	_, err = s.db.ExecContext(ctx, `INSERT INTO jobs (`+jobColumns+`, tenant) VALUES (`+placeholders(len(args))+`)`, args...)
	if err != nil {
		if code, ok := sqliteCode(err); ok && code == sqliteConstraintPrimaryKey {
			return fmt.Errorf("%w: %s", record.ErrJobExists, j.ID)
		}
		return fmt.Errorf("store: create job %s: %w", j.ID, err)
	}
	return nil
}

// UpdateJob overwrites every stored field of the job with ID j.ID, including
// CreatedAt unless j.CreatedAt is zero (then the stored value is kept). A
// missing job (or another tenant's, under ctx's) yields an error wrapping
// ErrNotFound.
func (s *Store) UpdateJob(ctx context.Context, j *record.Job) error {
	if j == nil {
		return errors.New("store: UpdateJob: nil job")
	}
	args, err := jobArgs(j)
	if err != nil {
		return err
	}
	where, whereArgs := tenantScope(ctx, `id = ?`, j.ID)
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET
		kind = ?, status = ?, reason = ?, exit_code = ?, signal = ?, command = ?, language = ?,
		image = ?, workspace = ?, cwd = ?, env = ?, limits = ?, container_id = ?, stdin_open = ?,
		created_at = COALESCE(?, created_at), started_at = ?, ended_at = ?, stdout_bytes = ?, stderr_bytes = ?,
		dropped_bytes = ?, read_cursor = ?, error = ?, stdout_read_cursor = ?, stderr_read_cursor = ?,
		server_id = ?, usage = ?, details = ?, queued_ms = ?
		WHERE `+where, append(args[1:], whereArgs...)...)
	if err != nil {
		return fmt.Errorf("store: update job %s: %w", j.ID, err)
	}
	return checkAffected(res, j.ID)
}

func checkAffected(res sql.Result, id string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: job %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", record.ErrJobNotFound, id)
	}
	return nil
}

// ClaimJob hands an active (queued or running) job from server from to server
// to, atomically: it reports false when the job is not active or another
// server claimed it first. Several servers may race to adopt the jobs of one
// that died; exactly one wins.
func (s *Store) ClaimJob(ctx context.Context, id, from, to string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET server_id = ? WHERE id = ? AND server_id = ? AND status IN (?, ?)`,
		to, id, from, record.StatusQueued, record.StatusRunning)
	if err != nil {
		return false, fmt.Errorf("store: claim job %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("store: claim job %s: %w", id, err)
	}
	return n == 1, nil
}

// SetReadCursors updates only the read cursors of job id (combined, stdout,
// stderr). A missing job yields an error wrapping ErrNotFound.
func (s *Store) SetReadCursors(ctx context.Context, id string, combined, stdout, stderr int64) error {
	where, args := tenantScope(ctx, `id = ?`, id)
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET read_cursor = ?, stdout_read_cursor = ?, stderr_read_cursor = ? WHERE `+where,
		append([]any{combined, stdout, stderr}, args...)...)
	if err != nil {
		return fmt.Errorf("store: set read cursor of %s: %w", id, err)
	}
	return checkAffected(res, id)
}

// GetJob returns the job with that ID, or an error wrapping ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (*record.Job, error) {
	where, args := tenantScope(ctx, `id = ?`, id)
	j, err := scanJob(s.db.QueryRowContext(ctx, `SELECT `+jobSelect+` FROM jobs WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", record.ErrJobNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get job %s: %w", id, err)
	}
	return j, nil
}

// tenantScope adds the filter of ctx's tenant (none for the server's own
// work and for admins) to a WHERE clause.
func tenantScope(ctx context.Context, where string, args ...any) (string, []any) {
	if t := tenant.Scope(ctx); t != "" {
		return where + ` AND tenant = ?`, append(args, t)
	}
	return where, args
}

// cursor is the position after the last job of a page.
const cursorVersion = "v1"

func encodeCursor(j *record.Job) string { return cursorAt(j.CreatedAt, j.ID) }

// cursorAt is the position after a row created at t with this id.
func cursorAt(t time.Time, id string) string {
	raw := cursorVersion + ":" + strconv.FormatInt(t.UnixNano(), 10) + ":" + id
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeCursor(c string) (createdNS int64, id string, err error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %v", record.ErrBadCursor, err)
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != cursorVersion || parts[2] == "" {
		return 0, "", fmt.Errorf("%w: malformed", record.ErrBadCursor)
	}
	createdNS, err = strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("%w: malformed", record.ErrBadCursor)
	}
	return createdNS, parts[2], nil
}

// ListJobs returns one page of jobs matching f, newest first (CreatedAt
// descending, then ID descending), and the cursor for the next page ("" when
// there are no more). The cursor is keyset-based: it stays valid while jobs
// are added or deleted, and new jobs created after the first page do not
// shift later pages. A cursor that ListJobs did not produce yields an error
// wrapping ErrBadCursor.
func (s *Store) ListJobs(ctx context.Context, f record.ListFilter) ([]*record.Job, string, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = record.DefaultListLimit
	}
	if limit > record.MaxListLimit {
		limit = record.MaxListLimit
	}
	var (
		where []string
		args  []any
	)
	if t := tenant.Scope(ctx); t != "" {
		where, args = append(where, `tenant = ?`), append(args, t)
	}
	if len(f.Status) > 0 {
		where = append(where, `status IN (`+placeholders(len(f.Status))+`)`)
		args = append(args, stringArgs(f.Status)...)
	}
	if f.Kind != "" {
		where = append(where, `kind = ?`)
		args = append(args, f.Kind)
	}
	if f.Workspace != "" {
		// An admin names another tenant's workspace as TENANT/NAME.
		if owner, name, ok := strings.Cut(f.Workspace, "/"); ok && owner != "" && name != "" && tenant.Scope(ctx) == "" {
			where, args = append(where, `tenant = ?`), append(args, owner)
			f.Workspace = name
		}
		where = append(where, `workspace = ?`)
		args = append(args, f.Workspace)
	}
	if f.Language != "" {
		where = append(where, `language = ?`)
		args = append(args, f.Language)
	}
	if f.Cursor != "" {
		ns, id, err := decodeCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		where = append(where, `(created_at < ? OR (created_at = ? AND id < ?))`)
		args = append(args, ns, ns, id)
	}
	q := `SELECT ` + jobSelect + ` FROM jobs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)

	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("store: list jobs: %w", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, "", fmt.Errorf("store: list jobs: %w", err)
	}
	next := ""
	if len(jobs) > limit {
		jobs = jobs[:limit]
		next = encodeCursor(jobs[limit-1])
	}
	return jobs, next, nil
}

// JobsWithStatus returns every job whose status is one of statuses, oldest
// first (CreatedAt ascending, then ID). No statuses returns no jobs.
func (s *Store) JobsWithStatus(ctx context.Context, statuses ...string) ([]*record.Job, error) {
	if len(statuses) == 0 {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+jobSelect+` FROM jobs WHERE status IN (`+
		placeholders(len(statuses))+`) ORDER BY created_at ASC, id ASC`, stringArgs(statuses)...)
	if err != nil {
		return nil, fmt.Errorf("store: jobs with status: %w", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("store: jobs with status: %w", err)
	}
	return jobs, nil
}

// DeleteJobs deletes finished jobs (status neither queued nor running)
// matching f, atomically, and returns their IDs (sorted) so the caller can
// remove their output directories.
func (s *Store) DeleteJobs(ctx context.Context, f record.PruneFilter) ([]string, error) {
	where := []string{`status NOT IN (?, ?)`}
	args := []any{record.StatusQueued, record.StatusRunning}
	if t := tenant.Scope(ctx); t != "" {
		where, args = append(where, `tenant = ?`), append(args, t)
	}
	if len(f.Status) > 0 {
		where = append(where, `status IN (`+placeholders(len(f.Status))+`)`)
		args = append(args, stringArgs(f.Status)...)
	}
	if !f.EndedBefore.IsZero() {
		where = append(where, `COALESCE(ended_at, created_at) < ?`)
		args = append(args, f.EndedBefore.UnixNano())
	}
	rows, err := s.db.QueryContext(ctx, `DELETE FROM jobs WHERE `+strings.Join(where, ` AND `)+` RETURNING id`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: delete jobs: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: delete jobs: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: delete jobs: %w", err)
	}
	sort.Strings(ids)
	return ids, nil
}

// CountActiveJobs counts the queued and running jobs (of ctx's tenant).
func (s *Store) CountActiveJobs(ctx context.Context) (int, error) {
	where, args := tenantScope(ctx, `status IN (?, ?)`, record.StatusQueued, record.StatusRunning)
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM jobs WHERE `+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count active jobs: %w", err)
	}
	return n, nil
}

// CountJobs returns the number of stored jobs.
func (s *Store) CountJobs(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM jobs`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count jobs: %w", err)
	}
	return n, nil
}

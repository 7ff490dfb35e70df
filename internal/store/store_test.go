package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxer/sandboxer/internal/record"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", "jobs.db")
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if s.SetAside != "" {
		t.Fatalf("fresh database reported SetAside=%q", s.SetAside)
	}
	return s, path
}

func intp(i int) *int { return &i }

var base = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

func fullJob(id string) *record.Job {
	return &record.Job{
		ID:               id,
		Kind:             "script",
		Status:           "completed",
		Reason:           "exit_code",
		ExitCode:         intp(3),
		Signal:           "SIGTERM",
		Command:          "print('hi')\n# ünïcode ✓ 'quotes' \"double\"",
		Language:         "python",
		Image:            "python:3.12-slim",
		Workspace:        "/home/u/proj",
		Cwd:              "sub/dir",
		Env:              []string{"A=1", "B=x=y", "EMPTY="},
		Limits:           record.Limits{TimeoutMS: 60000, MemoryBytes: 512 << 20, NanoCPUs: 1_500_000_000, Pids: 256},
		ContainerID:      "abcdef0123456789",
		StdinOpen:        true,
		CreatedAt:        base,
		StartedAt:        base.Add(time.Second),
		EndedAt:          base.Add(time.Minute + 7*time.Nanosecond),
		StdoutBytes:      1 << 40,
		StderrBytes:      12,
		DroppedBytes:     7,
		ReadCursor:       99,
		StdoutReadCursor: 98,
		StderrReadCursor: 97,
		Error:            "some error text",
	}
}

// equalJobs compares jobs field by field, times with Equal.
func equalJobs(t *testing.T, got, want *record.Job) {
	t.Helper()
	g, w := *got, *want
	for _, p := range []struct {
		name string
		a, b time.Time
	}{{"CreatedAt", g.CreatedAt, w.CreatedAt}, {"StartedAt", g.StartedAt, w.StartedAt}, {"EndedAt", g.EndedAt, w.EndedAt}} {
		if !p.a.Equal(p.b) || p.a.IsZero() != p.b.IsZero() {
			t.Errorf("%s: got %v, want %v", p.name, p.a, p.b)
		}
	}
	g.CreatedAt, g.StartedAt, g.EndedAt = time.Time{}, time.Time{}, time.Time{}
	w.CreatedAt, w.StartedAt, w.EndedAt = time.Time{}, time.Time{}, time.Time{}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("job mismatch:\n got %+v\nwant %+v", g, w)
	}
}

func TestRoundTrip(t *testing.T) {
	s, _ := openTemp(t)
	ctx := context.Background()

	tests := []struct {
		name string
		job  *record.Job
	}{
		{"every field set", fullJob("full")},
		{"exit code zero", func() *record.Job { j := fullJob("zero"); j.ExitCode = intp(0); return j }()},
		{"exit code negative", func() *record.Job { j := fullJob("neg"); j.ExitCode = intp(-1); return j }()},
		{"nil exit code, nil env, zero times", &record.Job{ID: "bare", Kind: "command", Status: "running", CreatedAt: base}},
		{"empty non-nil env", func() *record.Job { j := fullJob("emptyenv"); j.Env = []string{}; return j }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.CreateJob(ctx, tc.job); err != nil {
				t.Fatal(err)
			}
			got, err := s.GetJob(ctx, tc.job.ID)
			if err != nil {
				t.Fatal(err)
			}
			equalJobs(t, got, tc.job)
			if (got.ExitCode == nil) != (tc.job.ExitCode == nil) {
				t.Errorf("ExitCode nil-ness: got %v want %v", got.ExitCode, tc.job.ExitCode)
			}
			if (got.Env == nil) != (tc.job.Env == nil) {
				t.Errorf("Env nil-ness: got %#v want %#v", got.Env, tc.job.Env)
			}
		})
	}

	t.Run("update every field", func(t *testing.T) {
		j := &record.Job{ID: "upd", Kind: "command", Status: "queued", CreatedAt: base}
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		u := fullJob("upd")
		u.CreatedAt, u.Tenant = base.Add(time.Hour), j.Tenant // an update never changes the owner
		if err := s.UpdateJob(ctx, u); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetJob(ctx, "upd")
		if err != nil {
			t.Fatal(err)
		}
		equalJobs(t, got, u)

		// Back to unset: nil exit code, zero times, nil env.
		back := &record.Job{ID: "upd", Kind: "session", Status: "running", CreatedAt: base, Tenant: j.Tenant}
		if err := s.UpdateJob(ctx, back); err != nil {
			t.Fatal(err)
		}
		got, err = s.GetJob(ctx, "upd")
		if err != nil {
			t.Fatal(err)
		}
		equalJobs(t, got, back)

		// A zero CreatedAt in an update keeps the stored one.
		noCreated := *back
		noCreated.CreatedAt = time.Time{}
		noCreated.Status = "completed"
		if err := s.UpdateJob(ctx, &noCreated); err != nil {
			t.Fatal(err)
		}
		got, err = s.GetJob(ctx, "upd")
		if err != nil {
			t.Fatal(err)
		}
		if !got.CreatedAt.Equal(base) || got.Status != "completed" {
			t.Errorf("after zero-CreatedAt update: CreatedAt=%v Status=%s", got.CreatedAt, got.Status)
		}
		if got.ExitCode != nil || got.Env != nil || !got.StartedAt.IsZero() || !got.EndedAt.IsZero() {
			t.Errorf("fields not cleared: %+v", got)
		}
	})

	t.Run("read cursor", func(t *testing.T) {
		if err := s.SetReadCursors(ctx, "full", 12345, 7, 8); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetJob(ctx, "full")
		if err != nil {
			t.Fatal(err)
		}
		want := fullJob("full")
		want.ReadCursor, want.StdoutReadCursor, want.StderrReadCursor, want.Tenant = 12345, 7, 8, "local"
		equalJobs(t, got, want)
	})

	t.Run("errors", func(t *testing.T) {
		if _, err := s.GetJob(ctx, "missing"); !errors.Is(err, record.ErrJobNotFound) {
			t.Errorf("GetJob missing: %v", err)
		}
		if err := s.UpdateJob(ctx, fullJob("missing")); !errors.Is(err, record.ErrJobNotFound) {
			t.Errorf("UpdateJob missing: %v", err)
		}
		if err := s.SetReadCursors(ctx, "missing", 1, 1, 1); !errors.Is(err, record.ErrJobNotFound) {
			t.Errorf("SetReadCursors missing: %v", err)
		}
		if err := s.CreateJob(ctx, fullJob("full")); !errors.Is(err, record.ErrJobExists) {
			t.Errorf("CreateJob duplicate: %v", err)
		}
		if err := s.CreateJob(ctx, &record.Job{}); err == nil {
			t.Error("CreateJob without ID succeeded")
		}
	})

	t.Run("created at defaults to now", func(t *testing.T) {
		before := time.Now()
		j := &record.Job{ID: "now", Kind: "command", Status: "queued"}
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		if j.CreatedAt.Before(before) {
			t.Errorf("CreatedAt not filled: %v", j.CreatedAt)
		}
		got, err := s.GetJob(ctx, "now")
		if err != nil {
			t.Fatal(err)
		}
		if !got.CreatedAt.Equal(j.CreatedAt) {
			t.Errorf("CreatedAt %v, want %v", got.CreatedAt, j.CreatedAt)
		}
	})
}

func mustCreate(t *testing.T, s *Store, jobs ...*record.Job) {
	t.Helper()
	for _, j := range jobs {
		if err := s.CreateJob(context.Background(), j); err != nil {
			t.Fatalf("create %s: %v", j.ID, err)
		}
	}
}

func ids(jobs []*record.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestListJobs(t *testing.T) {
	s, _ := openTemp(t)
	ctx := context.Background()
	at := func(sec int) time.Time { return base.Add(time.Duration(sec) * time.Second) }
	mustCreate(t, s,
		&record.Job{ID: "a", Kind: "command", Status: "completed", Workspace: "/w1", CreatedAt: at(1)},
		&record.Job{ID: "b", Kind: "script", Status: "running", Workspace: "/w2", CreatedAt: at(2)},
		&record.Job{ID: "c", Kind: "session", Status: "queued", Workspace: "/w1", CreatedAt: at(3)},
		// d and e share c's timestamp: ID breaks the tie (descending).
		&record.Job{ID: "e", Kind: "command", Status: "failed", Workspace: "/w2", CreatedAt: at(3)},
		&record.Job{ID: "d", Kind: "command", Status: "running", Workspace: "/w1", CreatedAt: at(3)},
		&record.Job{ID: "f", Kind: "script", Status: "killed", Workspace: "/w1", CreatedAt: at(4)},
	)

	tests := []struct {
		name string
		f    record.ListFilter
		want []string
	}{
		{"all newest first", record.ListFilter{}, []string{"f", "e", "d", "c", "b", "a"}},
		{"one status", record.ListFilter{Status: []string{"running"}}, []string{"d", "b"}},
		{"several statuses", record.ListFilter{Status: []string{"running", "queued", "killed"}}, []string{"f", "d", "c", "b"}},
		{"unknown status", record.ListFilter{Status: []string{"nope"}}, nil},
		{"kind", record.ListFilter{Kind: "command"}, []string{"e", "d", "a"}},
		{"workspace", record.ListFilter{Workspace: "/w1"}, []string{"f", "d", "c", "a"}},
		{"combined", record.ListFilter{Kind: "command", Workspace: "/w1", Status: []string{"running"}}, []string{"d"}},
		{"limit", record.ListFilter{Limit: 2}, []string{"f", "e"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, next, err := s.ListJobs(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if g := ids(got); !reflect.DeepEqual(g, tc.want) && !(len(g) == 0 && len(tc.want) == 0) {
				t.Errorf("got %v, want %v", g, tc.want)
			}
			if tc.f.Limit == 0 && next != "" {
				t.Errorf("unexpected next cursor %q", next)
			}
		})
	}

	t.Run("pages across equal timestamps", func(t *testing.T) {
		var all []string
		cursor := ""
		for range 10 {
			page, next, err := s.ListJobs(ctx, record.ListFilter{Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, ids(page)...)
			if next == "" {
				break
			}
			cursor = next
		}
		if want := []string{"f", "e", "d", "c", "b", "a"}; !reflect.DeepEqual(all, want) {
			t.Errorf("got %v, want %v", all, want)
		}
	})

	t.Run("exact multiple has no trailing empty page", func(t *testing.T) {
		page, next, err := s.ListJobs(ctx, record.ListFilter{Limit: 3})
		if err != nil || len(page) != 3 || next == "" {
			t.Fatalf("page1: %v %d %q", err, len(page), next)
		}
		page, next, err = s.ListJobs(ctx, record.ListFilter{Limit: 3, Cursor: next})
		if err != nil || len(page) != 3 || next != "" {
			t.Fatalf("page2: %v %d %q", err, len(page), next)
		}
	})

	t.Run("bad cursor", func(t *testing.T) {
		for _, c := range []string{"!!!notbase64", "aGVsbG8", encodeCursorRaw("v2:1:x"), encodeCursorRaw("v1:abc:x"), encodeCursorRaw("v1:5:")} {
			if _, _, err := s.ListJobs(ctx, record.ListFilter{Cursor: c}); !errors.Is(err, record.ErrBadCursor) {
				t.Errorf("cursor %q: err = %v, want record.ErrBadCursor", c, err)
			}
		}
	})
}

func encodeCursorRaw(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestPagination120(t *testing.T) {
	s, _ := openTemp(t)
	ctx := context.Background()
	want := map[string]bool{}
	for i := range 120 {
		id := fmt.Sprintf("job-%03d", i)
		// Groups of three share a timestamp to exercise the ID tiebreak.
		mustCreate(t, s, &record.Job{ID: id, Kind: "command", Status: "completed", CreatedAt: base.Add(time.Duration(i/3) * time.Millisecond)})
		want[id] = true
	}
	seen := map[string]bool{}
	var pages []int
	var prev *record.Job
	cursor := ""
	for {
		page, next, err := s.ListJobs(ctx, record.ListFilter{Limit: 50, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, len(page))
		for _, j := range page {
			if seen[j.ID] {
				t.Errorf("duplicate %s", j.ID)
			}
			seen[j.ID] = true
			if prev != nil && (j.CreatedAt.After(prev.CreatedAt) || (j.CreatedAt.Equal(prev.CreatedAt) && j.ID > prev.ID)) {
				t.Errorf("order: %s after %s", j.ID, prev.ID)
			}
			prev = j
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if !reflect.DeepEqual(pages, []int{50, 50, 20}) {
		t.Errorf("page sizes %v, want [50 50 20]", pages)
	}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("saw %d distinct jobs, want %d", len(seen), len(want))
	}
	if n, err := s.CountJobs(ctx); err != nil || n != 120 {
		t.Errorf("CountJobs = %d, %v", n, err)
	}

	// Default limit is 50; above the max is clamped.
	page, _, err := s.ListJobs(ctx, record.ListFilter{})
	if err != nil || len(page) != record.DefaultListLimit {
		t.Errorf("default limit: %d, %v", len(page), err)
	}
	for i := 120; i < 620; i++ {
		mustCreate(t, s, &record.Job{ID: fmt.Sprintf("job-%03d", i), CreatedAt: base})
	}
	page, next, err := s.ListJobs(ctx, record.ListFilter{Limit: 10000})
	if err != nil || len(page) != record.MaxListLimit || next == "" {
		t.Errorf("clamped limit: %d, %q, %v", len(page), next, err)
	}
}

func TestJobsWithStatus(t *testing.T) {
	s, _ := openTemp(t)
	ctx := context.Background()
	mustCreate(t, s,
		&record.Job{ID: "r2", Status: "running", CreatedAt: base.Add(2)},
		&record.Job{ID: "q1", Status: "queued", CreatedAt: base.Add(1)},
		&record.Job{ID: "c", Status: "completed", CreatedAt: base},
		&record.Job{ID: "r0", Status: "running", CreatedAt: base},
	)
	tests := []struct {
		statuses []string
		want     []string
	}{
		{[]string{"running", "queued"}, []string{"r0", "q1", "r2"}},
		{[]string{"completed"}, []string{"c"}},
		{[]string{"lost"}, nil},
		{nil, nil},
	}
	for _, tc := range tests {
		got, err := s.JobsWithStatus(ctx, tc.statuses...)
		if err != nil {
			t.Fatal(err)
		}
		if g := ids(got); len(g)+len(tc.want) > 0 && !reflect.DeepEqual(g, tc.want) {
			t.Errorf("%v: got %v, want %v", tc.statuses, g, tc.want)
		}
	}
}

func TestDeleteJobs(t *testing.T) {
	old := base
	recent := base.Add(24 * time.Hour)
	cutoff := base.Add(time.Hour)
	seed := func(t *testing.T) *Store {
		s, _ := openTemp(t)
		mustCreate(t, s,
			&record.Job{ID: "run-old", Status: "running", CreatedAt: old, EndedAt: old}, // odd, but must survive
			&record.Job{ID: "queued-old", Status: "queued", CreatedAt: old},
			&record.Job{ID: "done-old", Status: "completed", CreatedAt: old, EndedAt: old},
			&record.Job{ID: "fail-old", Status: "failed", CreatedAt: old, EndedAt: old},
			&record.Job{ID: "done-new", Status: "completed", CreatedAt: old, EndedAt: recent},
			&record.Job{ID: "killed-noend-old", Status: "killed", CreatedAt: old},
			&record.Job{ID: "killed-noend-new", Status: "killed", CreatedAt: recent},
		)
		return s
	}
	tests := []struct {
		name   string
		f      record.PruneFilter
		want   []string
		remain int
	}{
		{"everything finished", record.PruneFilter{}, []string{"done-new", "done-old", "fail-old", "killed-noend-new", "killed-noend-old"}, 2},
		{"by age", record.PruneFilter{EndedBefore: cutoff}, []string{"done-old", "fail-old", "killed-noend-old"}, 4},
		{"by status", record.PruneFilter{Status: []string{"completed"}}, []string{"done-new", "done-old"}, 5},
		{"age and status", record.PruneFilter{EndedBefore: cutoff, Status: []string{"failed", "completed"}}, []string{"done-old", "fail-old"}, 5},
		{"active statuses are never deleted", record.PruneFilter{Status: []string{"running", "queued"}}, nil, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := seed(t)
			ctx := context.Background()
			got, err := s.DeleteJobs(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if len(got)+len(tc.want) > 0 && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("deleted %v, want %v", got, tc.want)
			}
			if n, _ := s.CountJobs(ctx); n != tc.remain {
				t.Errorf("%d jobs remain, want %d", n, tc.remain)
			}
			for _, id := range []string{"run-old", "queued-old"} {
				if _, err := s.GetJob(ctx, id); err != nil {
					t.Errorf("%s: %v", id, err)
				}
			}
			for _, id := range got {
				if _, err := s.GetJob(ctx, id); !errors.Is(err, record.ErrJobNotFound) {
					t.Errorf("%s still there: %v", id, err)
				}
			}
		})
	}
}

func TestReopen(t *testing.T) {
	s, path := openTemp(t)
	ctx := context.Background()
	j := fullJob("persist")
	mustCreate(t, s, j)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("parent dir mode %o, want 700", perm)
	}

	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.SetAside != "" {
		t.Errorf("reopen set aside %q", s2.SetAside)
	}
	got, err := s2.GetJob(ctx, "persist")
	if err != nil {
		t.Fatal(err)
	}
	equalJobs(t, got, j)

	var mode string
	var busy, sync, fk, ver int
	db := s2.db
	for _, q := range []struct {
		sql  string
		dest any
	}{{"PRAGMA journal_mode", &mode}, {"PRAGMA busy_timeout", &busy}, {"PRAGMA synchronous", &sync}, {"PRAGMA foreign_keys", &fk}, {"PRAGMA user_version", &ver}} {
		if err := db.QueryRow(q.sql).Scan(q.dest); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	if mode != "wal" || busy != 5000 || sync != 1 || fk != 1 || ver != SchemaVersion {
		t.Errorf("pragmas: journal_mode=%s busy_timeout=%d synchronous=%d foreign_keys=%d user_version=%d", mode, busy, sync, fk, ver)
	}
}

func TestCorruptFileSetAside(t *testing.T) {
	garbage := []byte(strings.Repeat("this is definitely not an sqlite database \x00\xff\x13", 200))
	tests := []struct {
		name    string
		garbage bool
		setup   func(t *testing.T, path string)
	}{
		{"garbage bytes", true, func(t *testing.T, path string) {
			writeFile(t, path, garbage)
		}},
		{"garbage with wal and shm", true, func(t *testing.T, path string) {
			writeFile(t, path, garbage)
			writeFile(t, path+"-wal", []byte("junk wal"))
			writeFile(t, path+"-shm", []byte("junk shm"))
		}},
		{"short garbage", true, func(t *testing.T, path string) {
			writeFile(t, path, []byte("SQLite"))
		}},
		{"valid header, garbage body", true, func(t *testing.T, path string) {
			b := append([]byte(sqliteMagic), garbage...)
			writeFile(t, path, b)
		}},
		{"foreign schema", false, func(t *testing.T, path string) {
			// A valid SQLite file whose "jobs" table is something else entirely.
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`CREATE TABLE jobs (x INTEGER); INSERT INTO jobs VALUES (1)`); err != nil {
				t.Fatal(err)
			}
		}},
		{"right version, wrong table", false, func(t *testing.T, path string) {
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`CREATE TABLE jobs (id TEXT); PRAGMA user_version = 1`); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "jobs.db")
			tc.setup(t, path)
			orig, _ := os.ReadFile(path)
			hadWAL := fileExists(path + "-wal")

			s, err := Open(path)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			if s.SetAside == "" || s.SetAsideErr == nil {
				t.Fatalf("SetAside=%q SetAsideErr=%v, want both set", s.SetAside, s.SetAsideErr)
			}
			t.Logf("set aside to %s because: %v", s.SetAside, s.SetAsideErr)
			if !strings.HasPrefix(s.SetAside, path+".corrupt-") {
				t.Errorf("SetAside = %q", s.SetAside)
			}
			if tc.garbage {
				moved, err := os.ReadFile(s.SetAside)
				if err != nil || string(moved) != string(orig) {
					t.Errorf("old file not preserved at %s: %v", s.SetAside, err)
				}
			} else {
				// SQLite may have rewritten header bytes; the old data must still be there.
				old, err := sql.Open("sqlite", s.SetAside)
				if err != nil {
					t.Fatal(err)
				}
				var n int
				if err := old.QueryRow(`SELECT COUNT(*) FROM jobs`).Scan(&n); err != nil {
					t.Errorf("set-aside database unreadable: %v", err)
				}
				old.Close()
			}
			if hadWAL {
				if b, err := os.ReadFile(s.SetAside + "-wal"); err != nil || string(b) != "junk wal" {
					t.Errorf("wal not moved aside: %v", err)
				}
				if b, err := os.ReadFile(s.SetAside + "-shm"); err != nil || string(b) != "junk shm" {
					t.Errorf("shm not moved aside: %v", err)
				}
			}

			// The fresh database works and persists.
			ctx := context.Background()
			j := fullJob("fresh")
			mustCreate(t, s, j)
			if n, err := s.CountJobs(ctx); err != nil || n != 1 {
				t.Fatalf("CountJobs = %d, %v", n, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if s2.SetAside != "" {
				t.Errorf("fresh database set aside again: %q", s2.SetAside)
			}
			got, err := s2.GetJob(ctx, "fresh")
			if err != nil {
				t.Fatal(err)
			}
			equalJobs(t, got, j)
		})
	}
}

func TestSetAsideNameCollision(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "jobs.db")
	now := time.Unix(1700000000, 0)
	writeFile(t, path, []byte("one"))
	first, err := setAside(path, now)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, []byte("two"))
	second, err := setAside(path, now)
	if err != nil {
		t.Fatal(err)
	}
	if first == second || first != path+".corrupt-1700000000" {
		t.Errorf("first=%s second=%s", first, second)
	}
	if b, _ := os.ReadFile(first); string(b) != "one" {
		t.Errorf("first overwritten: %q", b)
	}
}

func TestNewerSchemaIsNotSetAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(path); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open = %v, want ErrSchemaTooNew", err)
	}
	matches, _ := filepath.Glob(path + ".corrupt-*")
	if len(matches) != 0 || !fileExists(path) {
		t.Errorf("newer database was moved: %v", matches)
	}
}

func TestConcurrent(t *testing.T) {
	s, _ := openTemp(t)
	ctx := context.Background()
	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker*4)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				id := fmt.Sprintf("w%d-%d", w, i)
				j := &record.Job{ID: id, Kind: "command", Status: "queued", Env: []string{"W=" + id}}
				if err := s.CreateJob(ctx, j); err != nil {
					errs <- err
					continue
				}
				j.Status, j.StartedAt = "running", time.Now()
				if err := s.UpdateJob(ctx, j); err != nil {
					errs <- err
				}
				if err := s.SetReadCursors(ctx, id, int64(i), 0, 0); err != nil {
					errs <- err
				}
				j.Status, j.EndedAt, j.ExitCode, j.ReadCursor = "completed", time.Now(), intp(i), int64(i)
				if err := s.UpdateJob(ctx, j); err != nil {
					errs <- err
				}
				if _, _, err := s.ListJobs(ctx, record.ListFilter{Limit: 5}); err != nil {
					errs <- err
				}
			}
		}()
	}
	// A concurrent pruner must only ever see finished jobs.
	wg.Add(1)
	deleted := map[string]bool{}
	go func() {
		defer wg.Done()
		for range 20 {
			got, err := s.DeleteJobs(ctx, record.PruneFilter{Status: []string{"never-matches"}})
			if err != nil {
				errs <- err
			}
			for _, id := range got {
				deleted[id] = true
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(deleted) != 0 {
		t.Errorf("pruner deleted %d jobs", len(deleted))
	}
	if n, err := s.CountJobs(ctx); err != nil || n != workers*perWorker {
		t.Fatalf("CountJobs = %d, %v", n, err)
	}
	done, err := s.JobsWithStatus(ctx, "completed")
	if err != nil || len(done) != workers*perWorker {
		t.Fatalf("completed = %d, %v", len(done), err)
	}
	for _, j := range done {
		if j.ExitCode == nil || j.ReadCursor != int64(*j.ExitCode) || len(j.Env) != 1 || j.Env[0] != "W="+j.ID {
			t.Errorf("bad final state: %+v", j)
		}
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func TestCorruptPagesSetAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		j := fullJob(fmt.Sprintf("job-%03d", i))
		j.Command = strings.Repeat("x", 500)
		mustCreate(t, s, j)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Smash a few pages in the middle of the file, leaving the header intact.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte(strings.Repeat("\xde\xad\xbe\xef", 4096))
	if _, err := f.WriteAt(junk, 4096*3); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s2, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s2.Close()
	if s2.SetAside == "" {
		t.Fatal("corrupt pages not detected")
	}
	t.Logf("set aside because: %v", s2.SetAsideErr)
	if n, err := s2.CountJobs(context.Background()); err != nil || n != 0 {
		t.Errorf("fresh database: %d jobs, %v", n, err)
	}
}

func TestEmptyFileIsFreshDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.db")
	writeFile(t, path, nil)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.SetAside != "" {
		t.Errorf("empty file set aside to %s", s.SetAside)
	}
	mustCreate(t, s, fullJob("x"))
}

func TestPathWithURICharacters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "we?ird#dir %41", "jobs.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, fullJob("x"))
	s.Close()
	if !fileExists(path) {
		t.Fatalf("database not created at %s", path)
	}
	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetJob(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateFromVersion1: a database written by a build with schema 1 is
// upgraded in place, keeping its jobs.
func TestMigrateFromVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(migrations[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO jobs (id, kind, status, created_at, read_cursor) VALUES ('old', 'command', 'completed', 1, 42)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA user_version = 1`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.SetAside != "" {
		t.Fatalf("a version 1 database was set aside (%v) instead of migrated", s.SetAsideErr)
	}
	j, err := s.GetJob(context.Background(), "old")
	if err != nil {
		t.Fatal(err)
	}
	if j.ReadCursor != 42 || j.StdoutReadCursor != 0 {
		t.Fatalf("migrated job: %+v", j)
	}
	if err := s.SetReadCursors(context.Background(), "old", 42, 5, 6); err != nil {
		t.Fatal(err)
	}
}

// Two servers racing to adopt a dead server's job: exactly one wins, and a
// finished job can't be claimed at all.
func TestClaimJobOnce(t *testing.T) {
	s, _ := openTemp(t)
	ctx := context.Background()
	j := &record.Job{ID: "j1", Status: record.StatusRunning, ServerID: "dead", Usage: record.Usage{CPUMS: 5}}
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	won := 0
	for _, to := range []string{"b", "c"} {
		ok, err := s.ClaimJob(ctx, "j1", "dead", to)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d servers claimed the job", won)
	}
	got, err := s.GetJob(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ServerID != "b" || got.Usage.CPUMS != 5 {
		t.Fatalf("got server %q usage %+v", got.ServerID, got.Usage)
	}
	got.Status = "completed"
	if err := s.UpdateJob(ctx, got); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.ClaimJob(ctx, "j1", "b", "c"); ok {
		t.Fatal("claimed a finished job")
	}
}

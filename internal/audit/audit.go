// Package audit appends one JSON line per tool call that runs or changes
// anything to <state dir>/audit.log: when, which client, which tool, which
// job, the command (or a sha256 of a script), the block-list decision and the
// outcome. Secrets are redacted before a line is written (see Redact); env
// values never are written at all. The log is append-only and rotated by size
// (audit.log.1 … audit.log.N, oldest dropped).
package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// FileName is the log's name in the state directory.
const FileName = "audit.log"

// Defaults for rotation.
const (
	DefaultMaxBytes = 10 << 20
	DefaultKeep     = 3
)

// Entry is one line of the log.
type Entry struct {
	Time         time.Time `json:"time"`
	Client       string    `json:"client,omitempty"`
	Tenant       string    `json:"tenant,omitempty"` // the token's client ("local" for stdio); absent in older lines
	Source       string    `json:"source,omitempty"` // the remote address of a console action
	Server       string    `json:"server,omitempty"`
	Tool         string    `json:"tool"`
	JobID        string    `json:"job_id,omitempty"`
	Command      string    `json:"command,omitempty"`
	ScriptSHA256 string    `json:"script_sha256,omitempty"`
	EnvKeys      []string  `json:"env_keys,omitempty"` // names only, never values
	Decision     string    `json:"decision"`           // allowed, blocked, refused (rejected before it ran), awaiting_approval, approved or declined (approvals)
	Rule         string    `json:"rule,omitempty"`     // the block-list rule, when blocked
	Outcome      string    `json:"outcome"`            // the job's status, "ok", or "error"
	Error        string    `json:"error,omitempty"`
	DurationMS   int64     `json:"duration_ms"`
	// A connection through the egress proxy (tool "egress"): where to, and
	// the bytes each way.
	Host      string `json:"host,omitempty"`
	Port      int    `json:"port,omitempty"`
	BytesUp   int64  `json:"bytes_up,omitempty"`
	BytesDown int64  `json:"bytes_down,omitempty"`
	// Secrets are the secrets the proxy put into a request (tool "secret"),
	// by name: a value is never written here.
	Secrets []string `json:"secrets,omitempty"`
}

// Decisions.
const (
	Allowed = "allowed"
	Blocked = "blocked"
	Refused = "refused"
	// A call the policy's approvals hold: asked a person (awaiting),
	// approved and run, or declined by the person.
	AwaitingApproval = "awaiting_approval"
	Approved         = "approved"
	Declined         = "declined"
)

// Log is an append-only, size-rotated JSON-lines file. Safe for concurrent
// use, also by several servers on one state dir (lines are written with one
// write(2) each on an O_APPEND file; rotation is best effort).
type Log struct {
	path     string
	maxBytes int64
	keep     int

	mu sync.Mutex
	f  *os.File
}

// Open opens (creating) dir/audit.log.
func Open(dir string, maxBytes int64, keep int) (*Log, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if keep < 1 {
		keep = DefaultKeep
	}
	l := &Log{path: filepath.Join(dir, FileName), maxBytes: maxBytes, keep: keep}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Log) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	l.f = f
	return nil
}

// Path is the log's path.
func (l *Log) Path() string { return l.path }

// Write appends e (redacting its command and error first).
func (l *Log) Write(e Entry) error {
	if l == nil {
		return nil
	}
	e.Command = Redact(e.Command)
	e.Error = Redact(e.Error)
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("audit log closed")
	}
	if st, err := l.f.Stat(); err == nil && st.Size()+int64(len(b)) > l.maxBytes && st.Size() > 0 {
		l.rotate()
	}
	_, err = l.f.Write(b)
	return err
}

// rotate shifts audit.log.(n-1) → .n, …, audit.log → .1 and reopens.
func (l *Log) rotate() {
	l.f.Close()
	// Another server may have rotated already: only rotate what is still big.
	if st, err := os.Stat(l.path); err == nil && st.Size() > 0 {
		os.Remove(fmt.Sprintf("%s.%d", l.path, l.keep))
		for i := l.keep - 1; i >= 1; i-- {
			os.Rename(fmt.Sprintf("%s.%d", l.path, i), fmt.Sprintf("%s.%d", l.path, i+1))
		}
		os.Rename(l.path, l.path+".1")
	}
	if err := l.open(); err != nil {
		l.f = nil
	}
}

// Close closes the file.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Filter selects entries for Read.
type Filter struct {
	JobID string
	Since time.Time
}

// Read calls fn for each entry of the log in dir (rotated files first, oldest
// first) that passes f. Lines that are not entries are skipped.
func Read(dir string, f Filter, fn func(Entry, []byte) error) error {
	base := filepath.Join(dir, FileName)
	var files []string
	for i := 64; i >= 1; i-- {
		p := fmt.Sprintf("%s.%d", base, i)
		if _, err := os.Stat(p); err == nil {
			files = append(files, p)
		}
	}
	files = append(files, base)
	found := false
	for _, p := range files {
		fh, err := os.Open(p)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return err
		}
		found = true
		err = scan(fh, f, fn)
		fh.Close()
		if err != nil {
			return err
		}
	}
	if !found {
		return fmt.Errorf("no audit log at %s", base)
	}
	return nil
}

func scan(r io.Reader, f Filter, fn func(Entry, []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var e Entry
			if json.Unmarshal(line, &e) == nil && e.Tool != "" {
				if (f.JobID == "" || e.JobID == f.JobID) && (f.Since.IsZero() || !e.Time.Before(f.Since)) {
					if err := fn(e, line); err != nil {
						return err
					}
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Note is what a tool tells the audit log about its call, beyond what the
// middleware reads from the arguments and the result.
type Note struct {
	mu       sync.Mutex
	Decision string
	Rule     string
	JobID    string
	// Ran: the call got past its checks and did its work, so an error
	// result is its work failing ("failed"), not a refusal.
	Ran bool
}

type noteKey struct{}

// WithNote returns ctx carrying a fresh Note, and the note.
func WithNote(ctx context.Context) (context.Context, *Note) {
	n := &Note{}
	return context.WithValue(ctx, noteKey{}, n), n
}

// NoteBlocked records that the block list refused the call by rule.
func NoteBlocked(ctx context.Context, rule string) {
	if n, ok := ctx.Value(noteKey{}).(*Note); ok {
		n.mu.Lock()
		n.Decision, n.Rule = Blocked, rule
		n.mu.Unlock()
	}
}

// NoteDecision records a decision about the call other than the block
// list's (an approval's), with what it covered as its rule.
func NoteDecision(ctx context.Context, decision, rule string) {
	if n, ok := ctx.Value(noteKey{}).(*Note); ok {
		n.mu.Lock()
		n.Decision, n.Rule = decision, rule
		n.mu.Unlock()
	}
}

// NoteJob records the job a call made or acted on.
func NoteJob(ctx context.Context, id string) {
	if n, ok := ctx.Value(noteKey{}).(*Note); ok {
		n.mu.Lock()
		n.JobID = id
		n.mu.Unlock()
	}
}

// NoteRan records that the call passed its checks and ran (an install
// that then fails is failed, not refused).
func NoteRan(ctx context.Context) {
	if n, ok := ctx.Value(noteKey{}).(*Note); ok {
		n.mu.Lock()
		n.Ran = true
		n.mu.Unlock()
	}
}

// Get returns the note's fields.
func (n *Note) Get() (decision, rule, jobID string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.Decision, n.Rule, n.JobID
}

// HasRun says whether NoteRan was called.
func (n *Note) HasRun() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.Ran
}

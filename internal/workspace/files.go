package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// File operations of write_file, read_file and list_files. The server never
// touches a workspace's files itself: each operation is an exec of the
// supervisor's fs helper inside the container, as uid 1000, which opens paths
// beneath /workspace without following any symbolic link.

// Root is where a workspace's files are, inside its container.
const Root = "/workspace"

// Limits of the file operations.
const (
	MaxWriteBytes   = 8 << 20 // content of one write_file
	MaxReadBytes    = 8 << 20 // the highest max_bytes of read_file
	MaxListEntries  = 10000   // the highest max_entries of list_files
	MaxPathBytes    = 4096    // a path argument
	fileOpTimeout   = 60 * time.Second
	maxHelperOutput = 12 << 20 // base64 of MaxReadBytes plus JSON
)

const supervisorPath = "/usr/local/bin/sandboxer-supervisor"

// ErrFile is a file operation the helper refused or could not do; its text
// says why (a symbolic link in the path, no such file, ...).
var ErrFile = errors.New("file operation failed")

// FileError is what the helper reported.
type FileError struct {
	Kind, Msg string
}

func (e *FileError) Error() string { return e.Msg }
func (e *FileError) Unwrap() error { return ErrFile }

// CleanPath turns a path argument into a path relative to /workspace: a
// relative path is taken from /workspace; an absolute one must be /workspace
// or below it. '..', NUL bytes and anything outside /workspace are refused
// here, before any engine call. field names the argument in messages.
func CleanPath(field, p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("%s is empty: give a path inside %s", field, Root)
	}
	if len(p) > MaxPathBytes {
		return "", fmt.Errorf("%s is %d bytes; the limit is %d", field, len(p), MaxPathBytes)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("%s contains a NUL byte", field)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("%s %q contains '..': give a path inside %s", field, truncate(p, 200), Root)
		}
	}
	if strings.HasPrefix(p, "/") {
		c := path.Clean(p)
		if c != Root && !strings.HasPrefix(c, Root+"/") {
			return "", fmt.Errorf("%s %q is outside %s: file tools reach only the workspace's files (give a path relative to %s or under it)", field, truncate(p, 200), Root, Root)
		}
		p = strings.TrimPrefix(strings.TrimPrefix(c, Root), "/")
	}
	c := path.Clean(p)
	if c == "" {
		c = "."
	}
	return c, nil
}

// Exec runs a plain command in a workspace's container (started first if it
// was stopped); the workspace counts as in use meanwhile.
func (m *Manager) Exec(ctx context.Context, name string, opts sandbox.ExecOptions) (int, error) {
	w, release, err := m.Acquire(ctx, name)
	if err != nil {
		return -1, err
	}
	defer release()
	return m.rt.Exec(ctx, w.ContainerID, opts)
}

// fs runs the supervisor's fs helper in the workspace.
func (m *Manager) fs(ctx context.Context, name string, stdin io.Reader, args ...string) (*proto.FSResult, error) {
	ctx, cancel := context.WithTimeout(ctx, fileOpTimeout)
	defer cancel()
	out := &capped{max: maxHelperOutput}
	var errb capped
	errb.max = 4096
	code, err := m.Exec(ctx, name, sandbox.ExecOptions{
		Cmd:   append([]string{supervisorPath, proto.FSCommand}, args...),
		Stdin: stdin, Stdout: out, Stderr: &errb,
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("the file operation in workspace %q took over %s", name, fileOpTimeout)
		}
		return nil, err
	}
	var res proto.FSResult
	if jerr := json.Unmarshal(out.buf.Bytes(), &res); jerr != nil {
		msg := strings.TrimSpace(errb.buf.String())
		if msg == "" {
			msg = strings.TrimSpace(truncate(out.buf.String(), 300))
		}
		return nil, fmt.Errorf("the file helper in workspace %q failed (exit %d): %s (an image built before file tools lacks it: run `sandboxer images build`, then delete and create the workspace)", name, code, msg)
	}
	if res.Error != "" {
		return nil, &FileError{Kind: res.ErrorKind, Msg: res.Error}
	}
	return &res, nil
}

// ReadFile reads a file of a workspace: bytes up to maxBytes, or lines
// [offset, offset+limit) when offset or limit is set (1-based; 0 = unset).
func (m *Manager) ReadFile(ctx context.Context, name, rel string, offset, limit int, maxBytes int64) (*proto.FSResult, error) {
	return m.fs(ctx, name, nil, "read", rel, strconv.Itoa(offset), strconv.Itoa(limit), strconv.FormatInt(maxBytes, 10))
}

// WriteFile writes (or appends) content to a file of a workspace, making
// missing parent directories; mode < 0 keeps an existing file's mode (0644 for new ones).
func (m *Manager) WriteFile(ctx context.Context, name, rel string, content []byte, mode int64, appendTo bool) (*proto.FSResult, error) {
	ms := "-"
	if mode >= 0 {
		ms = strconv.FormatInt(mode, 8)
	}
	ap := "0"
	if appendTo {
		ap = "1"
	}
	return m.fs(ctx, name, bytes.NewReader(content), "write", rel, ms, ap, strconv.Itoa(MaxWriteBytes))
}

// ListFiles lists a directory of a workspace (or describes one file).
func (m *Manager) ListFiles(ctx context.Context, name, rel string, recursive bool, glob string, max int) (*proto.FSResult, error) {
	r := "0"
	if recursive {
		r = "1"
	}
	if glob == "" {
		glob = "-"
	}
	return m.fs(ctx, name, nil, "list", rel, r, glob, strconv.Itoa(max))
}

// capped keeps at most max bytes and drops the rest.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

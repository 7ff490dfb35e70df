// Package baseline keeps what a workspace was imported from: the tree of a
// granted mount as it was copied, so workspace_changes can say what a
// workspace changed since. Each baseline is a manifest plus its files'
// contents stored by SHA-256 under the server's state dir; file names on
// disk are hashes, never the tree's own paths, so nothing in a tree (a link,
// a "..") can steer a write on the server's host.
package baseline

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// ErrTooLarge is a tree whose files hold more than the limit given to Build.
var ErrTooLarge = errors.New("tree too large")

// Manifest describes one baseline.
type Manifest struct {
	// Source names where the tree came from: the mount's name.
	Source    string                `json:"source"`
	CreatedAt time.Time             `json:"created_at"`
	Entries   []proto.BaselineEntry `json:"entries"`
	// Skipped are sockets, FIFOs and devices the copy left out.
	Skipped []proto.SpecialFile `json:"skipped,omitempty"`
	Bytes   int64               `json:"bytes"`
}

// Store keeps baselines under one directory, one subdirectory per workspace.
type Store struct{ dir string }

// New keeps baselines under dir (made on first use).
func New(dir string) *Store { return &Store{dir: dir} }

const manifestFile = "manifest.json"

func (s *Store) wsDir(name string) string { return filepath.Join(s.dir, name) }

// Load returns a workspace's baseline, or nil when it has none.
func (s *Store) Load(name string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(s.wsDir(name), manifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("baseline of %q: %w", name, err)
	}
	return &m, nil
}

// Blob is the content of a file of a workspace's baseline.
func (s *Store) Blob(name, sum string) ([]byte, error) {
	if !isHex(sum) {
		return nil, fmt.Errorf("bad content hash %q", sum)
	}
	return os.ReadFile(filepath.Join(s.wsDir(name), "objects", sum))
}

// Remove deletes a workspace's baseline; idempotent.
func (s *Store) Remove(name string) error { return os.RemoveAll(s.wsDir(name)) }

// Copy gives workspace to the baseline of from (a fork), sharing its files
// through hard links; no baseline, no copy.
func (s *Store) Copy(from, to string) error {
	src := s.wsDir(from)
	if _, err := os.Stat(filepath.Join(src, manifestFile)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	p, err := s.pending()
	if err != nil {
		return err
	}
	objs, err := os.ReadDir(filepath.Join(src, "objects"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		p.Discard()
		return err
	}
	for _, o := range objs {
		if err := os.Link(filepath.Join(src, "objects", o.Name()), filepath.Join(p.dir, "objects", o.Name())); err != nil {
			p.Discard()
			return err
		}
	}
	b, err := os.ReadFile(filepath.Join(src, manifestFile))
	if err == nil {
		err = os.WriteFile(filepath.Join(p.dir, manifestFile), b, 0o600)
	}
	if err == nil {
		err = p.Commit(to)
	}
	if err != nil {
		p.Discard()
	}
	return err
}

// Pending is a baseline being built; Commit puts it in place, Discard drops it.
type Pending struct {
	Manifest Manifest
	s        *Store
	dir      string
}

func (s *Store) pending() (*Pending, error) {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(s.dir, ".pending-")
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "objects"), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Pending{s: s, dir: dir}, nil
}

// Build reads a tar stream of a tree (as the engine's archive API gives
// it, paths under "./") into a pending baseline. Links stay links; sockets,
// FIFOs and devices are left out and listed; files past maxBytes in all
// fail it with ErrTooLarge. When copy is not nil, the tree as kept is also
// written to it as it is read, as WriteTar would write it: the copy into a
// workspace runs alongside.
func (s *Store) Build(r io.Reader, source string, maxBytes int64, copy *TarCopy) (*Pending, error) {
	p, err := s.pending()
	if err != nil {
		return nil, err
	}
	p.Manifest = Manifest{Source: source, CreatedAt: time.Now().UTC()}
	err = p.read(tar.NewReader(r), maxBytes, copy)
	if err == nil && copy != nil {
		err = copy.tw().Close()
	}
	if err != nil {
		p.Discard()
		return nil, err
	}
	return p, nil
}

// TarCopy is where Build copies the tree it keeps, with every file owned
// by UID:GID.
type TarCopy struct {
	W        io.Writer
	UID, GID int
	w        *tar.Writer
}

func (c *TarCopy) tw() *tar.Writer {
	if c.w == nil {
		c.w = tar.NewWriter(c.W)
	}
	return c.w
}

func (p *Pending) read(tr *tar.Reader, maxBytes int64, copy *TarCopy) (err error) {
	// Small files are written to disk by a writer of their own, so the
	// stream (and the copy into the workspace riding on it) does not wait
	// for each file's creation.
	w := p.startWriter()
	defer func() {
		if werr := w.wait(); err == nil {
			err = werr
		}
	}()
	sums := map[string]proto.BaselineEntry{} // regular files by path, for hard links
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the tree's archive: %w", err)
		}
		name, ok := cleanName(h.Name)
		if !ok {
			return fmt.Errorf("the tree's archive holds a path outside it: %q", h.Name)
		}
		if name == "." {
			continue // the tree's root is /workspace itself
		}
		e := proto.BaselineEntry{Path: name, Mode: uint32(h.Mode) & 0o7777, MTime: h.ModTime.UnixNano()}
		switch h.Typeflag {
		case tar.TypeDir:
			e.Type = "dir"
		case tar.TypeSymlink:
			e.Type, e.Target = "symlink", h.Linkname
		case tar.TypeReg, tar.TypeRegA:
			p.Manifest.Bytes += h.Size
			if p.Manifest.Bytes > maxBytes {
				return fmt.Errorf("%w: its files hold over %d MiB", ErrTooLarge, maxBytes>>20)
			}
			var content io.Reader = tr
			if copy != nil {
				e.Type, e.Size = "file", h.Size
				if err := copy.tw().WriteHeader(header(e, copy.UID, copy.GID)); err != nil {
					return err
				}
				content = io.TeeReader(tr, copy.tw())
			}
			var sum string
			if h.Size <= smallFile {
				b, err := io.ReadAll(content)
				if err != nil {
					return fmt.Errorf("read the tree's archive: %w", err)
				}
				sum = w.put(b)
			} else if sum, err = p.putBlob(content); err != nil {
				return err
			}
			e.Type, e.Size, e.SHA256 = "file", h.Size, sum
			sums[name] = e
		case tar.TypeLink:
			target, ok := cleanName(h.Linkname)
			src, found := sums[target]
			if !ok || !found {
				return fmt.Errorf("the tree's archive links %q to %q, which it does not hold", h.Name, h.Linkname)
			}
			p.Manifest.Bytes += src.Size
			if p.Manifest.Bytes > maxBytes {
				return fmt.Errorf("%w: its files hold over %d MiB", ErrTooLarge, maxBytes>>20)
			}
			e.Type, e.Size, e.SHA256 = "file", src.Size, src.SHA256
			if copy != nil {
				// Written as a file of its own: the workspace's copy
				// need not keep the link.
				w.flush()
				if err := copy.tw().WriteHeader(header(e, copy.UID, copy.GID)); err != nil {
					return err
				}
				if err := p.copyBlob(copy.tw(), e); err != nil {
					return err
				}
			}
		default:
			p.Manifest.Skipped = append(p.Manifest.Skipped, proto.SpecialFile{Path: name, Type: tarSpecial(h.Typeflag)})
			continue
		}
		if copy != nil && e.Type != "file" {
			if err := copy.tw().WriteHeader(header(e, copy.UID, copy.GID)); err != nil {
				return err
			}
		}
		p.Manifest.Entries = append(p.Manifest.Entries, e)
	}
}

func tarSpecial(t byte) string {
	switch t {
	case tar.TypeFifo:
		return "fifo"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	}
	return "other"
}

// cleanName turns "./a/b/" into "a/b"; false for anything leaving the tree.
func cleanName(n string) (string, bool) {
	if strings.HasPrefix(n, "/") {
		return "", false
	}
	c := path.Clean(n)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", false
	}
	return c, true
}

// smallFile is the largest file handed to the background writer.
const smallFile = 1 << 20

type blobWriter struct {
	p    *Pending
	ch   chan blobJob
	done chan error
	seen map[string]bool
}

// blobJob is content to write, or (with flushed set) a barrier.
type blobJob struct {
	b       []byte
	flushed chan struct{}
}

func (p *Pending) startWriter() *blobWriter {
	w := &blobWriter{p: p, ch: make(chan blobJob, 64), done: make(chan error, 1), seen: map[string]bool{}}
	go func() {
		var first error
		for j := range w.ch {
			if j.flushed != nil {
				close(j.flushed)
				continue
			}
			if first == nil {
				_, first = p.putBlob(bytes.NewReader(j.b))
			}
		}
		w.done <- first
	}()
	return w
}

// flush waits until everything queued is on disk (or failed).
func (w *blobWriter) flush() {
	f := make(chan struct{})
	w.ch <- blobJob{flushed: f}
	<-f
}

// put queues content for writing and returns its hash.
func (w *blobWriter) put(b []byte) string {
	h := sha256.Sum256(b)
	sum := hex.EncodeToString(h[:])
	if !w.seen[sum] {
		w.seen[sum] = true
		w.ch <- blobJob{b: b}
	}
	return sum
}

func (w *blobWriter) wait() error {
	close(w.ch)
	return <-w.done
}

func (p *Pending) putBlob(r io.Reader) (string, error) {
	f, err := os.CreateTemp(filepath.Join(p.dir, "objects"), ".tmp-")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("store a baseline file: %w", err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	return sum, os.Rename(f.Name(), filepath.Join(p.dir, "objects", sum))
}

// WriteTar writes the baseline's tree as a tar stream whose files belong
// to uid:gid, with their modes and modification times.
func (p *Pending) WriteTar(w io.Writer, uid, gid int) error {
	tw := tar.NewWriter(w)
	for _, e := range p.Manifest.Entries {
		if err := tw.WriteHeader(header(e, uid, gid)); err != nil {
			return err
		}
		if e.Type == "file" {
			if err := p.copyBlob(tw, e); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

func (p *Pending) copyBlob(w io.Writer, e proto.BaselineEntry) error {
	f, err := os.Open(filepath.Join(p.dir, "objects", e.SHA256))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, io.LimitReader(f, e.Size))
	return err
}

// header is the tar header of an entry, owned by uid:gid.
func header(e proto.BaselineEntry, uid, gid int) *tar.Header {
	h := &tar.Header{Name: e.Path, Mode: int64(e.Mode), Uid: uid, Gid: gid, ModTime: time.Unix(0, e.MTime), Format: tar.FormatPAX}
	switch e.Type {
	case "dir":
		h.Typeflag, h.Name = tar.TypeDir, e.Path+"/"
	case "symlink":
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.Target
	case "file":
		h.Typeflag, h.Size = tar.TypeReg, e.Size
	}
	return h
}

// Commit puts the baseline in place as workspace name's (replacing any).
func (p *Pending) Commit(name string) error {
	if p.Manifest.Source != "" || p.Manifest.Entries != nil {
		b, err := json.Marshal(p.Manifest)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(p.dir, manifestFile), b, 0o600); err != nil {
			return err
		}
	}
	dst := p.s.wsDir(name)
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return os.Rename(p.dir, dst)
}

// Discard removes a baseline that was not committed.
func (p *Pending) Discard() { _ = os.RemoveAll(p.dir) }

func isHex(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

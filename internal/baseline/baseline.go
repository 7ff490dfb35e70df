// Package baseline keeps what a workspace was imported from: the tree of a
// granted mount as it was copied, so workspace_changes can say what a
// workspace changed since. Each baseline is a manifest plus its files'
// contents stored by SHA-256 under the server's state dir; file names on
// disk are hashes, never the tree's own paths, so nothing in a tree (a link,
// a "..") can steer a write on the server's host.
package baseline

import (
	"archive/tar"
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
// fail it with ErrTooLarge.
func (s *Store) Build(r io.Reader, source string, maxBytes int64) (*Pending, error) {
	p, err := s.pending()
	if err != nil {
		return nil, err
	}
	p.Manifest = Manifest{Source: source, CreatedAt: time.Now().UTC()}
	if err := p.read(tar.NewReader(r), maxBytes); err != nil {
		p.Discard()
		return nil, err
	}
	return p, nil
}

func (p *Pending) read(tr *tar.Reader, maxBytes int64) error {
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
			sum, err := p.putBlob(tr)
			if err != nil {
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
		default:
			p.Manifest.Skipped = append(p.Manifest.Skipped, proto.SpecialFile{Path: name, Type: tarSpecial(h.Typeflag)})
			continue
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
		h := &tar.Header{Name: e.Path, Mode: int64(e.Mode), Uid: uid, Gid: gid, ModTime: time.Unix(0, e.MTime), Format: tar.FormatPAX}
		switch e.Type {
		case "dir":
			h.Typeflag, h.Name = tar.TypeDir, e.Path+"/"
		case "symlink":
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Target
		case "file":
			h.Typeflag, h.Size = tar.TypeReg, e.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if e.Type == "file" {
			f, err := os.Open(filepath.Join(p.dir, "objects", e.SHA256))
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, io.LimitReader(f, e.Size))
			f.Close()
			if err != nil {
				return err
			}
		}
	}
	return tw.Close()
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

package fake

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// files are a container's files, in memory, by absolute path (a relative
// one is taken from /workspace, the working directory), or a volume's.
type files struct {
	mu sync.Mutex
	m  map[string]string
	// mounts are volumes mounted over parts of the tree: what is read or
	// written under their targets is the volume's (set at creation).
	mounts []mount
}

// mount is a volume's files at target.
type mount struct {
	target   string
	vol      *files
	readOnly bool
}

func newFiles() *files { return &files{m: map[string]string{}} }

// withFiles is a tree holding a copy of m.
func withFiles(m map[string]string) *files {
	if m == nil {
		return newFiles()
	}
	return &files{m: maps.Clone(m)}
}

// snapshot copies the tree's own files (not its volumes'), leaving out
// those under the directories skip names.
func (f *files) snapshot(skip ...string) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for k, v := range f.m {
		if !slices.ContainsFunc(skip, func(d string) bool { return strings.HasPrefix(k, d+"/") }) {
			out[k] = v
		}
	}
	return out
}

// resolve is where name lives: the tree or a volume mounted over it, the
// name there, and whether it is read-only.
func (f *files) resolve(name string) (*files, string, bool) {
	p := abs(name)
	for _, m := range f.mounts {
		if rel, ok := strings.CutPrefix(p, m.target); ok && (rel == "" || rel[0] == '/') {
			return m.vol, path.Join("/", rel), m.readOnly
		}
	}
	return f, p, false
}

// errReadOnly is a write under a read-only mount.
var errReadOnly = errors.New("Read-only file system")

func abs(name string) string {
	if !path.IsAbs(name) {
		name = path.Join("/workspace", name)
	}
	return path.Clean(name)
}

// write appends p to name (or, with add false, replaces its content).
func (f *files) write(name, p string, add bool) error {
	f, name, ro := f.resolve(name)
	if ro {
		return errReadOnly
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if add {
		f.m[name] += p
	} else {
		f.m[name] = p
	}
	return nil
}

func (f *files) read(name string) (string, bool) {
	f, name, _ = f.resolve(name)
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.m[name]
	return s, ok
}

// tar is the file at p, or the files under directory p ("dir/." names its
// contents, as Docker's archive API does), as a tar stream.
func (f *files) tar(p string) (io.ReadCloser, bool) {
	contents := strings.HasSuffix(p, "/.")
	p = abs(p)
	f.mu.Lock()
	var names []string
	for name := range f.m {
		if name == p || strings.HasPrefix(name, p+"/") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	snapshot := map[string]string{}
	for _, n := range names {
		snapshot[n] = f.m[n]
	}
	f.mu.Unlock()
	if len(names) == 0 {
		return nil, false
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	base := path.Dir(p)
	if contents {
		base = p
	}
	for _, n := range names {
		rel := strings.TrimPrefix(strings.TrimPrefix(n, base), "/")
		_ = tw.WriteHeader(&tar.Header{Name: rel, Mode: 0o644, Size: int64(len(snapshot[n])), Typeflag: tar.TypeReg, ModTime: time.Now(), Uid: 1000, Gid: 1000})
		_, _ = tw.Write([]byte(snapshot[n]))
	}
	_ = tw.Close()
	return io.NopCloser(&buf), true
}

// untar writes an archive's regular files under dir.
func (f *files) untar(dir string, archive io.Reader) error {
	tr := tar.NewReader(archive)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		if err := f.write(path.Join(abs(dir), h.Name), string(b), false); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}

// collect gathers what a job returns, as the supervisor does: the PNGs in
// c.FiguresDir (removed), then the files c.Patterns match under c.Dir, in
// name order, within proto's bounds and c.MaxBytes.
func (f *files) collect(c *proto.Collect) []proto.ReturnedFile {
	if c == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []proto.ReturnedFile
	under := func(dir string) []string {
		var names []string
		for name := range f.m {
			if rel, ok := strings.CutPrefix(name, dir+"/"); ok {
				names = append(names, rel)
			}
		}
		sort.Strings(names)
		return names
	}
	if c.FiguresDir != "" {
		n := 0
		for _, rel := range under(c.FiguresDir) {
			name := c.FiguresDir + "/" + rel
			if !strings.Contains(rel, "/") && strings.HasSuffix(rel, ".png") && n < proto.MaxFigures && len(f.m[name]) <= proto.MaxFigureBytes {
				out = append(out, proto.ReturnedFile{Path: rel, Kind: proto.KindFigure, Size: int64(len(f.m[name])), Data: []byte(f.m[name])})
				n++
			}
			delete(f.m, name)
		}
	}
	left, n := c.MaxBytes, 0
	for _, rel := range under(c.Dir) {
		if len(c.Patterns) == 0 || n == proto.MaxReturnFiles {
			break
		}
		matched := false
		for _, p := range c.Patterns {
			matched = matched || proto.MatchPattern(p, rel)
		}
		data := f.m[c.Dir+"/"+rel]
		switch {
		case !matched:
		case c.ListOnly:
			out = append(out, proto.ReturnedFile{Path: rel, Kind: proto.KindFile, Size: int64(len(data)), Listed: true})
			n++
		case int64(len(data)) <= left:
			out = append(out, proto.ReturnedFile{Path: rel, Kind: proto.KindFile, Size: int64(len(data)), Data: []byte(data)})
			left -= int64(len(data))
			n++
		}
	}
	return out
}

package job

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/png" // figures are PNGs
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/sandboxer/sandboxer/internal/record"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// Returned files (figures and returns) live under the job's output
// directory, in returnedDir/<kind>/<path>, until the job is pruned.
const returnedDir = "returned"

// FiguresDir is where a job's figures are written in its sandbox: on /tmp,
// one directory per job (a workspace's /tmp is shared by its jobs).
func FiguresDir(jobID string) string { return "/tmp/sandboxer-figures/" + jobID }

// collectSpec adds what the job returns to its sandbox's spec.
func (m *Manager) collectSpec(spec *sandbox.Spec, req Request, id string) {
	if !req.Figures && len(req.Returns) == 0 {
		return
	}
	c := &proto.Collect{}
	if req.Figures {
		c.FiguresDir = FiguresDir(id)
		spec.Env = append(spec.Env, proto.FiguresEnv+"="+c.FiguresDir)
	}
	if len(req.Returns) > 0 {
		c.Dir = spec.WorkDir
		if c.Dir == "" {
			c.Dir = DefaultCwd
		}
		c.Patterns = req.Returns
		c.ListOnly = req.Workspace != ""
		c.MaxBytes = m.pol.Output.ReturnedBytesPerJob
	}
	spec.Collect = c
}

// keepReturned stores what a job returned (hostile: from its sandbox)
// beside its output and says what was kept. A figure must be a PNG within
// proto's bounds; files count against the policy's cap.
func (m *Manager) keepReturned(id string, files []proto.ReturnedFile) []record.ReturnedFile {
	var kept []record.ReturnedFile
	left := m.pol.Output.ReturnedBytesPerJob
	for _, f := range files {
		r := record.ReturnedFile{Kind: f.Kind, Path: f.Path, Size: f.Size, Listed: f.Listed, MIME: MIMEType(f.Path, f.Data)}
		switch {
		case f.Kind == proto.KindFigure:
			cfg, format, err := image.DecodeConfig(bytes.NewReader(f.Data))
			if err != nil || format != "png" || len(f.Data) > proto.MaxFigureBytes {
				m.log.Warn().Str("job", id).Str("figure", f.Path).Msg("a returned figure is not a PNG within bounds: left out")
				continue
			}
			r.MIME, r.Width, r.Height = "image/png", cfg.Width, cfg.Height
		case f.Listed:
			kept = append(kept, r)
			continue
		case f.Size > left:
			m.log.Warn().Str("job", id).Str("file", f.Path).Msg("a returned file is over output.returned_bytes_per_job: left out")
			continue
		default:
			left -= f.Size
		}
		if err := m.writeReturned(id, f); err != nil {
			m.log.Warn().Err(err).Str("job", id).Str("file", f.Path).Msg("keep a returned file")
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

func (m *Manager) writeReturned(id string, f proto.ReturnedFile) error {
	dir := filepath.Join(m.jobDir(id), returnedDir, f.Kind)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if d := path.Dir(f.Path); d != "." {
		if err := root.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	return root.WriteFile(f.Path, f.Data, 0o600)
}

// MIMEType names a file's type by its extension, else by its first bytes.
func MIMEType(name string, data []byte) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	if data == nil {
		return "application/octet-stream"
	}
	return http.DetectContentType(data[:min(len(data), 512)])
}

// ErrNotReturned: the job returned no such figure or file (or it is kept in
// its workspace, not with the job).
var ErrNotReturned = errors.New("not returned by the job")

// Returned reads a figure or file the job returned and kept (at most max
// bytes), with its record; another tenant's job is not found.
func (m *Manager) Returned(ctx context.Context, id, kind, name string, max int64) ([]byte, record.ReturnedFile, error) {
	rec, err := m.Get(ctx, id)
	if err != nil {
		return nil, record.ReturnedFile{}, err
	}
	for _, r := range rec.Details.Returned {
		if r.Kind != kind || r.Path != name || r.Listed {
			continue
		}
		root, err := os.OpenRoot(filepath.Join(m.jobDir(id), returnedDir, kind))
		if err != nil {
			return nil, r, err
		}
		defer root.Close()
		f, err := root.Open(name)
		if err != nil {
			return nil, r, err
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, max+1))
		if err != nil {
			return nil, r, err
		}
		if int64(len(data)) > max {
			return nil, r, fmt.Errorf("%s is %d bytes, over the %d a read returns", name, r.Size, max)
		}
		return data, r, nil
	}
	return nil, record.ReturnedFile{}, fmt.Errorf("job %s: %s %q: %w", id, kind, name, ErrNotReturned)
}

// liveOutput is where a job's sandbox writes: its output, and the figures
// it returns while it runs (sandbox.FileOutput), kept at once.
func (m *Manager) liveOutput(j *liveJob) sandbox.Output {
	return fileOutput{Output: j.output(), file: func(f proto.ReturnedFile) {
		j.mu.Lock()
		defer j.mu.Unlock()
		if len(notKept(j.rec.Details.Returned, []proto.ReturnedFile{f})) == 0 {
			return
		}
		j.rec.Details.Returned = append(j.rec.Details.Returned, m.keepReturned(j.id, []proto.ReturnedFile{f})...)
	}}
}

type fileOutput struct {
	sandbox.Output
	file func(proto.ReturnedFile)
}

func (o fileOutput) File(f proto.ReturnedFile) { o.file(f) }

// notKept are the files not yet among kept (a figure sent while the job
// ran comes again in its end's list; an adopted job's log repeats them).
func notKept(kept []record.ReturnedFile, files []proto.ReturnedFile) []proto.ReturnedFile {
	var out []proto.ReturnedFile
	for _, f := range files {
		if !slices.ContainsFunc(kept, func(k record.ReturnedFile) bool { return k.Kind == f.Kind && k.Path == f.Path }) {
			out = append(out, f)
		}
	}
	return out
}

// NewFigures returns the figures a running job returned that no call has
// shown yet (a REPL's cells), and counts them as shown.
func (m *Manager) NewFigures(ctx context.Context, id string) ([]record.ReturnedFile, error) {
	if err := m.visible(ctx, id); err != nil {
		return nil, err
	}
	j := m.liveJob(id)
	if j == nil {
		return nil, nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	var figs []record.ReturnedFile
	n := 0
	for _, r := range j.rec.Details.Returned {
		if r.Kind != proto.KindFigure {
			continue
		}
		if n++; n > j.figuresShown {
			figs = append(figs, r)
		}
	}
	j.figuresShown = n
	return figs, nil
}

package supervisor

import (
	"path"
	"strings"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// returnedFiles assembles the files a job returns from its File frames.
// The frames come from inside the sandbox, so they are hostile: a path must
// be clean, relative and short, parts must follow one another, and the
// counts and sizes stay within proto's bounds; anything else is dropped.
type returnedFiles struct {
	files []proto.ReturnedFile
	bytes int64
}

// maxAssembled bounds the content held for one job.
const maxAssembled = proto.MaxReturnBytes + proto.MaxFigures*proto.MaxFigureBytes

// add takes one File frame; it returns the file when that frame completed it.
func (r *returnedFiles) add(payload []byte) (proto.ReturnedFile, bool) {
	h, part, err := proto.DecodeFile(payload)
	if err != nil || !cleanReturnPath(h) || h.Size < 0 || h.Offset < 0 {
		return proto.ReturnedFile{}, false
	}
	if h.Offset > 0 {
		last := len(r.files) - 1
		if last < 0 || r.files[last].Path != h.Path || int64(len(r.files[last].Data)) != h.Offset ||
			h.Offset+int64(len(part)) > r.files[last].Size || r.bytes+int64(len(part)) > maxAssembled {
			return proto.ReturnedFile{}, false
		}
		r.files[last].Data = append(r.files[last].Data, part...)
		r.bytes += int64(len(part))
		f := r.files[last]
		return f, int64(len(f.Data)) == f.Size
	}
	figures, others := 0, 0
	for _, f := range r.files {
		if f.Path == h.Path && f.Kind == h.Kind {
			return proto.ReturnedFile{}, false // a second copy
		}
		if f.Kind == proto.KindFigure {
			figures++
		} else {
			others++
		}
	}
	switch {
	case h.Kind == proto.KindFigure && (figures >= proto.MaxFigures || h.Size > proto.MaxFigureBytes || h.Listed),
		h.Kind == proto.KindFile && others >= proto.MaxReturnFiles,
		!h.Listed && (int64(len(part)) > h.Size || r.bytes+h.Size > maxAssembled):
		return proto.ReturnedFile{}, false
	}
	f := proto.ReturnedFile{Path: h.Path, Kind: h.Kind, Size: h.Size, Listed: h.Listed}
	if !h.Listed {
		f.Data = append(make([]byte, 0, h.Size), part...)
		r.bytes += h.Size
	}
	r.files = append(r.files, f)
	return f, f.Listed || int64(len(f.Data)) == f.Size
}

// whole returns the files that arrived whole.
func (r *returnedFiles) whole() []proto.ReturnedFile {
	var out []proto.ReturnedFile
	for _, f := range r.files {
		if f.Listed || int64(len(f.Data)) == f.Size {
			out = append(out, f)
		}
	}
	return out
}

func cleanReturnPath(h proto.FileHeader) bool {
	p := h.Path
	if p == "" || len(p) > 1024 || strings.IndexByte(p, 0) >= 0 || strings.Contains(p, "\\") ||
		path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return false
	}
	switch h.Kind {
	case proto.KindFigure:
		return !strings.Contains(p, "/") && strings.HasSuffix(p, ".png")
	case proto.KindFile:
		return true
	}
	return false
}

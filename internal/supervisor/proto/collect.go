package proto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
)

// Files a job returns: its figures and the files it marks with a pattern.
//
// After the job's processes are gone and before Exit, the supervisor sends
// each as 'f' (File) frames: a part of at most FileChunk bytes, behind a
// header that names the file and where the part starts. A file matched with
// Collect.ListOnly is named (its size) with no content: a workspace keeps it.

// TypeFile is the supervisor → server frame carrying (a part of) a returned file.
const TypeFile byte = 'f'

// Kinds of returned file.
const (
	KindFigure = "figure" // a PNG the job plotted (FiguresEnv)
	KindFile   = "file"   // a file matched by Collect.Patterns
)

// FiguresEnv names, in a job's environment, the directory where the image's
// figure hooks (images/python/sandboxer_figures.py) write each figure as a
// PNG, renamed into place once whole.
const FiguresEnv = "SANDBOXER_FIGURES_DIR"

// Bounds of returned files; what does not fit is left out, with an event.
const (
	MaxFigures       = 16
	MaxFigureBytes   = 1 << 20
	MaxReturnFiles   = 32
	MaxReturnBytes   = 64 << 20 // a Collect.MaxBytes above this is refused
	MaxPatterns      = 16
	MaxPatternLength = 256
	// FileChunk is the most content one File frame carries.
	FileChunk = MaxPayload - 4096
	// MaxCollectWalk bounds the entries visited while matching patterns.
	MaxCollectWalk = 20000
)

// Collect says which files the job returns (Spec.Collect).
type Collect struct {
	// Dir is the absolute directory Patterns are relative to (the job's cwd).
	Dir string `json:"dir,omitempty"`
	// Patterns are slash-separated globs (path.Match syntax per segment, and
	// "**" for any number of directories) of regular files under Dir.
	Patterns []string `json:"patterns,omitempty"`
	// ListOnly names matched files without their content.
	ListOnly bool `json:"list_only,omitempty"`
	// FiguresDir is the job's FiguresEnv directory: its PNGs are sent (and
	// removed) as KindFigure.
	FiguresDir string `json:"figures_dir,omitempty"`
	// MaxBytes bounds the content sent for Patterns, together.
	MaxBytes int64 `json:"max_bytes,omitempty"`
}

// Validate checks a Collect (Spec.Validate calls it).
func (c *Collect) Validate() error {
	for _, d := range []string{c.Dir, c.FiguresDir} {
		if d != "" && (!path.IsAbs(d) || path.Clean(d) != d || strings.IndexByte(d, 0) >= 0) {
			return fmt.Errorf("spec: collect: %q is not a clean absolute path", truncate(d, 80))
		}
	}
	if len(c.Patterns) > 0 && c.Dir == "" {
		return errors.New("spec: collect: patterns without a dir")
	}
	if len(c.Patterns) > MaxPatterns {
		return fmt.Errorf("spec: collect: %d patterns, at most %d", len(c.Patterns), MaxPatterns)
	}
	for _, p := range c.Patterns {
		if err := CheckPattern(p); err != nil {
			return fmt.Errorf("spec: collect: %w", err)
		}
	}
	if c.MaxBytes < 0 || c.MaxBytes > MaxReturnBytes {
		return fmt.Errorf("spec: collect: max_bytes %d out of range 0 to %d", c.MaxBytes, MaxReturnBytes)
	}
	return nil
}

// CheckPattern says what is wrong with a return pattern, if anything: it
// must be relative, clean, within its directory, and a valid glob.
func CheckPattern(p string) error {
	switch {
	case p == "":
		return errors.New("a pattern is empty")
	case len(p) > MaxPatternLength:
		return fmt.Errorf("pattern %q is longer than %d bytes", truncate(p, 40), MaxPatternLength)
	case strings.IndexByte(p, 0) >= 0 || strings.Contains(p, "\\"):
		return fmt.Errorf("pattern %q has a NUL or a backslash", truncate(p, 80))
	case path.IsAbs(p):
		return fmt.Errorf("pattern %q is absolute: patterns are relative to the working directory", truncate(p, 80))
	case path.Clean(p) != p || p == "." || strings.HasPrefix(p, "../") || p == "..":
		return fmt.Errorf("pattern %q is not a clean path within the working directory", truncate(p, 80))
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "**" {
			continue
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("pattern %q: %v", truncate(p, 80), err)
		}
	}
	return nil
}

// MatchPattern says whether the slash-separated relative path name matches
// pattern p ("**" matches any number of segments, none included).
func MatchPattern(p, name string) bool {
	return matchSegments(strings.Split(p, "/"), strings.Split(name, "/"))
}

func matchSegments(pat, name []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(name); i++ {
				if matchSegments(pat[1:], name[i:]) {
					return true
				}
			}
			return false
		}
		if len(name) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], name[0]); !ok {
			return false
		}
		pat, name = pat[1:], name[1:]
	}
	return len(name) == 0
}

// FileHeader heads each File frame.
type FileHeader struct {
	Path   string `json:"path"`             // relative to Collect.Dir; a figure's file name
	Kind   string `json:"kind"`             // KindFigure or KindFile
	Size   int64  `json:"size"`             // the whole file
	Offset int64  `json:"offset"`           // where this part starts
	Listed bool   `json:"listed,omitempty"` // named only (Collect.ListOnly)
}

// EncodeFile is a File frame's payload: a 2-byte big-endian header length,
// the header as JSON, then the part.
func EncodeFile(h FileHeader, part []byte) ([]byte, error) {
	hj, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(hj) > 4096-2 || len(part) > FileChunk {
		return nil, ErrTooLarge
	}
	p := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(hj)+len(part)), uint16(len(hj)))
	return append(append(p, hj...), part...), nil
}

// DecodeFile parses a File frame's payload (hostile: the server checks the
// path and sizes it gets).
func DecodeFile(p []byte) (FileHeader, []byte, error) {
	var h FileHeader
	if len(p) < 2 {
		return h, nil, errors.New("proto: file frame too short")
	}
	n := int(binary.BigEndian.Uint16(p))
	if 2+n > len(p) {
		return h, nil, errors.New("proto: file frame header overruns the frame")
	}
	if err := json.Unmarshal(p[2:2+n], &h); err != nil {
		return h, nil, fmt.Errorf("proto: file frame header: %w", err)
	}
	return h, p[2+n:], nil
}

// ReturnedFile is a whole returned file as the server assembled it from
// File frames (Exit.Files).
type ReturnedFile struct {
	Path   string
	Kind   string
	Size   int64
	Listed bool
	Data   []byte // nil when Listed
}

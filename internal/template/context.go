package template

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/parser"

	"github.com/sandboxer/sandboxer/images"
)

// maxDockerfileBytes bounds a template's Dockerfile.
const maxDockerfileBytes = 1 << 20

// fixedTime is every context entry's modification time: the digest is
// the files' paths, modes, links and bytes, never when they were touched.
var fixedTime = time.Unix(0, 0).UTC()

// ReadDockerfile reads and checks a template's Dockerfile.
func ReadDockerfile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("dockerfile: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDockerfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("dockerfile %s: %w", p, err)
	}
	if len(data) > maxDockerfileBytes {
		return nil, fmt.Errorf("dockerfile %s is over %d bytes", p, maxDockerfileBytes)
	}
	if err := CheckDockerfile(string(data)); err != nil {
		return nil, fmt.Errorf("dockerfile %s: %w", p, err)
	}
	return data, nil
}

// CheckDockerfile refuses what reaches outside the build context: ADD of a
// URL or a git repository, COPY/ADD --from an image (not an earlier
// stage), sources that climb out with "..", RUN --mount, --network and
// --security, a variable where a source or --from is named (an ARG could
// name a URL or an image), and a `# syntax=` front end (an image the
// builder would fetch). It reads the Dockerfile with Docker's own parser
// (images.Parse), so the escape directive, continuations and their blank
// lines, and heredocs are read as the builder reads them; ONBUILD
// triggers are checked as instructions (they run when an image is built
// on this one, as sandboxer's own final step is). Errors name the line.
func CheckDockerfile(dockerfile string) error {
	if syntax, _, _, ok := parser.DetectSyntax([]byte(dockerfile)); ok {
		return fmt.Errorf("the # syntax=%s directive is refused: a front end is an image fetched from outside the context", clip(syntax))
	}
	parsed, err := images.Parse(dockerfile)
	if err != nil {
		return fmt.Errorf("docker's parser refuses it: %v", err)
	}
	c := dockerfileCheck{stages: map[string]bool{}}
	for _, in := range parsed {
		if err := c.check(in); err != nil {
			return fmt.Errorf("line %d, %q: %w", in.Line, clip(in.String()), err)
		}
	}
	if !c.seenFrom {
		return fmt.Errorf("no FROM instruction")
	}
	return nil
}

// dockerfileCheck is what CheckDockerfile has seen so far.
type dockerfileCheck struct {
	stages   map[string]bool // the stages named so far
	nstage   int
	seenFrom bool
}

func (c *dockerfileCheck) check(in images.Instruction) error {
	switch in.Op {
	case "ONBUILD":
		if in.Trigger == nil {
			return fmt.Errorf("ONBUILD without an instruction")
		}
		if in.Trigger.Op == "FROM" || in.Trigger.Op == "ONBUILD" {
			return fmt.Errorf("ONBUILD %s is refused", in.Trigger.Op)
		}
		return c.check(*in.Trigger)
	case "FROM":
		c.seenFrom = true
		if len(in.Args) >= 3 && strings.EqualFold(in.Args[1], "AS") {
			c.stages[strings.ToLower(in.Args[2])] = true
		}
		c.nstage++
	case "RUN":
		if len(in.Flags) > 0 { // --mount, --network, --security, --device: each reaches outside
			name, _, _ := strings.Cut(in.Flags[0], "=")
			return fmt.Errorf("RUN %s is refused: it reaches outside the build (the template's network key sets the build's network)", name)
		}
	case "COPY", "ADD":
		for _, f := range in.Flags {
			name, val, _ := strings.Cut(f, "=")
			switch name {
			case "--from":
				v := strings.ToLower(val)
				if strings.Contains(v, "$") {
					return fmt.Errorf("%s --from=%s is refused: name an earlier stage without a variable", in.Op, val)
				}
				if !c.stages[v] && !isEarlierStage(v, c.nstage) {
					return fmt.Errorf("%s --from=%s is refused: only an earlier stage of this Dockerfile may be copied from (an image is outside the context)", in.Op, val)
				}
			case "--chown", "--chmod", "--link", "--parents", "--exclude":
			default:
				return fmt.Errorf("%s %s is refused (not a flag templates allow)", in.Op, name)
			}
		}
		if len(in.Args) < 2 {
			return nil // the engine says what is wrong
		}
		heredoc := map[string]bool{}
		for _, h := range in.Heredocs {
			heredoc[h] = true
		}
		for _, src := range in.Args[:len(in.Args)-1] {
			if name, ok := strings.CutPrefix(strings.TrimPrefix(src, "<<-"), "<<"); ok && heredoc[strings.Trim(name, `"'`)] {
				continue // a heredoc's content is the file
			}
			if strings.Contains(src, "$") {
				return fmt.Errorf("%s source %s is refused: a variable could name a URL or climb out of the context; write the path", in.Op, src)
			}
			if in.Op == "ADD" && remoteSource(src) {
				return fmt.Errorf("ADD of %s is refused: a download reaches outside the context; fetch it in a RUN step (network: egress) or put it in the context", src)
			}
			if c := path.Clean("/" + src); strings.Contains(src, "..") && (c == "/" || strings.HasPrefix(path.Clean(src), "..")) {
				return fmt.Errorf("source %s climbs out of the context", src)
			}
		}
	}
	return nil
}

// remoteSource: ADD would fetch src (a URL, or a git repository in any of
// the forms BuildKit's ADD takes).
func remoteSource(src string) bool {
	l := strings.ToLower(src)
	return strings.Contains(l, "://") || strings.HasPrefix(l, "git@") || strings.HasPrefix(l, "github.com/") ||
		strings.Contains(l, ".git#") || strings.HasSuffix(l, ".git")
}

// isEarlierStage: --from=N names stage N of those before.
func isEarlierStage(v string, nstage int) bool {
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || fmt.Sprint(n) != v {
		return false
	}
	return n >= 0 && n < nstage-1
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// Packed is a build context as sent: a tar with the Dockerfile at its
// root, and its digest.
type Packed struct {
	Tar    []byte
	Digest string
	Bytes  int64 // the files' bytes
}

// ContextTooLargeError is a context over the cap, found before anything is sent.
type ContextTooLargeError struct {
	Dir        string
	Bytes, Max int64
}

func (e *ContextTooLargeError) Error() string {
	return fmt.Sprintf("build context %s holds %d MiB, over templates_build.max_context_mb (%d MiB): nothing was sent; make the context smaller", e.Dir, ceilMiB(e.Bytes), e.Max>>20)
}

func ceilMiB(n int64) int64 { return (n + 1<<20 - 1) >> 20 }

// Measure walks a context (never following links) and returns its files'
// bytes and a signature of paths, sizes, modes, links and modification
// times: a context whose signature is unchanged need not be read again.
func Measure(dir string) (bytes int64, sig string, err error) {
	h := sha256.New()
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		link := ""
		if d.Type()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		fmt.Fprintf(h, "%q %d %o %d %q\n", rel, info.Size(), info.Mode(), info.ModTime().UnixNano(), link)
		if info.Mode().IsRegular() {
			bytes += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, "", fmt.Errorf("build context: %w", err)
	}
	return bytes, hex.EncodeToString(h.Sum(nil)), nil
}

// Pack reads a context directory into a deterministic tar, dockerfile as
// its root Dockerfile (in place of the context's own), refusing a context
// over maxBytes before reading a file. Links are packed as links (the
// builder copies them as such); devices, pipes and sockets are refused.
func Pack(dir string, dockerfile []byte, maxBytes int64) (*Packed, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("build context %s is not a directory", dir)
	}
	total, _, err := Measure(dir)
	if err != nil {
		return nil, err
	}
	if total > maxBytes {
		return nil, &ContextTooLargeError{Dir: dir, Bytes: total, Max: maxBytes}
	}
	return pack(dir, dockerfile, maxBytes)
}

// pack is Pack for a context already measured within maxBytes (a file
// that grew meanwhile still stops it at maxBytes).
func pack(dir string, dockerfile []byte, maxBytes int64) (*Packed, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := writeFile(tw, "Dockerfile", 0o644, dockerfile); err != nil {
		return nil, err
	}
	var read int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || rel == "Dockerfile" {
			return nil
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: rel, ModTime: fixedTime, Format: tar.FormatPAX, Mode: int64(info.Mode().Perm())}
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
			return tw.WriteHeader(hdr)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
			if read += info.Size(); read > maxBytes { // grew while packed
				return &ContextTooLargeError{Dir: dir, Bytes: read, Max: maxBytes}
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			_, err = io.CopyN(tw, f, info.Size())
			return err
		default:
			return fmt.Errorf("%s: a %s cannot be part of a build context", rel, info.Mode().Type())
		}
	})
	if err != nil {
		if _, ok := err.(*ContextTooLargeError); ok {
			return nil, err
		}
		return nil, fmt.Errorf("build context %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(buf.Bytes())
	return &Packed{Tar: buf.Bytes(), Digest: hex.EncodeToString(sum[:]), Bytes: read}, nil
}

func writeFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: fixedTime, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

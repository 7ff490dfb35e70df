package template

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

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

// CheckDockerfile refuses instructions that reach outside the build
// context: ADD of a URL or a git repository, COPY/ADD --from an image
// (not an earlier stage), sources that climb out with "..", and RUN
// --mount (BuildKit's, which can mount other images and the host's
// secrets). The engine parses the rest.
func CheckDockerfile(dockerfile string) error {
	stages := map[string]bool{}
	nstage := 0
	seenFrom := false
	for _, line := range images.Instructions(dockerfile) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		op := strings.ToUpper(fields[0])
		switch op {
		case "FROM":
			seenFrom = true
			rest := skipFlags(fields[1:])
			if len(rest) >= 3 && strings.EqualFold(rest[1], "AS") {
				stages[strings.ToLower(rest[2])] = true
			}
			nstage++
		case "RUN":
			for _, f := range fields[1:] {
				if !strings.HasPrefix(f, "--") {
					break
				}
				if strings.HasPrefix(f, "--mount") || strings.HasPrefix(f, "--network") || strings.HasPrefix(f, "--security") {
					return fmt.Errorf("%q: RUN %s is refused: it reaches outside the build (the template's network key sets the build's network)", clip(line), strings.SplitN(f, "=", 2)[0])
				}
			}
		case "COPY", "ADD":
			args := fields[1:]
			for len(args) > 0 && strings.HasPrefix(args[0], "--") {
				flag := args[0]
				args = args[1:]
				name, val, _ := strings.Cut(flag, "=")
				switch name {
				case "--from":
					v := strings.ToLower(val)
					if !stages[v] && !isEarlierStage(v, nstage) {
						return fmt.Errorf("%q: %s --from=%s is refused: only an earlier stage of this Dockerfile may be copied from (an image is outside the context)", clip(line), op, val)
					}
				case "--chown", "--chmod", "--link", "--parents", "--exclude":
				default:
					return fmt.Errorf("%q: %s %s is refused (not a flag templates allow)", clip(line), op, name)
				}
			}
			srcs := args
			if len(args) > 0 && strings.HasPrefix(args[0], "[") {
				var list []string
				if err := json.Unmarshal([]byte(strings.Join(args, " ")), &list); err != nil {
					return fmt.Errorf("%q: %v", clip(line), err)
				}
				srcs = list
			}
			if len(srcs) < 2 {
				continue // the engine says what is wrong
			}
			for _, src := range srcs[:len(srcs)-1] {
				if op == "ADD" && (strings.Contains(src, "://") || strings.HasPrefix(src, "git@")) {
					return fmt.Errorf("%q: ADD of %s is refused: a download reaches outside the context; fetch it in a RUN step (network: egress) or put it in the context", clip(line), src)
				}
				if c := path.Clean("/" + src); strings.Contains(src, "..") && (c == "/" || strings.HasPrefix(path.Clean(src), "..")) {
					return fmt.Errorf("%q: source %s climbs out of the context", clip(line), src)
				}
			}
		}
	}
	if !seenFrom {
		return fmt.Errorf("no FROM instruction")
	}
	return nil
}

func skipFlags(f []string) []string {
	for len(f) > 0 && strings.HasPrefix(f[0], "--") {
		f = f[1:]
	}
	return f
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

// Package gobuild is the shared Go build cache of fresh sandboxes.
//
// Each tenant has one engine volume. Its fresh go sandboxes mount it
// read-only at Dir, as one more seed of the image's GOCACHEPROG (the
// supervisor). No job ever writes it: after a job, a trusted builder
// sandbox compiles again what the job's go commands built (proto.GoBuild:
// the module's source, the command's directory and arguments, sent by the
// job's supervisor) and writes the results there. The builder only
// compiles: tests are linked and never run (go test -exec /bin/true), its
// arguments are rebuilt from the recorded ones (only -trimpath, -tags and
// package patterns are kept), GOENV is off and cgo too. An entry is keyed
// by the go command's hash of every input (sources, flags, directory,
// toolchain), so a job that finds one gets what its own compile would have
// made: the next fresh sandbox of the same code starts warm, and no job can
// plant what another reads.
package gobuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// Where sandboxes see the cache.
const (
	// Dir is the volume's mount point: read-only in jobs, read-write in the builder.
	Dir = "/go-build-shared"
	// Current is the generation jobs read and the builder writes (a
	// symbolic link the builder moves to a new, empty generation when the
	// cache is over its size).
	Current = Dir + "/current"
	// BuildsFile is where a job's go commands are recorded (proto.GoBuildsEnv).
	BuildsFile = "/tmp/.sandboxer-go-builds"
)

// Labels of a cache volume and its builders.
const (
	LabelTenant = "dev.sandboxer.go-build-cache" // hash of the tenant's name
	KindBuilder = "go-build"
)

// Build is a recorded go command made into the builder's.
type Build struct {
	Root, Dir string
	Args      []string // after "go": test -count=1 -exec /bin/true ..., build -o /dev/null ..., vet ...
	Source    []byte   // checked: regular files and directories, relative names
}

// flagsWithValue are the go build and test flags that take the next
// argument as their value when written without "=".
var flagsWithValue = map[string]bool{
	"o": true, "p": true, "tags": true, "ldflags": true, "gcflags": true, "asmflags": true,
	"installsuffix": true, "mod": true, "modfile": true, "overlay": true, "pgo": true, "pkgdir": true,
	"toolexec": true, "compiler": true, "gccgoflags": true, "buildmode": true, "covermode": true,
	"coverpkg": true, "coverprofile": true, "exec": true, "vet": true, "run": true, "skip": true,
	"bench": true, "benchtime": true, "count": true, "cpu": true, "timeout": true, "parallel": true,
	"shuffle": true, "fuzz": true, "fuzztime": true, "fuzzminimizetime": true, "blockprofile": true,
	"blockprofilerate": true, "cpuprofile": true, "memprofile": true, "memprofilerate": true,
	"mutexprofile": true, "mutexprofilefraction": true, "outputdir": true, "trace": true, "list": true,
	"debug": true,
}

var (
	packagePattern = regexp.MustCompile(`^(\.|\.\.|[A-Za-z0-9_~+-][A-Za-z0-9._~+-]*)(/[A-Za-z0-9._~+-]+)*(/\.\.\.)?$`)
	tagsPattern    = regexp.MustCompile(`^[A-Za-z0-9_.,]{1,200}$`)
	absPath        = regexp.MustCompile(`^(/[A-Za-z0-9._~+-]+)+$`)
)

// builderArgs makes a recorded go command (its arguments after "go") into
// the builder's: the same subcommand, packages and key-changing flags
// (-trimpath, -tags), and nothing that could run code or write elsewhere.
func builderArgs(args []string) ([]string, error) {
	if len(args) == 0 || len(args) > proto.MaxGoBuildArgs {
		return nil, fmt.Errorf("%d arguments", len(args))
	}
	var out []string
	switch args[0] {
	case "test":
		out = []string{"test", "-count=1", "-exec", "/bin/true"}
	case "build":
		out = []string{"build", "-o", "/dev/null"}
	case "vet":
		out = []string{"vet"}
	default:
		return nil, fmt.Errorf("go %q is not built again", args[0])
	}
	var pkgs []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "-args" || a == "--" {
			break // the rest is the test binary's
		}
		if !strings.HasPrefix(a, "-") {
			if !packagePattern.MatchString(a) || strings.HasSuffix(a, ".go") {
				return nil, fmt.Errorf("argument %q is not a package pattern", a)
			}
			pkgs = append(pkgs, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case name == "C":
			return nil, errors.New("-C is not built again")
		case name == "trimpath" && (!hasValue || value == "true"):
			out = append(out, "-trimpath")
		case name == "tags":
			if !hasValue && i+1 < len(args) {
				i++
				value = args[i]
			}
			if !tagsPattern.MatchString(value) {
				return nil, fmt.Errorf("-tags %q", value)
			}
			out = append(out, "-tags="+value)
		case flagsWithValue[name] && !hasValue:
			i++ // its value
		}
	}
	return append(out, pkgs...), nil
}

// checkSource reads a module's source as sent and fails unless it is only
// regular files and directories with clean relative names, within bounds.
func checkSource(src []byte) error {
	if len(src) > proto.MaxGoBuildSource {
		return fmt.Errorf("source of %d bytes", len(src))
	}
	zr, err := gzip.NewReader(bytes.NewReader(src))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	var raw int64
	files := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("entry %q is not a clean relative name", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			files++
			raw += h.Size
		default:
			return fmt.Errorf("entry %q is not a regular file or directory", h.Name)
		}
		if files > proto.MaxGoBuildFiles || raw > proto.MaxGoBuildRawSource {
			return errors.New("source over its bounds")
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return err
		}
	}
}

// Check makes what a job's supervisor sent into a build, or says why not.
func Check(b proto.GoBuild) (Build, error) {
	if !absPath.MatchString(b.Root) || path.Clean(b.Root) != b.Root || !absPath.MatchString(b.Dir) || path.Clean(b.Dir) != b.Dir {
		return Build{}, fmt.Errorf("directories %q, %q", b.Root, b.Dir)
	}
	if b.Dir != b.Root && !strings.HasPrefix(b.Dir, b.Root+"/") {
		return Build{}, fmt.Errorf("directory %q outside module %q", b.Dir, b.Root)
	}
	args, err := builderArgs(b.Args)
	if err != nil {
		return Build{}, err
	}
	if err := checkSource(b.Source); err != nil {
		return Build{}, err
	}
	return Build{Root: b.Root, Dir: b.Dir, Args: args, Source: b.Source}, nil
}

// key identifies a build in a volume (the same one is built once).
func (b Build) key(volume, image string) string {
	h := sha256.New()
	for _, s := range append([]string{volume, image, b.Root, b.Dir}, b.Args...) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(b.Source)
	return hex.EncodeToString(h.Sum(nil))
}

// tenantKey is the label value of a tenant's volume.
func tenantKey(tenant string) string {
	h := sha256.Sum256([]byte("go-build-cache\x00" + tenant))
	return hex.EncodeToString(h[:])[:20]
}

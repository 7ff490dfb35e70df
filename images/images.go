// Package images carries the Docker build contexts of the sandbox images
// (images/<name>/Dockerfile, embedded into the server binary) and names them.
//
// Every image is two builds:
//
//   - the core image sandboxer/<name>-core:<corehash>, built from
//     images/<name>/; corehash covers that build context, the parent's corehash
//     and the Debian base reference. Language images are built FROM their
//     parent's core image, so their heavy layers never depend on the supervisor.
//   - the final image sandboxer/<name>:<finalhash>, built from a generated
//     two-line context: FROM the core image, then COPY of the sandbox supervisor
//     (images/supervisor/sandboxer-supervisor, embedded too) to SupervisorPath.
//     finalhash covers the core tag and the supervisor's bytes, so a new
//     supervisor rebuilds only this tiny layer.
//
// Jobs run in the final image (Tag); a changed Dockerfile yields new tags for
// that image and everything built on it.
//
// This package imports no Docker code; internal/sandbox/docker builds the images.
package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"
)

//go:embed all:base all:python all:javascript all:go all:rust all:solidity
var contexts embed.FS

// supervisorDir holds images/supervisor/: a README (so the pattern always
// matches) and, when `make build` made it, the static supervisor binary.
//
//go:embed all:supervisor
var supervisorDir embed.FS

// SupervisorFile is the supervisor binary's name in images/supervisor/ and in
// the final images' build context.
const SupervisorFile = "sandboxer-supervisor"

// SupervisorPath is where every final image carries the supervisor (mode 0755,
// owned by root).
const SupervisorPath = "/usr/local/bin/sandboxer-supervisor"

// CoreSuffix ends the repository name of a core image: sandboxer/<name>-core.
const CoreSuffix = "-core"

// ErrNoSupervisor says the binary was built without the supervisor embedded.
var ErrNoSupervisor = errors.New("this sandboxer binary was built without the sandbox supervisor: build it with `make build`")

// Supervisor returns the embedded supervisor binary, or nil when this binary
// was built without one.
func Supervisor() []byte {
	return supervisorFrom(supervisorDir)
}

// SupervisorSum is the sha256 of the embedded supervisor, in hex, computed
// once (the binary is megabytes; template keys name it on every lookup).
var SupervisorSum = sync.OnceValue(func() string {
	sum := sha256.Sum256(Supervisor())
	return hex.EncodeToString(sum[:])
})

func supervisorFrom(fsys fs.FS) []byte {
	data, err := fs.ReadFile(fsys, "supervisor/"+SupervisorFile)
	if err != nil || len(data) == 0 {
		return nil
	}
	return data
}

// BaseRef is the Debian image the base image is built FROM. It is never pulled:
// scripts/base-image.sh makes it locally when it is missing.
const BaseRef = "debian:bookworm-slim"

// RepositoryPrefix is the repository namespace of every sandbox image.
const RepositoryPrefix = "sandboxer/"

// BaseImageArg is the build argument through which a language image receives
// its parent's tag (ARG BASE_IMAGE / FROM ${BASE_IMAGE}).
const BaseImageArg = "BASE_IMAGE"

// Image is one sandbox image.
type Image struct {
	Name string // folder under images/ and repository sandboxer/<Name>
	Base string // parent image name; "" for the base image (built FROM BaseRef)
}

// all is the build order: a parent always precedes its children, and builds
// that can run at once start in this order (python, the most used, then go,
// the longest, so that a first start has them soonest).
var all = []Image{
	{Name: "base"},
	{Name: "python", Base: "base"},
	{Name: "go", Base: "base"},
	{Name: "javascript", Base: "base"},
	{Name: "rust", Base: "base"},
	{Name: "solidity", Base: "javascript"},
}

// All returns every image in build order (base first).
func All() []Image {
	out := make([]Image, len(all))
	copy(out, all)
	return out
}

// Lookup returns the image called name.
func Lookup(name string) (Image, bool) {
	for _, im := range all {
		if im.Name == name {
			return im, true
		}
	}
	return Image{}, false
}

// HashLen is the number of hex digits of a content hash (and so of a tag).
const HashLen = 12

// fixedTime is the modification time of every tar entry, so the same files
// always give the same bytes.
var fixedTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// ContextTar returns a deterministic tar of the build context of the image
// called name: entries in lexical order, relative to the image's folder, owned by
// 0:0 with fixed modes and modification times.
func ContextTar(name string) ([]byte, error) {
	if _, ok := Lookup(name); !ok {
		return nil, fmt.Errorf("images: unknown image %q", name)
	}
	return contextTar(contexts, name)
}

func contextTar(fsys fs.FS, dir string) ([]byte, error) {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("images: %s: %w", dir, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// fs.WalkDir visits entries in lexical order.
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		hdr := &tar.Header{
			Name:    p,
			ModTime: fixedTime,
			Format:  tar.FormatPAX,
		}
		switch {
		case d.IsDir():
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
			hdr.Mode = 0o755
			return tw.WriteHeader(hdr)
		case d.Type().IsRegular():
			data, err := fs.ReadFile(sub, p)
			if err != nil {
				return err
			}
			hdr.Typeflag = tar.TypeReg
			hdr.Mode = 0o644
			hdr.Size = int64(len(data))
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		default:
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("images: build context %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if _, err := fs.Stat(sub, "Dockerfile"); err != nil {
		return nil, fmt.Errorf("images: build context %s has no Dockerfile: %w", dir, err)
	}
	return buf.Bytes(), nil
}

// coreHash is the hash of one core image: its context tar, its parent's
// core hash ("" for the base image) and the Debian base reference.
func coreHash(contextTar []byte, parentHash string) string {
	h := sha256.New()
	fmt.Fprintf(h, "sandboxer-image-v1\nfrom %s\nparent %s\n", BaseRef, parentHash)
	h.Write(contextTar)
	return hex.EncodeToString(h.Sum(nil))[:HashLen]
}

// finalDockerfile is the Dockerfile of a final image built on coreTag:
// one COPY of the context's root/ tree, so one layer.
func finalDockerfile(coreTag string) string {
	return "FROM " + coreTag + "\nCOPY root/ /\n"
}

// HomeUser is a link in every final image to /workspace: E2B's home, which
// scripts written for E2B name in their commands (internal/e2b).
const HomeUser = "/home/user"

// finalContextTar returns the deterministic build context of the final image
// built on coreTag: its Dockerfile and root/, the tree it adds: the
// supervisor (mode 0755; COPY without --chown makes it root's) and the
// HomeUser link.
func finalContextTar(coreTag string, supervisor []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
		kind byte
		link string
	}{
		{name: "Dockerfile", mode: 0o644, data: []byte(finalDockerfile(coreTag)), kind: tar.TypeReg},
		{name: "root/", mode: 0o755, kind: tar.TypeDir},
		{name: "root/usr/", mode: 0o755, kind: tar.TypeDir},
		{name: "root/usr/local/", mode: 0o755, kind: tar.TypeDir},
		{name: "root/usr/local/bin/", mode: 0o755, kind: tar.TypeDir},
		{name: "root" + SupervisorPath, mode: 0o755, data: supervisor, kind: tar.TypeReg},
		{name: "root/home/", mode: 0o755, kind: tar.TypeDir},
		{name: "root" + HomeUser, mode: 0o777, kind: tar.TypeSymlink, link: "/workspace"},
	} {
		hdr := &tar.Header{
			Typeflag: f.kind,
			Name:     f.name,
			Linkname: f.link,
			Mode:     f.mode,
			Size:     int64(len(f.data)),
			ModTime:  fixedTime,
			Format:   tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// finalHash is the hash of one final image: its build context, which holds
// the core tag (in the Dockerfile) and the supervisor's bytes.
func finalHash(finalTar []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "sandboxer-final-v1\n")
	h.Write(finalTar)
	return hex.EncodeToString(h.Sum(nil))[:HashLen]
}

// Build is one image build: core and final builds alternate in build order
// (base core, base final, python core, ...).
type Build struct {
	Image     string            // image name (folder under images/)
	Final     bool              // the final image (core + supervisor); else the core image
	Tag       string            // repository:hash to build
	Context   []byte            // build context tar, Dockerfile at its root
	BuildArgs map[string]string // BASE_IMAGE=<parent's core tag> for a language core image
}

// plan is every build of every image, for the given contexts and supervisor.
func plan(ctxFS fs.FS, supervisor []byte) ([]Build, error) {
	out := make([]Build, 0, 2*len(all))
	coreTags := make(map[string]string, len(all))
	coreHashes := make(map[string]string, len(all))
	for _, im := range all { // build order: parents first
		tarball, err := contextTar(ctxFS, im.Name)
		if err != nil {
			return nil, err
		}
		parent := ""
		var args map[string]string
		if im.Base != "" {
			var ok bool
			if parent, ok = coreHashes[im.Base]; !ok {
				return nil, fmt.Errorf("images: %s: parent %q is not built before it", im.Name, im.Base)
			}
			args = map[string]string{BaseImageArg: coreTags[im.Base]}
		}
		ch := coreHash(tarball, parent)
		coreTag := CoreRepository(im.Name) + ":" + ch
		coreHashes[im.Name], coreTags[im.Name] = ch, coreTag
		finalTar, err := finalContextTar(coreTag, supervisor)
		if err != nil {
			return nil, fmt.Errorf("images: %s: final context: %w", im.Name, err)
		}
		out = append(out,
			Build{Image: im.Name, Tag: coreTag, Context: tarball, BuildArgs: args},
			Build{Image: im.Name, Final: true, Tag: Repository(im.Name) + ":" + finalHash(finalTar), Context: finalTar},
		)
	}
	return out, nil
}

// Plan returns every build of every image in build order, with the embedded
// supervisor, or ErrNoSupervisor when this binary has none.
func Plan() ([]Build, error) {
	sup := Supervisor()
	if sup == nil {
		return nil, ErrNoSupervisor
	}
	return plan(contexts, sup)
}

// PlanWith is Plan with the given supervisor bytes instead of the embedded ones.
func PlanWith(supervisor []byte) ([]Build, error) {
	return plan(contexts, supervisor)
}

type tagSet struct{ core, final map[string]string } // image name -> hash

var (
	hashOnce sync.Once
	hashes   tagSet
	hashErr  error
)

func computeHashes(ctxFS fs.FS, supervisor []byte) (tagSet, error) {
	builds, err := plan(ctxFS, supervisor)
	if err != nil {
		return tagSet{}, err
	}
	out := tagSet{core: map[string]string{}, final: map[string]string{}}
	for _, b := range builds {
		_, h, _ := strings.Cut(b.Tag, ":")
		if b.Final {
			out.final[b.Image] = h
		} else {
			out.core[b.Image] = h
		}
	}
	return out, nil
}

func loadHashes() tagSet {
	// With no supervisor embedded the final hashes cover empty bytes: the tags
	// stay defined (and name images that are not built), EnsureImages refuses.
	hashOnce.Do(func() { hashes, hashErr = computeHashes(contexts, Supervisor()) })
	if hashErr != nil {
		// Only a broken embed (caught by the package's tests) gets here.
		panic(hashErr)
	}
	return hashes
}

// Hash returns the content hash (HashLen hex digits) of the final image called
// name, or "" if there is no such image. The embedded contexts and supervisor
// never change while the program runs, so the hashes are computed once.
func Hash(name string) string {
	return loadHashes().final[name]
}

// CoreHash returns the content hash of the core image called name, or "".
func CoreHash(name string) string {
	return loadHashes().core[name]
}

// Repository returns the repository of the final image called name: sandboxer/<name>.
func Repository(name string) string {
	return RepositoryPrefix + name
}

// CoreRepository returns the repository of the core image called name:
// sandboxer/<name>-core.
func CoreRepository(name string) string {
	return RepositoryPrefix + name + CoreSuffix
}

// Tag returns the full reference sandboxer/<name>:<hash> of the final image
// called name — the image jobs run in — or "" if there is no such image.
func Tag(name string) string {
	h := Hash(name)
	if h == "" {
		return ""
	}
	return Repository(name) + ":" + h
}

// CoreTag returns the full reference sandboxer/<name>-core:<corehash> of the
// core image called name, or "" if there is no such image.
func CoreTag(name string) string {
	h := CoreHash(name)
	if h == "" {
		return ""
	}
	return CoreRepository(name) + ":" + h
}

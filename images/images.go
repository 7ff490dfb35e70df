// Package images carries the Docker build contexts of the sandbox images
// (images/<name>/Dockerfile, embedded into the server binary) and names them:
// every image is tagged sandboxer/<name>:<hash>, where the hash covers its build
// context, its parent's hash and the Debian base reference, so a change to any
// Dockerfile yields new tags for that image and everything built on it.
//
// This package imports no Docker code; internal/sandbox/docker builds the images.
package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"sync"
	"time"
)

//go:embed all:base all:python all:javascript all:go all:rust
var contexts embed.FS

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

// all is the build order: a parent always precedes its children.
var all = []Image{
	{Name: "base"},
	{Name: "python", Base: "base"},
	{Name: "javascript", Base: "base"},
	{Name: "go", Base: "base"},
	{Name: "rust", Base: "base"},
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

// contentHash is the hash of one image: its context tar, its parent's hash
// ("" for the base image) and the Debian base reference.
func contentHash(contextTar []byte, parentHash string) string {
	h := sha256.New()
	fmt.Fprintf(h, "sandboxer-image-v1\nfrom %s\nparent %s\n", BaseRef, parentHash)
	h.Write(contextTar)
	return hex.EncodeToString(h.Sum(nil))[:HashLen]
}

var (
	hashOnce sync.Once
	hashes   map[string]string
	hashErr  error
)

func computeHashes() (map[string]string, error) {
	out := make(map[string]string, len(all))
	for _, im := range all { // build order: parents first
		tarball, err := contextTar(contexts, im.Name)
		if err != nil {
			return nil, err
		}
		parent := ""
		if im.Base != "" {
			var ok bool
			if parent, ok = out[im.Base]; !ok {
				return nil, fmt.Errorf("images: %s: parent %q is not built before it", im.Name, im.Base)
			}
		}
		out[im.Name] = contentHash(tarball, parent)
	}
	return out, nil
}

// Hash returns the content hash (HashLen hex digits) of the image called name,
// or "" if there is no such image. The embedded contexts never change while the
// program runs, so the hashes are computed once.
func Hash(name string) string {
	hashOnce.Do(func() { hashes, hashErr = computeHashes() })
	if hashErr != nil {
		// Only a broken embed (caught by the package's tests) gets here.
		panic(hashErr)
	}
	return hashes[name]
}

// Repository returns the repository of the image called name: sandboxer/<name>.
func Repository(name string) string {
	return RepositoryPrefix + name
}

// Tag returns the full reference sandboxer/<name>:<hash> of the image called
// name, or "" if there is no such image.
func Tag(name string) string {
	h := Hash(name)
	if h == "" {
		return ""
	}
	return Repository(name) + ":" + h
}

package program

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

// seedWorkdir copies a template's files (proto.SeedDir) into dir when the image
// has them and dir is empty: a fresh job's working directory, or a new
// workspace. Links are copied as links, never followed; writes go through
// an os.Root at dir. It says how many bytes it copied.
func seedWorkdir(src, dir string) (int64, error) {
	if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	if len(entries) > 0 {
		return 0, nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	var n int64
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return root.Mkdir(rel, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return root.Symlink(target, rel)
		case info.Mode().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
			if err != nil {
				return err
			}
			c, err := io.Copy(out, in)
			n += c
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			return err
		}
		return nil // devices, pipes: never part of a template's files
	})
	if errors.Is(err, unix.ENOSPC) {
		return n, fmt.Errorf("the template's files do not fit in %s (its size limit): %w", dir, err)
	}
	return n, err
}

// seedMain is `sandboxer-supervisor seed DIR`: a new workspace made from a
// template starts with its files.
func seedMain(args []string) int {
	if len(args) != 1 {
		logger.Print("usage: sandboxer-supervisor seed DIR")
		return codeBadSpec
	}
	if _, err := seedWorkdir(proto.SeedDir, args[0]); err != nil {
		logger.Printf("seed: %v", err)
		return 1
	}
	return 0
}

package program

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// writeJobFiles writes the spec's files (proto.File) under proto.FilesDir,
// through an os.Root there: a link a job left in a shared workspace's /tmp
// cannot send a write elsewhere. The supervisor runs as the job's user, so
// it can write nothing the job could not.
func writeJobFiles(files []proto.File) error {
	if len(files) == 0 {
		return nil
	}
	if err := os.MkdirAll(proto.FilesDir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(proto.FilesDir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range files {
		rel := strings.TrimPrefix(f.Path, proto.FilesDir)
		if dir := filepath.Dir(rel); dir != "." {
			if err := root.MkdirAll(dir, 0o700); err != nil {
				return fmt.Errorf("%s: %w", f.Path, err)
			}
		}
		if err := writeJobFile(root, rel, f); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	return nil
}

func writeJobFile(root *os.Root, rel string, f proto.File) error {
	_ = root.Remove(rel) // a file (or link) of an earlier job in a shared workspace
	out, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if f.Base != "" {
		if in, err := os.Open(f.Base); err == nil {
			_, err = io.Copy(out, io.LimitReader(in, 16<<20))
			in.Close()
			if err != nil {
				out.Close()
				return err
			}
		}
	}
	if _, err := out.Write(f.Content); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

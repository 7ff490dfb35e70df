// Package hosttree walks a granted directory without following symbolic
// links: the scan an import starts with (run by the supervisor inside a
// helper container on Docker, and by the server itself for a runtime whose
// sandboxes cannot see the server's host) and the tar stream of the tree
// such a runtime copies into its sandboxes.
package hosttree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// Scan walks fsys from "." without following links and sums up its tree in
// res: directories, links, regular files and their sizes, and the special
// files (sockets, FIFOs, devices) a copy leaves out. check, when not nil,
// sees every entry first; its error ends the scan.
func Scan(fsys fs.FS, res *proto.ScanResult, check func(p string, d fs.DirEntry) error) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if u := errors.Unwrap(err); u != nil {
				err = u
			}
			return fmt.Errorf("%s: %w", p, err)
		}
		if check != nil {
			if err := check(p, d); err != nil {
				return err
			}
		}
		switch t := d.Type(); {
		case t.IsDir():
			res.Dirs++
		case t&fs.ModeSymlink != 0:
			res.Links++
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			res.Files++
			res.Bytes += info.Size()
		default:
			res.SpecialCount++
			if len(res.Special) < proto.MaxScanSpecial {
				res.Special = append(res.Special, proto.SpecialFile{Path: p, Type: specialType(t)})
			}
		}
		return nil
	})
}

func specialType(t fs.FileMode) string {
	switch {
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeNamedPipe != 0:
		return "fifo"
	case t&fs.ModeDevice != 0:
		return "device"
	}
	return "other"
}

// ReadableBy is a check for Scan, for a tree the server reads with its own
// rights where a sandbox would read it as uid:gid: every directory must be
// readable and searchable, and every regular file readable, by that user
// through the owner, group or other bits (supplementary groups and ACLs
// are not looked at), so what the sandbox user could not read is refused
// as it is on Docker.
func ReadableBy(uid, gid uint32) func(p string, d fs.DirEntry) error {
	return func(p string, d fs.DirEntry) error {
		t := d.Type()
		if !t.IsDir() && !t.IsRegular() {
			return nil // links are copied as links; special files are skipped
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		need := uint32(0o4) // read
		if t.IsDir() {
			need = 0o5 // read and search
		}
		perm := uint32(info.Mode().Perm())
		var bits uint32
		switch {
		case st.Uid == uid:
			bits = perm >> 6
		case st.Gid == gid:
			bits = perm >> 3
		default:
			bits = perm
		}
		if bits&need != need {
			return fmt.Errorf("%s: %w", p, fs.ErrPermission)
		}
		return nil
	}
}

// ErrTooLarge is a tree that grew past WriteTar's limit while it was copied.
var ErrTooLarge = errors.New("the tree holds more than it may")

// WriteTar writes the tree of root to tw under prefix ("" for the tree's
// own entries, "name" to put them under name/): directories, regular files
// and symbolic links (as links, never followed), with their permission bits
// and modification times, every one owned by uid:gid. Special files are
// left out (Scan lists them). Every open stays inside root (os.Root: no
// path, link or ".." leaves it), a file is copied only while it is still a
// regular file of the size first seen, and past maxBytes of files (> 0)
// the copy fails with ErrTooLarge. It does not close tw.
func WriteTar(tw *tar.Writer, root *os.Root, prefix string, uid, gid int, maxBytes int64) error {
	var total int64
	return fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		t := d.Type()
		if !t.IsDir() && !t.IsRegular() && t&fs.ModeSymlink == 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if t&fs.ModeSymlink != 0 {
			if link, err = root.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = path.Join(prefix, p)
		if t.IsDir() {
			h.Name += "/"
		}
		h.Uid, h.Gid, h.Uname, h.Gname, h.Format = uid, gid, "", "", tar.FormatPAX
		h.Mode &= 0o7777
		h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
		if !t.IsRegular() {
			return tw.WriteHeader(h)
		}
		if total += h.Size; maxBytes > 0 && total > maxBytes {
			return fmt.Errorf("%w: its files hold over %d MiB", ErrTooLarge, maxBytes>>20)
		}
		return copyFile(tw, root, p, h)
	})
}

// copyFile writes h and the content of regular file p, opened without
// following a link, refusing one that changed since it was seen.
func copyFile(tw *tar.Writer, root *os.Root, p string, h *tar.Header) error {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() || info.Size() != h.Size {
		return fmt.Errorf("%s changed while it was copied: copy it again", p)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if n, err := io.CopyN(tw, f, h.Size); err != nil {
		if err == io.EOF {
			return fmt.Errorf("%s shrank while it was copied (%d of %d bytes): copy it again", p, n, h.Size)
		}
		return err
	}
	return nil
}

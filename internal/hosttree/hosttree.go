// Package hosttree walks a granted directory without following symbolic
// links: the scan an import starts with (run by the supervisor inside a
// helper container on Docker, and by the server itself for a runtime whose
// sandboxes cannot see the server's host) and the tar stream of the tree
// such a runtime copies into its sandboxes.
package hosttree

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

// Scan walks dir without following links and sums up its tree in res:
// directories, links, regular files and their sizes, and what a copy
// leaves out (sockets, FIFOs, devices, and what the reader may not read),
// each with its reason. check, when not nil, sees every entry first (by its
// slash-separated path under dir, "." for dir); an error wrapping
// fs.ErrPermission skips the entry (and all below it) as unreadable, any
// other error ends the scan.
func Scan(dir string, res *proto.ScanResult, check func(p string, d fs.DirEntry) error) error {
	return walk(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && check != nil {
			err = check(p, d)
		}
		if err != nil {
			if errors.Is(err, fs.ErrPermission) && p != "." {
				res.Skip(Unreadable(p))
				return skipDir(d)
			}
			if u := errors.Unwrap(err); u != nil {
				err = u
			}
			return fmt.Errorf("%s: %w", p, err)
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
			res.Skip(Special(p, t))
		}
		return nil
	})
}

// skipDir is what a walk returns to leave out entry d: all below it too
// when it is a directory.
func skipDir(d fs.DirEntry) error {
	if d != nil && d.IsDir() {
		return fs.SkipDir
	}
	return nil
}

// Unreadable is a path a copy leaves out because its reader may not read it.
func Unreadable(p string) proto.SpecialFile {
	return proto.SpecialFile{Path: p, Type: "unreadable", Reason: "not readable by the sandbox user (uid 1000): left out, never read"}
}

// Special is a socket, FIFO or device a copy leaves out.
func Special(p string, t fs.FileMode) proto.SpecialFile {
	kind := specialType(t)
	return proto.SpecialFile{Path: p, Type: kind, Reason: "a " + kind + " is no file content: left out"}
}

// Openable is a Scan check for a reader that runs with the sandbox user's
// own rights (the supervisor in a helper): a regular file it cannot open,
// or a directory it cannot list, is unreadable.
func Openable(root string) func(p string, d fs.DirEntry) error {
	return func(p string, d fs.DirEntry) error {
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.OpenFile(filepath.Join(root, filepath.FromSlash(p)), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
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

// walk is filepath.WalkDir of dir with paths relative to it, slash-separated
// ("." for dir itself). Unlike an fs.FS, it takes names that are not UTF-8:
// a file name is bytes.
func walk(dir string, fn func(p string, d fs.DirEntry, err error) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		return fn(rel(dir, p), d, err)
	})
}

// ErrTooLarge is a tree that grew past WriteTar's limit while it was copied.
var ErrTooLarge = errors.New("the tree holds more than it may")

// WriteTar writes the tree of root to tw under prefix ("" for the tree's
// own entries, "name" to put them under name/): directories, regular files
// and symbolic links (as links, never followed), with their permission bits
// and modification times, every one owned by uid:gid. Special files, and
// what the reader may not read (readable's fs.ErrPermission, or an open or
// a listing refused), are left out and told to skipped (which may be nil).
// Every open stays inside root (os.Root: no path, link or ".." leaves it),
// a file is copied only while it is still a regular file of the size first
// seen, and past maxBytes of files (> 0) the copy fails with ErrTooLarge.
// It does not close tw.
func WriteTar(tw *tar.Writer, root *os.Root, prefix string, uid, gid int, maxBytes int64,
	readable func(p string, d fs.DirEntry) error, skipped func(proto.SpecialFile)) error {
	var total int64
	skip := func(f proto.SpecialFile) {
		if skipped != nil {
			skipped(f)
		}
	}
	return walk(root.Name(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && readable != nil {
			err = readable(p, d)
		}
		if err != nil {
			if errors.Is(err, fs.ErrPermission) && p != "." {
				skip(Unreadable(p))
				return skipDir(d)
			}
			return err
		}
		t := d.Type()
		if !t.IsDir() && !t.IsRegular() && t&fs.ModeSymlink == 0 {
			skip(Special(p, t))
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
		err = copyFile(tw, root, p, h)
		if errors.Is(err, fs.ErrPermission) {
			skip(Unreadable(p)) // nothing was written: the open came first
			return nil
		}
		return err
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

// Changes reports what under root differs from req's baseline, without
// following a link: added, modified and deleted files and links, with the
// content of each changed file (text or binary) within req's bounds (the
// rest named, Omitted). Sockets, FIFOs and devices are not content.
func Changes(root string, req proto.ChangesRequest) ([]proto.Change, error) {
	base := make(map[string]proto.BaselineEntry, len(req.Baseline))
	for _, e := range req.Baseline {
		base[e.Path] = e
	}
	excluded := map[string]bool{}
	for _, e := range req.Exclude {
		excluded[e] = true
	}
	budget := req.MaxTotalBytes
	seen := map[string]bool{}
	var out []proto.Change
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		r := rel(root, p)
		if err != nil {
			if errors.Is(err, fs.ErrPermission) && r != "." {
				out = append(out, proto.Change{Path: r, Change: "modified", Type: "dir", Omitted: true, Note: "unreadable directory (not owned by uid 1000): not compared"})
				return fs.SkipDir
			}
			return err
		}
		if r == "." {
			return nil
		}
		if excluded[r] {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		t := d.Type()
		if t.IsDir() {
			return nil
		}
		old, had := base[r]
		seen[r] = true
		c := proto.Change{Path: r, Change: "added"}
		if had {
			c.Change = "modified"
		}
		switch {
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if had && old.Type == "symlink" && old.Target == target {
				return nil
			}
			c.Type, c.Target = "symlink", target
		case t.IsRegular():
			c.Type = "file"
			sum, ok := readFileChange(p, &c, req.MaxFileBytes, &budget)
			if !ok {
				return nil
			}
			if had && old.Type == "file" && old.SHA256 == sum && old.Mode == c.Mode {
				budget += int64(len(c.Content)) // unchanged: its content is not sent
				return nil
			}
		default:
			return nil // sockets, FIFOs and devices are not content
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, e := range req.Baseline {
		if e.Type != "dir" && !seen[e.Path] && !underExcluded(e.Path, excluded) {
			out = append(out, proto.Change{Path: e.Path, Change: "deleted", Type: e.Type, Mode: e.Mode, Target: e.Target})
		}
	}
	return out, nil
}

func underExcluded(p string, excluded map[string]bool) bool {
	for q := p; q != "." && q != "/" && q != ""; q = filepath.Dir(q) {
		if excluded[q] {
			return true
		}
	}
	return false
}

// readFileChange hashes a regular file (opened without following links or
// blocking) and keeps its content when it is text within the limits; it
// returns the content's hex SHA-256 ("" when unreadable: c.Note says why),
// and false when the path is no longer a regular file.
func readFileChange(p string, c *proto.Change, maxFile int64, budget *int64) (string, bool) {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		c.Omitted, c.Note = true, "unreadable: "+err.Error()
		return "", true
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return "", false // swapped for something else under us
	}
	c.Mode, c.Size = uint32(st.Mode().Perm()), st.Size()
	h := sha256.New()
	var content bytes.Buffer
	keep := st.Size() <= maxFile && st.Size() <= *budget
	var w io.Writer = h
	if keep {
		w = io.MultiWriter(h, &content)
	}
	if _, err := io.Copy(w, f); err != nil {
		c.Omitted, c.Note = true, "unreadable: "+err.Error()
		return "", true
	}
	head := content.Bytes()
	if len(head) > 8000 {
		head = head[:8000]
	}
	switch {
	case !keep:
		c.Omitted = true
	default:
		// Binary content is sent too: the patch carries it as git's
		// binary literal.
		c.Binary = bytes.IndexByte(head, 0) >= 0
		c.Content = content.Bytes()
		*budget -= int64(content.Len())
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

func rel(dir, p string) string {
	r, err := filepath.Rel(dir, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

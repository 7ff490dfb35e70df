package program

// The fs subcommand: file helpers for write_file, read_file and list_files,
// run by the server as a plain exec in a workspace container (see
// proto.FSCommand). Every path is opened beneath /workspace with openat2
// (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS): '..' out of
// it, absolute paths and symbolic links anywhere in the path are refused by
// the kernel, so a link a job planted cannot redirect a read or a write.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

// fsRoot is the directory every fs path is resolved beneath.
var fsRoot = "/workspace"

// fsMaxDepth bounds a recursive listing.
const fsMaxDepth = 32

type fsError struct {
	kind, msg string
}

func (e *fsError) Error() string { return e.msg }

func fsErr(kind, format string, args ...any) error {
	return &fsError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// fsMain runs one fs helper; its result goes to stdout as JSON.
func fsMain(args []string, stdin io.Reader, stdout io.Writer) int {
	res, err := fsRun(args, stdin)
	code := 0
	if err != nil {
		res = proto.FSResult{Error: err.Error(), ErrorKind: "io"}
		var fe *fsError
		if errors.As(err, &fe) {
			res.ErrorKind = fe.kind
		}
		code = 1
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return 2
	}
	return code
}

func fsRun(args []string, stdin io.Reader) (proto.FSResult, error) {
	if len(args) != 5 {
		return proto.FSResult{}, fsErr("invalid", "usage: fs read|write|list PATH ARG ARG ARG")
	}
	op, rel := args[0], args[1]
	if err := checkRel(rel); err != nil {
		return proto.FSResult{}, err
	}
	root, err := unix.Open(fsRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return proto.FSResult{}, fsErr("io", "open %s: %v", fsRoot, err)
	}
	defer unix.Close(root)
	num := func(s string) (int64, error) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, fsErr("invalid", "bad number %q", s)
		}
		return n, nil
	}
	switch op {
	case "read":
		offset, err1 := num(args[2])
		limit, err2 := num(args[3])
		max, err3 := num(args[4])
		if err := errors.Join(err1, err2, err3); err != nil {
			return proto.FSResult{}, err
		}
		return fsRead(root, rel, int(offset), int(limit), max)
	case "write":
		mode := int64(-1)
		if args[2] != "-" {
			m, err := strconv.ParseUint(args[2], 8, 32)
			if err != nil || m > 0o777 {
				return proto.FSResult{}, fsErr("invalid", "bad mode %q", args[2])
			}
			mode = int64(m)
		}
		max, err := num(args[4])
		if err != nil {
			return proto.FSResult{}, err
		}
		return fsWrite(root, rel, mode, args[3] == "1", max, stdin)
	case "list":
		max, err := num(args[4])
		if err != nil {
			return proto.FSResult{}, err
		}
		glob := args[3]
		if glob == "-" {
			glob = ""
		}
		if _, err := path.Match(glob, ""); err != nil {
			return proto.FSResult{}, fsErr("invalid", "bad glob %q", glob)
		}
		return fsList(root, rel, args[2] == "1", glob, int(max))
	}
	return proto.FSResult{}, fsErr("invalid", "unknown fs operation %q", op)
}

// checkRel refuses what the server should never send: the kernel refuses it too.
func checkRel(rel string) error {
	if rel == "" || strings.HasPrefix(rel, "/") || strings.IndexByte(rel, 0) >= 0 {
		return fsErr("escape", "path %q is not relative to %s", rel, fsRoot)
	}
	for _, p := range strings.Split(rel, "/") {
		if p == ".." {
			return fsErr("escape", "path %q leaves %s", rel, fsRoot)
		}
	}
	return nil
}

// openBeneath opens rel beneath dirfd, following no symbolic link.
func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	if flags&unix.O_CREAT != 0 {
		how.Mode = uint64(mode)
	}
	for {
		fd, err := unix.Openat2(dirfd, rel, &how)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, openErr(rel, err)
		}
		return fd, nil
	}
}

func openErr(rel string, err error) error {
	switch err {
	case unix.ELOOP:
		return fsErr("symlink", "%s: a symbolic link is in the path; file tools never follow symbolic links (use run_command to work with links)", rel)
	case unix.EXDEV:
		return fsErr("escape", "%s leaves %s", rel, fsRoot)
	case unix.ENOENT:
		return fsErr("not_found", "%s: no such file or directory", rel)
	case unix.EISDIR:
		return fsErr("is_dir", "%s is a directory", rel)
	case unix.ENOTDIR:
		return fsErr("not_dir", "%s: a part of the path is not a directory", rel)
	case unix.EACCES, unix.EPERM:
		return fsErr("permission", "%s: permission denied (files belong to uid 1000 unless a root install made them)", rel)
	case unix.ENOSYS:
		return fsErr("io", "%s: this kernel lacks openat2 (Linux 5.6+ is needed for file tools)", rel)
	}
	return fsErr("io", "%s: %v", rel, err)
}

func fsRead(root int, rel string, offset, limit int, max int64) (proto.FSResult, error) {
	fd, err := openBeneath(root, rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return proto.FSResult{}, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return proto.FSResult{}, fsErr("io", "%s: %v", rel, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return proto.FSResult{}, fsErr("is_dir", "%s is a directory: list_files lists it", rel)
	case unix.S_IFREG:
	default:
		return proto.FSResult{}, fsErr("invalid", "%s is not a regular file", rel)
	}
	res := proto.FSResult{Size: st.Size}
	if offset == 0 && limit == 0 {
		buf, err := io.ReadAll(io.LimitReader(f, max+1))
		if err != nil {
			return proto.FSResult{}, fsErr("io", "read %s: %v", rel, err)
		}
		if int64(len(buf)) > max {
			buf, res.Truncated = buf[:max], true
		}
		res.Content = buf
		return res, nil
	}
	if offset == 0 {
		offset = 1
	}
	r := bufio.NewReader(f)
	line := 1
	var out []byte
	for {
		b, err := r.ReadSlice('\n')
		if len(b) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
			return proto.FSResult{}, fsErr("io", "read %s: %v", rel, err)
		}
		if line >= offset {
			if limit > 0 && res.Lines >= limit {
				res.MoreLines = true
				break
			}
			if int64(len(out)+len(b)) > max {
				out = append(out, b[:max-int64(len(out))]...)
				res.Truncated = true
				break
			}
			out = append(out, b...)
		}
		if err == bufio.ErrBufferFull {
			continue // the rest of a long line
		}
		if line >= offset {
			res.Lines++
		}
		line++
		if err == io.EOF {
			break
		}
	}
	res.Content = out
	res.FirstLine = offset
	return res, nil
}

func fsWrite(root int, rel string, mode int64, appendTo bool, max int64, stdin io.Reader) (proto.FSResult, error) {
	// All the content first: a write over the limit changes nothing.
	data, err := io.ReadAll(io.LimitReader(stdin, max+1))
	if err != nil {
		return proto.FSResult{}, fsErr("io", "read content: %v", err)
	}
	if int64(len(data)) > max {
		return proto.FSResult{}, fsErr("too_large", "content is over %d bytes", max)
	}
	dir, base := path.Split(rel)
	dirfd, err := mkdirBeneath(root, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return proto.FSResult{}, err
	}
	defer unix.Close(dirfd)
	if base == "" || base == "." {
		return proto.FSResult{}, fsErr("is_dir", "%s names a directory, not a file", rel)
	}
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_NONBLOCK
	if appendTo {
		flags |= unix.O_APPEND
	} else {
		flags |= unix.O_TRUNC
	}
	create := uint32(0o644)
	if mode >= 0 {
		create = uint32(mode)
	}
	fd, err := openBeneath(dirfd, base, flags, create)
	if err != nil {
		return proto.FSResult{}, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return proto.FSResult{}, fsErr("invalid", "%s is not a regular file", rel)
	}
	if mode >= 0 {
		if err := unix.Fchmod(fd, uint32(mode)); err != nil {
			return proto.FSResult{}, fsErr("permission", "chmod %s: %v", rel, err)
		}
	}
	n, err := f.Write(data)
	if err != nil {
		return proto.FSResult{}, fsErr("io", "write %s: %v", rel, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return proto.FSResult{}, fsErr("io", "%s: %v", rel, err)
	}
	return proto.FSResult{Written: int64(n), Size: st.Size, Mode: fmt.Sprintf("%04o", st.Mode&0o7777)}, nil
}

// mkdirBeneath opens directory dir beneath root, making the missing parts.
func mkdirBeneath(root int, dir string) (int, error) {
	fd, err := unix.Dup(root)
	if err != nil {
		return -1, fsErr("io", "dup: %v", err)
	}
	if dir == "" || dir == "." {
		return fd, nil
	}
	for _, part := range strings.Split(dir, "/") {
		if part == "" || part == "." {
			continue
		}
		if err := unix.Mkdirat(fd, part, 0o755); err != nil && err != unix.EEXIST {
			unix.Close(fd)
			return -1, openErr(dir, err)
		}
		next, err := openBeneath(fd, part, unix.O_PATH|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

func fsList(root int, rel string, recursive bool, glob string, max int) (proto.FSResult, error) {
	fd, err := openBeneath(root, rel, unix.O_PATH, 0)
	if err != nil {
		return proto.FSResult{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return proto.FSResult{}, fsErr("io", "%s: %v", rel, err)
	}
	unix.Close(fd)
	res := proto.FSResult{Entries: []proto.FSEntry{}}
	clean := path.Clean(rel)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		res.Entries = append(res.Entries, entry(clean, path.Base(clean), &st, ""))
		return res, nil
	}
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		dfd, err := openBeneath(root, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(dfd), dir)
		names, err := f.Readdirnames(-1)
		if err != nil {
			f.Close()
			return fsErr("io", "list %s: %v", dir, err)
		}
		sort.Strings(names)
		var subdirs []string
		for _, name := range names {
			var est unix.Stat_t
			if err := unix.Fstatat(dfd, name, &est, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // gone meanwhile
			}
			p := name
			if dir != "." {
				p = dir + "/" + name
			}
			isDir := est.Mode&unix.S_IFMT == unix.S_IFDIR
			if ok, _ := path.Match(glob, name); glob == "" || ok {
				if len(res.Entries) >= max {
					res.Truncated = true
					f.Close()
					return nil
				}
				target := ""
				if est.Mode&unix.S_IFMT == unix.S_IFLNK {
					buf := make([]byte, 4096)
					if n, err := unix.Readlinkat(dfd, name, buf); err == nil {
						target = string(buf[:n])
					}
				}
				res.Entries = append(res.Entries, entry(p, name, &est, target))
			}
			if isDir && recursive && depth < fsMaxDepth {
				subdirs = append(subdirs, p)
			}
		}
		f.Close()
		for _, sd := range subdirs {
			if res.Truncated {
				return nil
			}
			if err := walk(sd, depth+1); err != nil {
				var fe *fsError
				if errors.As(err, &fe) && fe.kind != "io" {
					continue // a directory made unreadable or swapped meanwhile
				}
				return err
			}
		}
		return nil
	}
	if err := walk(clean, 0); err != nil {
		return proto.FSResult{}, err
	}
	return res, nil
}

func entry(p, name string, st *unix.Stat_t, target string) proto.FSEntry {
	typ := "other"
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		typ = "file"
	case unix.S_IFDIR:
		typ = "dir"
	case unix.S_IFLNK:
		typ = "symlink"
	}
	return proto.FSEntry{Path: p, Name: name, Type: typ, Size: st.Size,
		Mode:   fmt.Sprintf("%04o", st.Mode&0o7777),
		MTime:  time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC().Format(time.RFC3339),
		Target: target}
}

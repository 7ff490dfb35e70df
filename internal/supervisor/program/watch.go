package program

// The watch subcommand (proto.WatchCommand): inotify on a path of
// /workspace, for a subscription to a workspace file or directory. The path
// is opened beneath /workspace as fs opens it (no symbolic link, no escape)
// and watched through /proc/self/fd of that descriptor, so a link swapped
// in afterwards cannot point the watch elsewhere; subdirectories are opened
// beneath their parent's descriptor the same way.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"time"
	"unsafe"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// watcher follows one path.
type watcher struct {
	ino  int
	root int            // /workspace, O_PATH
	dirs map[int]string // watch descriptor → its path, relative to /workspace
	top  int            // the watched directory's watch descriptor
	full bool           // MaxWatchDirs reached: deeper directories are not followed
	// only, for a watched file: its name. The file's directory is watched
	// (so a file replaced by a rename, as editors save, is still followed)
	// and only the file's own events count.
	only string
}

func watchMain(args []string, stdin io.Reader, stdout io.Writer) int {
	enc := json.NewEncoder(stdout)
	fail := func(err error) int {
		ev := proto.WatchEvent{Error: err.Error(), ErrorKind: "io"}
		var fe *fsError
		if errors.As(err, &fe) {
			ev.ErrorKind = fe.kind
		}
		_ = enc.Encode(ev)
		return 1
	}
	if len(args) != 1 {
		return fail(fsErr("invalid", "usage: watch PATH"))
	}
	rel := path.Clean(args[0])
	if rel != "." {
		if err := checkRel(rel); err != nil {
			return fail(err)
		}
	}
	root, err := unix.Open(fsRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fsErr("io", "open %s: %v", fsRoot, err))
	}
	defer unix.Close(root)
	ino, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return fail(fsErr("io", "inotify: %v", err))
	}
	defer unix.Close(ino)
	w := &watcher{ino: ino, root: root, dirs: map[int]string{}}
	fd, err := openBeneath(root, rel, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fail(err)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	unix.Close(fd)
	if err != nil {
		return fail(fsErr("io", "%s: %v", rel, err))
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fail(openErr(rel, unix.ELOOP))
	}
	dir, recurse := rel, true
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		dir, w.only, recurse = path.Dir(rel), path.Base(rel), false
	}
	if err := w.add(root, dir, dir, true, recurse); err != nil {
		return fail(err)
	}
	if err := enc.Encode(proto.WatchEvent{Ready: true}); err != nil {
		return 2
	}
	// The server ends a watch by closing its stdin.
	var stop [2]int
	if err := unix.Pipe2(stop[:], unix.O_CLOEXEC); err != nil {
		return fail(fsErr("io", "pipe: %v", err))
	}
	defer unix.Close(stop[0])
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		unix.Close(stop[1])
	}()
	return w.run(enc, stop[0])
}

// add watches the directory rel (opened beneath dirfd as name) and, with
// recurse, its subdirectories.
func (w *watcher) add(dirfd int, name, rel string, top, recurse bool) error {
	if len(w.dirs) >= proto.MaxWatchDirs {
		w.full = true
		return nil
	}
	dfd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(dfd), rel)
	defer f.Close()
	wd, err := unix.InotifyAddWatch(w.ino, "/proc/self/fd/"+strconv.Itoa(dfd), watchMask)
	if err != nil {
		return fsErr("io", "watch %s: %v", rel, err)
	}
	w.dirs[wd] = rel
	if top {
		w.top = wd
	}
	if !recurse {
		return nil
	}
	entries, _ := f.ReadDir(-1)
	for _, e := range entries {
		if e.IsDir() {
			_ = w.add(dfd, e.Name(), path.Join(rel, e.Name()), false, true)
		}
	}
	return nil
}

// run reads events and writes them in batches until the path is gone or
// stop (a pipe's read end) closes.
func (w *watcher) run(enc *json.Encoder, stop int) int {
	buf := make([]byte, 64<<10)
	pending := map[string]bool{}
	more := false
	var flushAt time.Time
	for {
		timeout := -1
		if len(pending) > 0 || more {
			timeout = max(int(time.Until(flushAt).Milliseconds()), 0)
		}
		fds := []unix.PollFd{{Fd: int32(w.ino), Events: unix.POLLIN}, {Fd: int32(stop), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeout)
		if err != nil && err != unix.EINTR {
			return 2
		}
		if fds[1].Revents != 0 {
			return 0
		}
		gone := false
		if n > 0 && fds[0].Revents&unix.POLLIN != 0 {
			r, err := unix.Read(w.ino, buf)
			if err != nil && err != unix.EINTR && err != unix.EAGAIN {
				return 2
			}
			for off := 0; off+unix.SizeofInotifyEvent <= r; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				off += unix.SizeofInotifyEvent + int(ev.Len)
				name := string(bytes.TrimRight(nameBytes, "\x00"))
				if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
					more = true
					continue
				}
				dir, ok := w.dirs[int(ev.Wd)]
				if !ok {
					continue
				}
				if ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
					delete(w.dirs, int(ev.Wd))
					if int(ev.Wd) == w.top {
						gone = true
					}
				}
				if w.only != "" && name != w.only && !gone {
					continue
				}
				p := path.Join(dir, name)
				if w.only == "" && ev.Mask&unix.IN_ISDIR != 0 && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && !w.full {
					if dfd, err := openBeneath(w.root, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err == nil {
						_ = w.add(dfd, name, p, false, true)
						unix.Close(dfd)
					}
				}
				if len(pending) == 0 && !more {
					flushAt = time.Now().Add(proto.WatchCoalesce * time.Millisecond)
				}
				if len(pending) < proto.WatchBatch {
					pending[p] = true
				} else {
					more = true
				}
			}
		}
		if (len(pending) > 0 || more) && (gone || !time.Now().Before(flushAt)) {
			ev := proto.WatchEvent{More: more}
			for p := range pending {
				ev.Paths = append(ev.Paths, p)
			}
			sort.Strings(ev.Paths)
			if enc.Encode(ev) != nil {
				return 2
			}
			clear(pending)
			more = false
		}
		if gone {
			_ = enc.Encode(proto.WatchEvent{Gone: true})
			return 0
		}
	}
}

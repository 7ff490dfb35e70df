package program

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// start starts the job and the goroutines relaying its stdio, and writes the
// Started frame. On failure it returns the exit code to report.
func (s *super) start() (int, error) {
	sp := s.spec
	if sp.InheritEnv {
		// The container's own environment (the image's) under the job's.
		sp.Env = overlayEnv(os.Environ(), sp.Env)
	}
	sp.Env = withUnpackedApt(sp.Env)
	if err := writeJobFiles(sp.Files); err != nil {
		return codeCannotExec, fmt.Errorf("cannot start: the job's files: %v", err)
	}
	cwd := sp.Cwd
	if cwd != "" {
		if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
			if err == nil {
				err = errors.New("not a directory")
			}
			return codeCannotExec, fmt.Errorf("cannot start: working directory %s: %v", truncate(cwd, 200), unwrapPath(err))
		}
		if sp.Seed {
			if _, err := seedWorkdir(proto.SeedDir, cwd); err != nil {
				return codeCannotExec, fmt.Errorf("cannot start: %v", err)
			}
		}
	}
	if s.early != nil {
		early := s.early
		s.early = nil
		wd := cwd
		if wd == "" {
			wd = early.cwd
		}
		why := early.refusal(sp, sp.Env, wd)
		if why == "" {
			s.take(early, sp, sp.Env, wd)
			return 0, nil
		}
		logger.Printf("prestarted process not used (%s): starting the job anew", why)
		early.discard()
	}
	path, code, err := lookPath(sp.Argv[0], sp.Env, cwd)
	if err != nil {
		return code, err
	}
	exe, argv := path, sp.Argv
	if len(sp.Rlimits) > 0 && ownLimitsSuffice(sp.Rlimits) {
		// This supervisor serves this one job: it takes the job's limits
		// itself and the job inherits them at fork, which saves a re-exec
		// (a Go start, several ms) per workspace job.
		if err := tightenLimits(sp.Rlimits); err != nil {
			return codeCannotExec, fmt.Errorf("cannot start: %v", err)
		}
	} else if len(sp.Rlimits) > 0 {
		// Limits are set by a re-exec of this binary between fork and the
		// job's exec, so the job never runs a single instruction without them.
		self, err := os.Executable()
		if err != nil {
			self = "/proc/self/exe"
		}
		exe = self
		argv = append([]string{"sandboxer-supervisor", shimFlag, encodeLimits(sp.Rlimits), path}, sp.Argv...)
	}

	var files [3]*os.File
	var childEnds []*os.File // closed in the parent once the job has started
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	var stdinW *os.File
	if sp.TTY != nil {
		master, slave, err := openPTY(sp.TTY.Rows, sp.TTY.Cols)
		if err != nil {
			return codeCannotExec, fmt.Errorf("cannot start: pty: %v", err)
		}
		s.pty = master
		childEnds = append(childEnds, slave)
		files = [3]*os.File{slave, slave, slave}
	} else {
		if sp.Stdin == proto.StdinPipe {
			r, w, err := os.Pipe()
			if err != nil {
				return codeCannotExec, fmt.Errorf("cannot start: %v", err)
			}
			files[0], stdinW = r, w
			childEnds = append(childEnds, r)
		} else {
			null, err := os.Open(os.DevNull)
			if err != nil {
				return codeCannotExec, fmt.Errorf("cannot start: %v", err)
			}
			files[0] = null
			childEnds = append(childEnds, null)
		}
		for i := 1; i <= 2; i++ {
			r, w, err := os.Pipe()
			if err != nil {
				return codeCannotExec, fmt.Errorf("cannot start: %v", err)
			}
			files[i] = w
			childEnds = append(childEnds, w)
			s.closers = append(s.closers, r)
		}
	}
	attr := &os.ProcAttr{
		Dir:   cwd,
		Env:   sp.Env,
		Files: files[:],
		Sys:   &syscall.SysProcAttr{Setpgid: sp.TTY == nil, Setsid: sp.TTY != nil, Setctty: sp.TTY != nil, Ctty: 0},
	}
	if attr.Env == nil {
		attr.Env = []string{} // nil would mean "inherit the supervisor's"
	}
	s.execAt = time.Now()
	p, err := os.StartProcess(exe, argv, attr)
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		for _, f := range s.closers {
			f.Close()
		}
		if s.pty != nil {
			s.pty.Close()
		}
		code := codeCannotExec
		if errors.Is(err, unix.ENOENT) {
			code = codeNotFound
		}
		return code, fmt.Errorf("cannot start %s: %v", truncate(sp.Argv[0], 200), unwrapPath(err))
	}
	s.pid = p.Pid
	s.started = time.Now()
	p.Release() // reaped by reap(), through wait4(-1)
	s.out.json(proto.TypeStarted, proto.Started{PID: s.pid, StartedAt: s.started.UTC()})

	if sp.TTY != nil {
		if sp.Stdin == proto.StdinPipe {
			s.stdinQ = newStdinQueue(s.pty, false, s.out.ack)
		}
		s.relay(s.pty, proto.TypeStdout)
	} else {
		if stdinW != nil {
			s.stdinQ = newStdinQueue(stdinW, true, s.out.ack)
		}
		s.relay(s.closers[0], proto.TypeStdout)
		s.relay(s.closers[1], proto.TypeStderr)
	}
	return 0, nil
}

// relay copies one output of the job to the server as frames until EOF (or
// EIO: the pty's last slave descriptor closed).
func (s *super) relay(r *os.File, typ byte) {
	s.outputs.Add(1)
	go func() {
		defer s.outputs.Done()
		buf := make([]byte, outputChunk)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				s.firstOutput.CompareAndSwap(0, time.Now().UnixNano())
				s.out.frame(typ, buf[:n])
			}
			if err != nil {
				if typ != proto.TypeStdout || s.pty == nil { // the pty is closed by run()
					r.Close()
				}
				return
			}
		}
	}()
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// lookPath resolves argv[0] like execvp, with the job's PATH (relative to
// the job's working directory). It returns 127 for "not found", 126 for
// "found but not executable".
func lookPath(file string, env []string, cwd string) (string, int, error) {
	name := truncate(file, 200) // for messages: the Exit frame must stay small
	abs := func(p string) string {
		if filepath.IsAbs(p) || cwd == "" {
			return p
		}
		return filepath.Join(cwd, p)
	}
	if strings.Contains(file, "/") {
		if err := executable(abs(file)); err != nil {
			if notFound(err) {
				return "", codeNotFound, fmt.Errorf("cannot start %s: no such file", name)
			}
			return "", codeCannotExec, fmt.Errorf("cannot start %s: %v", name, err)
		}
		return file, 0, nil
	}
	path, ok := lookupEnv(env, "PATH")
	if !ok {
		path = defaultPath
	}
	var denied error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := abs(filepath.Join(dir, file))
		err := executable(p)
		if err == nil {
			return p, 0, nil
		}
		if !notFound(err) && denied == nil {
			denied = err
		}
	}
	if denied != nil {
		return "", codeCannotExec, fmt.Errorf("cannot start %s: %v", name, denied)
	}
	return "", codeNotFound, fmt.Errorf("cannot start %s: executable file not found in $PATH", name)
}

func notFound(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENAMETOOLONG) || errors.Is(err, unix.ENOTDIR)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return unwrapPath(err)
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	if fi.Mode()&0o111 == 0 || unix.Access(p, unix.X_OK) != nil {
		return errors.New("permission denied")
	}
	return nil
}

// openPTY allocates a pseudo-terminal of the given size.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var n uint32
	err = ioctlFile(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return fmt.Errorf("unlockpt: %w", err)
		}
		var err error
		if n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN); err != nil {
			return fmt.Errorf("ptsname: %w", err)
		}
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err == nil {
		slave, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|unix.O_NOCTTY, 0)
	}
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

// stdinQueue feeds the job's stdin from its own goroutine, so a job that does
// not read never stalls the frame loop. It holds at most
// proto.MaxStdinQueue bytes; what does not fit is dropped and counted.
type stdinQueue struct {
	delivered func(total uint64) // told after each write, with the running total
	total     uint64             // bytes the job's stdin has taken (run's goroutine only)
	mu        sync.Mutex
	cond      *sync.Cond
	bufs      [][]byte
	size      int
	eof       bool // close w once the queue is empty
	stopped   bool
	dropped   int64
	w         io.WriteCloser
	owned     bool // w is ours to close (a pipe; not the pty master)
}

func newStdinQueue(w io.WriteCloser, owned bool, delivered func(total uint64)) *stdinQueue {
	q := &stdinQueue{w: w, owned: owned, delivered: delivered}
	q.cond = sync.NewCond(&q.mu)
	go q.run()
	return q
}

func (q *stdinQueue) push(p []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.eof || q.stopped {
		return
	}
	if q.size+len(p) > proto.MaxStdinQueue {
		q.dropped += int64(len(p))
		return
	}
	q.bufs = append(q.bufs, p)
	q.size += len(p)
	q.cond.Signal()
}

func (q *stdinQueue) closeInput() {
	q.mu.Lock()
	q.eof = true
	q.cond.Signal()
	q.mu.Unlock()
}

// stop abandons pending input and closes the pipe (which also ends a write
// blocked on a full pipe).
func (q *stdinQueue) stop() {
	if q == nil {
		return
	}
	q.mu.Lock()
	q.stopped = true
	q.bufs, q.size = nil, 0
	q.cond.Signal()
	q.mu.Unlock()
	if q.owned {
		q.w.Close()
	}
}

func (q *stdinQueue) droppedBytes() int64 {
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

func (q *stdinQueue) run() {
	for {
		q.mu.Lock()
		for len(q.bufs) == 0 && !q.eof && !q.stopped {
			q.cond.Wait()
		}
		if q.stopped {
			q.mu.Unlock()
			return
		}
		if len(q.bufs) == 0 { // eof and drained
			q.mu.Unlock()
			if q.owned {
				q.w.Close()
			}
			return
		}
		p := q.bufs[0]
		q.bufs[0] = nil
		q.bufs = q.bufs[1:]
		q.size -= len(p)
		q.mu.Unlock()
		n, err := q.w.Write(p)
		q.total += uint64(n)
		if n > 0 && q.delivered != nil {
			q.delivered(q.total) // the server may send more now
		}
		if err != nil {
			// The job closed its stdin or ended: drop the rest.
			q.mu.Lock()
			q.stopped = true
			q.bufs, q.size = nil, 0
			q.mu.Unlock()
			if q.owned {
				q.w.Close()
			}
			return
		}
	}
}

// The rlimit shim: "sandboxer-supervisor --exec-with-rlimits nofile=64,fsize=1024 /path/to/exe argv0 args..."
// lowers its limits and execs the job in place.
const shimFlag = "--exec-with-rlimits"

var rlimitResources = map[string]int{
	"nofile": unix.RLIMIT_NOFILE,
	"fsize":  unix.RLIMIT_FSIZE,
	"nproc":  unix.RLIMIT_NPROC,
	"core":   unix.RLIMIT_CORE,
}

func encodeLimits(m map[string]uint64) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+strconv.FormatUint(v, 10))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func shimMain(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "sandboxer-supervisor: internal error: bad rlimit shim arguments")
		return codeCannotExec
	}
	limits := map[string]uint64{}
	for _, kv := range strings.Split(args[0], ",") {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 64)
		if _, ok := rlimitResources[k]; !ok || err != nil {
			fmt.Fprintf(os.Stderr, "sandboxer-supervisor: internal error: bad rlimit %q\n", kv)
			return codeCannotExec
		}
		limits[k] = n
	}
	if err := tightenLimits(limits); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxer-supervisor: %v\n", err)
		return codeCannotExec
	}
	err := syscall.Exec(args[1], args[2:], os.Environ())
	fmt.Fprintf(os.Stderr, "sandboxer-supervisor: exec %s: %v\n", args[1], err)
	if errors.Is(err, unix.ENOENT) {
		return codeNotFound
	}
	return codeCannotExec
}

// minOwnOpenFiles is the open-file limit under which the supervisor itself
// still works after taking its job's limits (its pipes, the runtime's poller,
// /proc reads for a tree kill): below it the job's limits go through the shim.
const minOwnOpenFiles = 64

// ownLimitsSuffice says whether the supervisor can take limits on itself:
// only nofile (at least minOwnOpenFiles) and fsize, which binds regular files
// and the supervisor writes none (Go ignores SIGXFSZ; a write would fail).
func ownLimitsSuffice(limits map[string]uint64) bool {
	for k, n := range limits {
		switch {
		case k == "fsize":
		case k == "nofile" && n >= minOwnOpenFiles:
		default:
			return false
		}
	}
	return true
}

// tightenLimits lowers this process's limits (soft and hard, so that the job
// cannot raise them back); a limit already lower stays.
func tightenLimits(limits map[string]uint64) error {
	for k, n := range limits {
		res, ok := rlimitResources[k]
		if !ok {
			return fmt.Errorf("internal error: unknown rlimit %q", k)
		}
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(res, &cur); err != nil {
			return fmt.Errorf("getrlimit %s: %v", k, err)
		}
		if n >= cur.Max {
			continue // nothing to tighten (and for nofile Go restores the original soft limit at exec)
		}
		// Go raised the soft nofile limit to the hard one at start-up, so
		// for nofile the original soft limit is unknown here: both become n.
		// (Setrlimit of nofile also stops Go from restoring that soft limit
		// in children.)
		nl := syscall.Rlimit{Cur: min(n, cur.Cur), Max: n}
		if res == unix.RLIMIT_NOFILE {
			nl.Cur = n
		}
		if err := syscall.Setrlimit(res, &nl); err != nil {
			return fmt.Errorf("setrlimit %s=%d: %v", k, n, err)
		}
	}
	return nil
}

// overlayEnv is base with every KEY=VALUE of over replacing or adding to it.
func overlayEnv(base, over []string) []string {
	out := make([]string, 0, len(base)+len(over))
	index := map[string]int{}
	for _, kv := range append(append([]string(nil), base...), over...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}

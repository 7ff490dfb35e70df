package program

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

type procInfo struct {
	pid, ppid int
	zombie    bool
}

// listProcs reads every process from /proc. Processes that vanish while
// being read are skipped.
func listProcs() []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	procs := make([]procInfo, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", n, "stat"))
		if err != nil {
			continue
		}
		ppid, state, ok := parseStat(b)
		if !ok {
			continue
		}
		procs = append(procs, procInfo{pid: pid, ppid: ppid, zombie: state == 'Z' || state == 'X'})
	}
	return procs
}

// parseStat extracts state and ppid from /proc/<pid>/stat. The command name
// (field 2) is in parentheses and may itself contain spaces and parentheses,
// so parsing starts after the last ')'.
func parseStat(b []byte) (ppid int, state byte, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, false
	}
	return ppid, f[0][0], true
}

// descendants returns the live (non-zombie) descendants of root.
func descendants(root int, procs []procInfo) []int {
	children := make(map[int][]procInfo, len(procs))
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []int
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if seen[c.pid] {
				continue
			}
			seen[c.pid] = true
			queue = append(queue, c.pid)
			if !c.zombie {
				out = append(out, c.pid)
			}
		}
	}
	return out
}

// targets lists the live processes a kill must reach: in "tree" mode the
// supervisor's descendants, in "container" mode every process of the
// container but pid 1 and the supervisor that it may signal (kill(pid, 0)
// is the kernel's own permission check, the one kill(-1) applies).
func (s *super) targets() []int {
	procs := listProcs()
	self := os.Getpid()
	if s.spec.KillMode != proto.KillContainer {
		return descendants(self, procs)
	}
	var out []int
	for _, p := range procs {
		if p.pid == 1 || p.pid == self || p.zombie || unix.Kill(p.pid, 0) != nil {
			continue
		}
		out = append(out, p.pid)
	}
	return out
}

// signalAll sends sig once to everything a kill must reach.
func (s *super) signalAll(sig unix.Signal) {
	if s.spec.KillMode == proto.KillContainer {
		_ = unix.Kill(-1, sig) // never the caller, never pid 1
		return
	}
	for _, pid := range s.targets() {
		_ = unix.Kill(pid, sig)
	}
}

// killAll SIGKILLs everything a kill must reach, again and again, until
// nothing is left (a process may fork between a scan and the kill). It
// returns how many processes it found on the first pass.
func (s *super) killAll() int {
	first := -1
	deadline := time.Now().Add(killLoopTimeout)
	pause := time.Millisecond
	for {
		t := s.targets()
		if first < 0 {
			first = len(t)
		}
		if len(t) == 0 {
			return first
		}
		if time.Now().After(deadline) {
			s.event("%d process(es) still alive after %v of SIGKILL", len(t), killLoopTimeout)
			return first
		}
		if s.spec.KillMode == proto.KillContainer {
			_ = unix.Kill(-1, unix.SIGKILL)
		} else {
			for _, pid := range t {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// containerModeRefusal returns why kill(-1) is unsafe here, or "" if the
// supervisor is certainly inside a container's pid namespace: it is pid 1,
// or pid 1's direct child with a pid below 300 (RESERVED_PIDS: never handed
// out after boot) whose pid 1 was started to run this executable
// ("docker-init -- sandboxer-supervisor"). See the package comment.
func containerModeRefusal() string {
	pid := os.Getpid()
	if pid == 1 {
		return ""
	}
	if os.Getppid() != 1 {
		return "the supervisor's parent is not pid 1 (not running under a container's init)"
	}
	if pid >= 300 {
		return "the supervisor's pid " + strconv.Itoa(pid) + " is not that of a container's first process"
	}
	cmdline, err := os.ReadFile("/proc/1/cmdline")
	if err != nil {
		return "cannot read /proc/1/cmdline: " + err.Error()
	}
	names := map[string]bool{filepath.Base(os.Args[0]): true}
	if exe, err := os.Executable(); err == nil {
		names[filepath.Base(exe)] = true
	}
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		if len(arg) > 0 && names[filepath.Base(string(arg))] {
			return ""
		}
	}
	return "pid 1 was not started to run the supervisor"
}

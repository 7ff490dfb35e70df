package program

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"golang.org/x/sys/unix"
)

// cgroupRoot is where the container's own cgroup appears (a private cgroup
// namespace, or Docker's cgroup v1 mounts of the container's subtree).
var cgroupRoot = "/sys/fs/cgroup"

// cgroupSnap is one reading of the container's cgroup.
type cgroupSnap struct {
	cpuNS, peak, oomKills   int64
	hasCPU, hasPeak, hasOOM bool
}

// readCgroup reads CPU time, peak memory and the OOM kill counter of the
// cgroup at root, cgroup v2 or v1. Missing files leave has* false.
func readCgroup(root string) cgroupSnap {
	var s cgroupSnap
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil { // v2
		if v, ok := keyedValue(filepath.Join(root, "cpu.stat"), "usage_usec"); ok {
			s.cpuNS, s.hasCPU = v*1000, true
		}
		s.peak, s.hasPeak = intFile(filepath.Join(root, "memory.peak"))
		s.oomKills, s.hasOOM = keyedValue(filepath.Join(root, "memory.events"), "oom_kill")
		return s
	}
	for _, dir := range []string{"cpuacct", "cpu,cpuacct", "cpuacct,cpu"} {
		if v, ok := intFile(filepath.Join(root, dir, "cpuacct.usage")); ok {
			s.cpuNS, s.hasCPU = v, true
			break
		}
	}
	s.peak, s.hasPeak = intFile(filepath.Join(root, "memory", "memory.max_usage_in_bytes"))
	s.oomKills, s.hasOOM = keyedValue(filepath.Join(root, "memory", "memory.oom_control"), "oom_kill")
	return s
}

func intFile(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return v, err == nil
}

// keyedValue reads "key value" lines (cpu.stat, memory.events, memory.oom_control).
func keyedValue(path, key string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// usage measures the job once every process of it has been reaped. In
// "container" mode the container's cgroup is preferred (the whole tree, OOM
// kills included); otherwise, or for what the cgroup lacks,
// getrusage(RUSAGE_CHILDREN).
func (s *super) usage(wall time.Duration) (proto.Usage, bool) {
	u := proto.Usage{WallMS: wall.Milliseconds()}
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &ru)
	ruCPU := (ru.Utime.Nano() + ru.Stime.Nano()) / 1e6
	ruPeak := ru.Maxrss * 1024
	cpuSrc, memSrc := "rusage", "rusage"
	u.CPUMS, u.PeakMemoryBytes = ruCPU, ruPeak
	oom := false
	if s.useCgroup {
		now := readCgroup(cgroupRoot)
		if s.cgroupBase.hasCPU && now.hasCPU && now.cpuNS >= s.cgroupBase.cpuNS {
			u.CPUMS, cpuSrc = (now.cpuNS-s.cgroupBase.cpuNS)/1e6, "cgroup"
		}
		if now.hasPeak {
			u.PeakMemoryBytes, memSrc = now.peak, "cgroup"
		}
		oom = s.cgroupBase.hasOOM && now.hasOOM && now.oomKills > s.cgroupBase.oomKills
	}
	if cpuSrc == memSrc {
		u.Source = cpuSrc
	} else {
		u.Source = "cpu:" + cpuSrc + ",memory:" + memSrc
	}
	return u, oom
}

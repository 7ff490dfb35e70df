package fake

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxer/sandboxer/internal/hardening"
	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// profile is the fake's hardening profile: what the engines' written
// profiles set (docs/architecture.md, "The hardening profile"), kept as the
// kernel files and answers a process inside would get. The supervisor's
// probe reads them through hardening.Read, as it reads a real kernel, so
// the fake is held to the same hardening suite (sandboxtest.RunHardening).
type profile struct {
	limits  sandbox.Limits
	workdir string
	seq     int // the container's number: its namespaces' numbers
}

func newProfile(spec sandbox.Spec, seq int) profile {
	wd := spec.WorkDir
	if wd == "" {
		wd = "/workspace"
	}
	return profile{limits: spec.Limits, workdir: wd, seq: seq}
}

// kernelFile is one of the kernel's files the profile shapes, as the
// process reads it.
func (p profile) kernelFile(name string, routed bool) (string, bool) {
	l := p.limits
	switch name {
	case "/proc/net/route":
		return routeTable(routed), true
	case "/proc/net/dev":
		dev := "Inter-|   Receive\n face |bytes\n    lo: 0 0\n"
		if routed {
			dev += "  eth0: 0 0\n"
		}
		return dev, true
	case "/proc/self/status":
		return "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n" +
			"CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n", true
	case "/proc/self/limits":
		row := func(name string, v int64) string {
			return fmt.Sprintf("%-26s%-21d%-21d\n", name, v, v)
		}
		return "Limit                     Soft Limit           Hard Limit           Units     \n" +
			row("Max file size", l.FileSizeBytes) + row("Max core file size", 0) + row("Max open files", l.OpenFiles), true
	case "/proc/self/mounts":
		m := "overlay / overlay ro,relatime 0 0\n" +
			"tmpfs /tmp tmpfs rw,nosuid,nodev,size=" + strconv.FormatInt(l.TmpBytes>>10, 10) + "k,mode=1777 0 0\n"
		if p.workdir != "/tmp" {
			m += "tmpfs " + p.workdir + " tmpfs rw,nosuid,nodev,size=" + strconv.FormatInt(l.WorkdirBytes>>10, 10) + "k,mode=755,uid=1000,gid=1000 0 0\n"
		}
		for _, ro := range hardening.ReadonlyPaths {
			m += "proc " + ro + " proc ro,nosuid,nodev,noexec 0 0\n"
		}
		return m, true
	case "/sys/fs/cgroup/memory.max":
		return strconv.FormatInt(l.MemoryBytes, 10) + "\n", true
	case "/sys/fs/cgroup/pids.max":
		return strconv.FormatInt(l.Pids, 10) + "\n", true
	case "/sys/fs/cgroup/cpu.max":
		return strconv.FormatInt(l.NanoCPUs/1e4, 10) + " 100000\n", true
	case "/proc/self/uid_map":
		return "         0          0 4294967295\n", true
	case "/proc/1/comm":
		return "fake-init\n", true
	case "/proc/kcore", "/proc/keys", "/proc/timer_list":
		return "", true // /dev/null over them
	}
	return "", false
}

// kernel is a process's view of the fake's kernel (hardening.System).
type kernel struct{ c *container }

func (k kernel) ReadFile(name string) ([]byte, error) {
	if name == "/sys/firmware" {
		return nil, syscall.EISDIR
	}
	if s, ok := k.c.readFile(name); ok {
		return []byte(s), nil
	}
	return nil, fs.ErrNotExist
}

func (k kernel) ReadDir(name string) ([]string, error) {
	if name == "/sys/firmware" {
		return nil, nil // an empty tmpfs over it
	}
	return nil, fs.ErrNotExist
}

func (k kernel) Readlink(name string) (string, error) {
	if ns, ok := strings.CutPrefix(name, "/proc/self/ns/"); ok {
		if ns == "user" {
			return "user:[4026531837]", nil // the host's: no user namespace of its own, as on runc
		}
		return fmt.Sprintf("%s:[%d]", ns, 4026540000+k.c.seq), nil
	}
	return "", fs.ErrNotExist
}

func (k kernel) Stat(name string) (int, int, fs.FileMode, error) {
	switch name {
	case "/tmp":
		return 0, 0, fs.ModeDir | fs.ModeSticky | 0o777, nil
	case k.c.profile.workdir:
		return 1000, 1000, fs.ModeDir | 0o755, nil
	}
	if _, ok := k.c.profile.kernelFile(name, false); ok {
		return 0, 0, 0o444, nil
	}
	return 0, 0, 0, fs.ErrNotExist
}

// Try: seccomp and the dropped capabilities refuse every one of them.
func (kernel) Try(string) error { return syscall.EPERM }

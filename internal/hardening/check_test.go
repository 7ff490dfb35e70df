package hardening

import (
	"io/fs"
	"strings"
	"syscall"
	"testing"
)

// mapSystem is a kernel made of a few files, for Read and Check.
type mapSystem struct {
	files   map[string]string
	allowed map[string]bool
}

func (m mapSystem) ReadFile(p string) ([]byte, error) {
	if s, ok := m.files[p]; ok {
		return []byte(s), nil
	}
	return nil, fs.ErrNotExist
}
func (m mapSystem) ReadDir(string) ([]string, error) { return nil, fs.ErrNotExist }
func (m mapSystem) Readlink(p string) (string, error) {
	return strings.TrimPrefix(p, "/proc/self/ns/") + ":[4026532000]", nil
}
func (m mapSystem) Stat(p string) (int, int, fs.FileMode, error) {
	switch p {
	case "/tmp":
		return 0, 0, fs.ModeDir | fs.ModeSticky | 0o777, nil
	case "/workspace":
		return 1000, 1000, fs.ModeDir | 0o755, nil
	}
	if _, ok := m.files[p]; ok {
		return 0, 0, 0o644, nil
	}
	return 0, 0, 0, fs.ErrNotExist
}
func (m mapSystem) Try(c string) error {
	if m.allowed[c] {
		return nil
	}
	return syscall.EPERM
}

func confined() mapSystem {
	return mapSystem{allowed: map[string]bool{}, files: map[string]string{
		"/proc/self/status": "Uid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n" +
			"CapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n",
		"/proc/self/mounts": "overlay / overlay ro,relatime 0 0\n" +
			"tmpfs /tmp tmpfs rw,nosuid,nodev,size=16384k,mode=1777 0 0\n" +
			"tmpfs /workspace tmpfs rw,nosuid,nodev,size=16777216,mode=755,uid=1000,gid=1000 0 0\n" +
			"proc /proc/sys proc ro,nosuid 0 0\nproc /proc/bus proc ro 0 0\nproc /proc/irq proc ro 0 0\n",
		"/proc/self/limits": "Limit                     Soft Limit           Hard Limit           Units     \n" +
			"Max file size             16777216             16777216             bytes     \n" +
			"Max core file size        0                    0                    bytes     \n" +
			"Max open files            256                  256                  files     \n",
		"/sys/fs/cgroup/memory/memory.limit_in_bytes": "134217728\n",
		"/sys/fs/cgroup/pids/pids.max":                "64\n",
		"/sys/fs/cgroup/cpu/cpu.cfs_quota_us":         "50000\n",
		"/sys/fs/cgroup/cpu/cpu.cfs_period_us":        "100000\n",
		"/proc/net/dev":                               "Inter-|   Receive\n face |bytes\n    lo: 0 0\n",
		"/proc/net/route":                             "Iface\tDestination\n",
		"/proc/self/uid_map":                          "0 0 4294967295\n",
		"/proc/1/comm":                                "docker-init\n",
		"/proc/keys":                                  "", "/proc/timer_list": "",
	}}
}

var want = Want{UID: "1000", GID: "1000", WorkDir: "/workspace", MemoryBytes: 128 << 20, Pids: 64, NanoCPUs: 5e8,
	OpenFiles: 256, FileSizeBytes: 16 << 20, TmpBytes: 16 << 20, WorkdirBytes: 16 << 20,
	HostNamespaces: map[string]string{"pid": "pid:[4026531836]", "user": "user:[4026531837]"}}

// TestCheckNamesEachHole: a confined view passes, and each hole in it is
// named in a sentence.
func TestCheckNamesEachHole(t *testing.T) {
	if bad := Check(Read(confined(), "/workspace"), want); len(bad) > 0 {
		t.Fatalf("a confined view fails: %q", bad)
	}
	holes := []struct {
		name  string
		punch func(m mapSystem)
		says  string
	}{
		{"root", func(m mapSystem) {
			m.files["/proc/self/status"] = strings.Replace(m.files["/proc/self/status"], "Uid:\t1000", "Uid:\t0", 1)
		}, "uid"},
		{"a capability", func(m mapSystem) {
			m.files["/proc/self/status"] = strings.Replace(m.files["/proc/self/status"], "CapBnd:\t0000000000000000", "CapBnd:\t00000000a80425fb", 1)
		}, "bounding capabilities"},
		{"no seccomp", func(m mapSystem) {
			m.files["/proc/self/status"] = strings.Replace(m.files["/proc/self/status"], "Seccomp:\t2", "Seccomp:\t0", 1)
		}, "seccomp"},
		{"keyctl allowed", func(m mapSystem) { m.allowed["keyctl"] = true }, "keyctl"},
		{"writable root", func(m mapSystem) {
			m.files["/proc/self/mounts"] = strings.Replace(m.files["/proc/self/mounts"], "overlay ro", "overlay rw", 1)
		}, "read-only"},
		{"tmp size", func(m mapSystem) {
			m.files["/proc/self/mounts"] = strings.Replace(m.files["/proc/self/mounts"], "size=16384k", "size=65536k", 1)
		}, "/tmp's tmpfs size"},
		{"no nofile", func(m mapSystem) {
			m.files["/proc/self/limits"] = strings.Replace(m.files["/proc/self/limits"], "256                  256", "1048576              1048576", 1)
		}, "open files"},
		{"no pids limit", func(m mapSystem) { m.files["/sys/fs/cgroup/pids/pids.max"] = "max\n" }, "pids"},
		{"no cpu quota", func(m mapSystem) { m.files["/sys/fs/cgroup/cpu/cpu.cfs_quota_us"] = "-1\n" }, "cpu quota"},
		{"an interface", func(m mapSystem) { m.files["/proc/net/dev"] += "  eth0: 0 0\n" }, "interfaces"},
		{"a route", func(m mapSystem) { m.files["/proc/net/route"] += "eth0\t00000000\n" }, "routes"},
		{"the engine socket", func(m mapSystem) { m.files["/var/run/docker.sock"] = "" }, "engine sockets"},
		{"kcore readable", func(m mapSystem) { m.files["/proc/kcore"] = "ELF" }, "/proc/kcore"},
		{"writable /proc/sys", func(m mapSystem) {
			m.files["/proc/self/mounts"] = strings.Replace(m.files["/proc/self/mounts"], "/proc/sys proc ro", "/proc/sys proc rw", 1)
		}, "/proc/sys"},
		{"host init", func(m mapSystem) { m.files["/proc/1/comm"] = "systemd\n" }, "pid 1"},
	}
	for _, h := range holes {
		m := confined()
		h.punch(m)
		bad := Check(Read(m, "/workspace"), want)
		if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), h.says) {
			t.Errorf("%s: Check says %q, want a sentence naming %q", h.name, bad, h.says)
		}
	}
	// The host's pid namespace, and an identity uid_map where one of its own is wanted.
	w := want
	w.HostNamespaces = map[string]string{"pid": "pid:[4026532000]"}
	if bad := Check(Read(confined(), "/workspace"), w); len(bad) != 1 || !strings.Contains(bad[0], "pid namespace") {
		t.Errorf("the host's pid namespace: %q", bad)
	}
	w = want
	w.OwnUserNamespace = true
	if bad := Check(Read(confined(), "/workspace"), w); len(bad) == 0 || !strings.Contains(bad[0], "user namespace") {
		t.Errorf("no user namespace of its own: %q", bad)
	}
}

package hardening

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Want is what a sandbox must show for its spec's limits.
type Want struct {
	UID, GID                 string // "1000"
	MemoryBytes, Pids        int64
	NanoCPUs                 int64
	OpenFiles, FileSizeBytes int64
	TmpBytes, WorkdirBytes   int64
	WorkDir                  string
	// Kernel says what the sandbox's kernel is: "" for the host's (runc,
	// the fake's model of it), "gvisor" for gVisor's Sentry, which is a
	// kernel of its own (its /proc shows no seccomp filter, since the
	// host's filters wrap the Sentry, and it has no /proc/net/dev).
	Kernel string
	// OwnUserNamespace: the engine gives each sandbox a user namespace of
	// its own (rootless Podman, gVisor); Docker and containerd with runc do
	// not, and uid 1000 with no capability is the boundary there.
	OwnUserNamespace bool
	// HostNamespaces are the test process's own namespace links, when it
	// runs on the sandbox's kernel: the sandbox's must differ.
	HostNamespaces map[string]string
}

// refused says an error is a refusal: not permitted, not allowed, or no
// such call (gVisor implements no keyring).
func refused(msg string) bool {
	for _, s := range []string{"operation not permitted", "permission denied", "function not implemented"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Check compares a View with what is wanted, and returns each difference as
// a sentence (none: the profile holds).
func Check(v View, w Want) []string {
	var bad []string
	want := func(what, got, want string) {
		if got != want {
			bad = append(bad, fmt.Sprintf("%s is %q, want %q", what, got, want))
		}
	}
	want("uid", v.UID, w.UID)
	want("gid", v.GID, w.GID)
	want("effective capabilities", v.CapEff, "0000000000000000")
	want("bounding capabilities", v.CapBnd, "0000000000000000")
	want("ambient capabilities", v.CapAmb, "0000000000000000")
	if w.Kernel != "gvisor" {
		want("NoNewPrivs", v.NoNewPrivs, "1")
		want("seccomp mode", v.Seccomp, "2")
	}
	for _, c := range Calls {
		if msg, ok := v.Refused[c]; !ok || !refused(msg) {
			bad = append(bad, fmt.Sprintf("the call %s was not refused (%q)", c, msg))
		}
	}

	root, ok := v.Mounts["/"]
	if !ok || root.Option("ro") != "ro" {
		bad = append(bad, fmt.Sprintf("the root is not mounted read-only (%q)", root.Options))
	}
	tmpfs := func(path string, size int64, owner string) {
		m, ok := v.Mounts[path]
		if !ok || m.Type != "tmpfs" {
			bad = append(bad, fmt.Sprintf("%s is not a tmpfs (%+v)", path, m))
			return
		}
		if got := parseSize(m.Option("size")); got != size {
			bad = append(bad, fmt.Sprintf("%s's tmpfs size is %q, want %d bytes", path, m.Option("size"), size))
		}
		for _, o := range []string{"nosuid", "nodev"} {
			// gVisor's tmpfs does not report nodev; its devices are its
			// own, and making one needs CAP_MKNOD, which none has.
			if m.Option(o) != o && !(o == "nodev" && w.Kernel == "gvisor") {
				bad = append(bad, fmt.Sprintf("%s is mounted without %s (%q)", path, o, m.Options))
			}
		}
		if got := v.Owners[path]; owner != "" && got != owner {
			bad = append(bad, fmt.Sprintf("%s's owner and mode are %q, want %q", path, got, owner))
		}
	}
	tmpfs("/tmp", w.TmpBytes, "0:0 1777")
	if w.WorkDir != "" && w.WorkDir != "/tmp" {
		tmpfs(w.WorkDir, w.WorkdirBytes, w.UID+":"+w.GID+" 755")
	}
	for _, p := range ReadonlyPaths {
		if got := v.Readonly[p]; got != "ro" && got != "absent" && w.Kernel != "gvisor" {
			bad = append(bad, fmt.Sprintf("%s is not read-only: %q", p, got))
		}
	}
	for _, p := range MaskedPaths {
		if got := v.Masked[p]; got != "" && got != "absent" && !refused(got) {
			bad = append(bad, fmt.Sprintf("%s is readable: %q", p, got))
		}
	}

	want("open files limit", v.Rlimits["Max open files"], strconv.FormatInt(w.OpenFiles, 10))
	want("file size limit", v.Rlimits["Max file size"], strconv.FormatInt(w.FileSizeBytes, 10))
	want("core file limit", v.Rlimits["Max core file size"], "0")
	if w.Kernel != "gvisor" {
		want("cgroup memory limit", v.Cgroup["memory"], strconv.FormatInt(w.MemoryBytes, 10))
		want("cgroup pids limit", v.Cgroup["pids"], strconv.FormatInt(w.Pids, 10))
		if cpus, ok := cpuQuota(v.Cgroup["cpu"]); !ok || cpus != float64(w.NanoCPUs)/1e9 {
			bad = append(bad, fmt.Sprintf("cgroup cpu quota is %q, want %v CPUs", v.Cgroup["cpu"], float64(w.NanoCPUs)/1e9))
		}
		if !slices.Equal(v.Interfaces, []string{"lo"}) {
			bad = append(bad, fmt.Sprintf("network interfaces are %v, want [lo]", v.Interfaces))
		}
	}
	if v.Routes != 0 {
		bad = append(bad, fmt.Sprintf("%d routes, want none", v.Routes))
	}
	if len(v.Sockets) > 0 {
		bad = append(bad, fmt.Sprintf("engine sockets inside: %v", v.Sockets))
	}

	identity := v.UIDMap == "0 0 4294967295"
	if w.OwnUserNamespace && (identity || v.UIDMap == "") {
		bad = append(bad, fmt.Sprintf("no user namespace of its own (uid_map %q)", v.UIDMap))
	}
	for ns, host := range w.HostNamespaces {
		if ns == "user" && !w.OwnUserNamespace {
			continue
		}
		if got := v.Namespaces[ns]; got == "" || got == host {
			bad = append(bad, fmt.Sprintf("the %s namespace is %q, the host's is %q: want its own", ns, got, host))
		}
	}
	if v.PID1 == "" || v.PID1 == "systemd" || v.PID1 == "init" {
		bad = append(bad, fmt.Sprintf("pid 1 is %q: want the sandbox's own init", v.PID1))
	}
	return bad
}

// parseSize reads a tmpfs size option: bytes, or with k, m, g.
func parseSize(s string) int64 {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1<<10, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "m"):
		mult, s = 1<<20, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "g"):
		mult, s = 1<<30, strings.TrimSuffix(s, "g")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n * mult
}

// cpuQuota reads "QUOTA PERIOD" as CPUs.
func cpuQuota(s string) (float64, bool) {
	q, p, ok := strings.Cut(s, " ")
	qn, err1 := strconv.ParseFloat(q, 64)
	pn, err2 := strconv.ParseFloat(p, 64)
	if !ok || err1 != nil || err2 != nil || pn <= 0 {
		return 0, false
	}
	return float64(int64(qn/pn*1000+0.5)) / 1000, true
}

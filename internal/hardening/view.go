// Package hardening is the sandbox's hardening profile as one contract read
// back from inside: what a sandboxed process sees of its own confinement
// (View, read by Read through a System), and what every engine's sandbox
// must show for a spec (Want, Check).
//
// The profile is written once per engine (docker's HostConfig, containerd's
// OCI spec, the pod spec, the fake's model); this package is how each is
// proven the same way. In a real sandbox the supervisor reads the kernel
// (`sandboxer-supervisor probe`, OS); the fake serves the same files and
// calls from its model, so one Read and one Check run everywhere
// (internal/sandbox/sandboxtest.RunHardening).
package hardening

import (
	"encoding/json"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
)

// ProbeCommand is the supervisor's subcommand that prints the View of its
// own process as JSON on stdout.
const ProbeCommand = "probe"

// ExitFlag makes the probe exit 0 at once: the child it starts to try a
// new user namespace.
const ExitFlag = "--exit"

// System is what a sandboxed process can ask its kernel: read a file,
// follow a link, look at a path, and try a call the profile should refuse.
type System interface {
	ReadFile(path string) ([]byte, error)
	// ReadDir lists a directory's names.
	ReadDir(path string) ([]string, error)
	Readlink(path string) (string, error)
	// Stat reports a path's owner and permission bits.
	Stat(path string) (uid, gid int, mode fs.FileMode, err error)
	// Try makes one of the Calls and returns its error (nil: allowed).
	Try(call string) error
}

// Calls are the calls the profile refuses: a new user namespace (seccomp
// filters clone's namespace flags without CAP_SYS_ADMIN), the kernel keyring
// (seccomp-filtered outright) and a mount (no capability).
var Calls = []string{"clone-newuser", "keyctl", "mount"}

// EngineSockets are the control sockets of the engines, the kubelet's
// service-account token directory among them: none may be inside.
var EngineSockets = []string{
	"/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
	"/run/podman/podman.sock", "/var/run/crio/crio.sock", "/var/run/secrets/kubernetes.io/serviceaccount",
}

// MaskedPaths are kernel files a sandbox must not read (the engines mount
// /dev/null or an empty tmpfs over them); ReadonlyPaths are kernel trees it
// must not write. Both are the OCI defaults every engine applies.
var (
	MaskedPaths   = []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"}
	ReadonlyPaths = []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/irq"}
)

// View is what a sandboxed process sees of its own confinement.
type View struct {
	UID, GID   string // real ids, from /proc/self/status
	CapEff     string // capability sets, hexadecimal
	CapBnd     string
	CapAmb     string
	NoNewPrivs string // "1" when set
	Seccomp    string // "2": a filter
	// Refused is each of Calls with its error ("" when the call was allowed).
	Refused map[string]string
	// Mounts are /proc/self/mounts by target (the last mount on a target
	// is the one seen).
	Mounts map[string]Mount
	// Readonly are ReadonlyPaths with how each is: "ro" (mounted read-only),
	// "absent" (this kernel has none), or its mount options.
	Readonly map[string]string
	// Owners are the owner and mode of the writable directories, by path.
	Owners map[string]string
	// Rlimits are soft limits by /proc/self/limits' names ("Max open files").
	Rlimits map[string]string
	// Cgroup holds the limits as the process's cgroup shows them: memory
	// and pids in bytes and processes ("max" when none), cpu as
	// "QUOTA PERIOD" in microseconds.
	Cgroup     map[string]string
	Interfaces []string // network interfaces, from /proc/net/dev
	Routes     int      // IPv4 routes, from /proc/net/route
	Sockets    []string // EngineSockets present
	// Masked are MaskedPaths with what reading them gave: "" (nothing to
	// read), "absent" (this kernel has none), or what was read or refused.
	Masked map[string]string
	UIDMap string // /proc/self/uid_map, blanks squeezed
	// Namespaces are the process's namespace links ("pid:[4026531836]").
	Namespaces map[string]string
	PID1       string // pid 1's command name, from /proc/1/comm
}

// Mount is one line of /proc/self/mounts.
type Mount struct {
	Type    string
	Options string
}

// Option is a mount option's value ("size" → "16777216", "ro" → "ro"), or "".
func (m Mount) Option(name string) string {
	for _, o := range strings.Split(m.Options, ",") {
		k, v, ok := strings.Cut(o, "=")
		if k == name {
			if !ok {
				return k
			}
			return v
		}
	}
	return ""
}

// Read reads a View through sys, for a process whose working directory is
// workdir. What cannot be read is left empty, for Check to name.
func Read(sys System, workdir string) View {
	v := View{Refused: map[string]string{}, Mounts: map[string]Mount{}, Owners: map[string]string{},
		Rlimits: map[string]string{}, Cgroup: map[string]string{}, Masked: map[string]string{}, Readonly: map[string]string{}, Namespaces: map[string]string{}}
	status := fields(sys, "/proc/self/status")
	v.UID, v.GID = first(status["Uid"]), first(status["Gid"])
	v.CapEff, v.CapBnd, v.CapAmb = status["CapEff"], status["CapBnd"], status["CapAmb"]
	v.NoNewPrivs, v.Seccomp = status["NoNewPrivs"], status["Seccomp"]

	if b, err := sys.ReadFile("/proc/self/mounts"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 4 {
				v.Mounts[f[1]] = Mount{Type: f[2], Options: f[3]}
			}
		}
	}
	if b, err := sys.ReadFile("/proc/self/limits"); err == nil {
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if len(line) > 26 {
				if f := strings.Fields(line[26:]); len(f) > 0 {
					v.Rlimits[strings.TrimSpace(line[:26])] = f[0]
				}
			}
		}
	}
	readCgroup(sys, &v)
	if b, err := sys.ReadFile("/proc/net/dev"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
				v.Interfaces = append(v.Interfaces, strings.TrimSpace(name))
			}
		}
	}
	if b, err := sys.ReadFile("/proc/net/route"); err == nil {
		v.Routes = max(0, len(strings.Split(strings.TrimSpace(string(b)), "\n"))-1)
	}
	for _, p := range EngineSockets {
		if _, _, _, err := sys.Stat(p); err == nil {
			v.Sockets = append(v.Sockets, p)
		}
	}
	for _, p := range ReadonlyPaths {
		m, mounted := v.Mounts[p]
		_, _, _, err := sys.Stat(p)
		switch {
		case mounted && m.Option("ro") == "ro":
			v.Readonly[p] = "ro"
		case mounted:
			v.Readonly[p] = m.Options
		case errors.Is(err, fs.ErrNotExist):
			v.Readonly[p] = "absent"
		default:
			v.Readonly[p] = "not mounted over"
		}
	}
	for _, p := range MaskedPaths {
		b, err := sys.ReadFile(p)
		switch {
		case errors.Is(err, syscall.EISDIR):
			v.Masked[p] = masked(sys, p)
		case errors.Is(err, fs.ErrNotExist):
			v.Masked[p] = "absent"
		case err != nil:
			v.Masked[p] = err.Error()
		default:
			v.Masked[p] = string(b[:min(len(b), 64)])
		}
	}
	if b, err := sys.ReadFile("/proc/self/uid_map"); err == nil {
		v.UIDMap = strings.Join(strings.Fields(string(b)), " ")
	}
	for _, ns := range []string{"pid", "user", "net", "mnt", "ipc", "uts", "cgroup"} {
		if l, err := sys.Readlink("/proc/self/ns/" + ns); err == nil {
			v.Namespaces[ns] = l
		}
	}
	if b, err := sys.ReadFile("/proc/1/comm"); err == nil {
		v.PID1 = strings.TrimSpace(string(b))
	}
	for _, p := range []string{"/tmp", workdir} {
		if uid, gid, mode, err := sys.Stat(p); err == nil {
			perm := uint64(mode.Perm())
			if mode&fs.ModeSticky != 0 {
				perm |= 0o1000
			}
			v.Owners[p] = strconv.Itoa(uid) + ":" + strconv.Itoa(gid) + " " + strconv.FormatUint(perm, 8)
		}
	}
	for _, c := range Calls {
		if err := sys.Try(c); err != nil {
			v.Refused[c] = err.Error()
		} else {
			v.Refused[c] = ""
		}
	}
	return v
}

// masked reads a directory mounted over: "" when it is empty.
func masked(sys System, dir string) string {
	names, err := sys.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	return strings.Join(names, " ")
}

// readCgroup reads the limits from cgroup v2's files, else v1's.
func readCgroup(sys System, v *View) {
	read := func(p string) string {
		b, err := sys.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	if mem := read("/sys/fs/cgroup/memory.max"); mem != "" {
		v.Cgroup["memory"], v.Cgroup["pids"], v.Cgroup["cpu"] = mem, read("/sys/fs/cgroup/pids.max"), read("/sys/fs/cgroup/cpu.max")
		return
	}
	v.Cgroup["memory"] = read("/sys/fs/cgroup/memory/memory.limit_in_bytes")
	v.Cgroup["pids"] = read("/sys/fs/cgroup/pids/pids.max")
	q, p := read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), read("/sys/fs/cgroup/cpu/cpu.cfs_period_us")
	if q != "" || p != "" {
		v.Cgroup["cpu"] = q + " " + p
	}
}

// fields reads "Name: value" lines.
func fields(sys System, path string) map[string]string {
	out := map[string]string{}
	b, err := sys.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, val, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(val)
		}
	}
	return out
}

func first(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// Marshal is the View as the probe prints it.
func (v View) Marshal() []byte {
	b, _ := json.Marshal(v)
	return b
}

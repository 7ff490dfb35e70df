package program

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
	"github.com/sandboxer/sandboxer/internal/tunnel"
)

// clone3 answers ENOSYS, not EPERM, in every process the supervisor starts.
// The engines' default seccomp profile refuses clone3 (its flags are behind
// a pointer, out of a filter's reach) with ENOSYS, so that glibc falls back
// to clone, whose flags the profile checks. gVisor applies the engine's
// profile (runsc --oci-seccomp) but answers every refusal with EPERM, and
// glibc does not fall back from EPERM: no thread could start (Python's
// threading, node, a JVM). A filter of our own, evaluated first, answers
// ENOSYS for clone3 alone. It is added only where a filter is already on:
// a sandbox the engine left without one stays so, and the hardening probe
// still sees that.

// sysClone3 is clone3's number on amd64 and arm64 alike.
const sysClone3 = 435

// clone3Env tells the daemon's job supervisors that the filter they
// inherit is in place, so they add none again (spawn sets it for them
// alone: no job or install sees it).
const clone3Env = "SANDBOXER_CLONE3_NOSYS"

// startsPrograms says whether a supervisor run with args starts programs
// other than itself, which need the filter: a job's supervisor (no
// arguments, or prestart), the workspace daemon and the install tunnel.
// The helpers (fs, tar, relay, probe, …) start none; the shim inherits it.
func startsPrograms(args []string) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0] {
	case proto.DaemonCommand, proto.PrestartCommand, tunnel.Command:
		return true
	}
	return false
}

// auditArch is this architecture's AUDIT_ARCH_* value (0: unknown here,
// no filter added).
func auditArch() uint32 {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64
	}
	return 0
}

// clone3NoSys adds the filter to every thread of this process (and so to
// all it starts), when the process already runs under a seccomp filter.
func clone3NoSys() error {
	if os.Getenv(clone3Env) != "" {
		return nil
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil || !strings.Contains(string(status), "\nSeccomp:\t2") {
		return nil
	}
	arch := auditArch()
	if arch == 0 {
		return nil
	}
	const (
		offNr   = 0 // struct seccomp_data: nr, arch, ...
		offArch = 4
	)
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offArch},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 3, K: arch},
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offNr},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: sysClone3},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// NoNewPrivs is set in every sandbox (no-new-privileges); TSYNC puts
	// the filter on the Go runtime's every thread.
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}

// execMain runs argv with clone3 answering ENOSYS (the engine's plain execs
// on gVisor: installs and the like, which the supervisor does not start).
func execMain(argv []string) int {
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "sandboxer-supervisor exec: no command")
		return 2
	}
	if err := clone3NoSys(); err != nil {
		fmt.Fprintf(os.Stderr, "sandboxer-supervisor exec: %v\n", err)
		return codeCannotExec
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandboxer-supervisor exec: %v\n", err)
		return 127
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "sandboxer-supervisor exec: %s: %v\n", argv[0], err)
	return 126
}

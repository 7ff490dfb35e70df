package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// The hardening profile as an OCI spec: the same defaults the Docker
// runtime asks its engine for (docs/architecture.md, "The hardening
// profile"), written out because containerd adds none of its own.
const (
	tmpPath        = "/tmp"
	homePath       = "/home/sandbox"
	homeSize       = 64 << 20
	defaultWorkDir = "/workspace"
	supervisorPath = "/usr/local/bin/sandboxer-supervisor"
	sandboxUID     = 1000
	sandboxGID     = 1000
	// oomScoreAdj: the kernel should pick a sandbox before the host's own processes.
	oomScoreAdj = 500
	// cpuPeriod is the CFS period the CPU quota is a share of (Docker's).
	cpuPeriod = 100000
)

// specOpts are spec's sandbox as OCI spec options on top of containerd's
// default Linux spec (its own pid, ipc, uts, mount and network namespaces;
// /proc, /sys read-only, /dev, /dev/shm capped at 64 MiB; masked and
// read-only kernel paths): the image's environment, the supervisor as the
// process, uid 1000, no capabilities, no new privileges, the default seccomp
// profile, a read-only root with capped tmpfs where jobs write, limits,
// rlimits and its own cgroup namespace. The network namespace is new and
// has only its loopback: no network at all.
func specOpts(img oci.Image, spec sandbox.Spec) []oci.SpecOpts {
	l := spec.Limits
	workdir := spec.WorkDir
	if workdir == "" {
		workdir = defaultWorkDir
	}
	args := []string{supervisorPath}
	if spec.Kind == sandbox.KindPool && spec.Prestart != nil {
		// A warm sandbox starts its job's program ahead (proto.Prestart).
		if pre, err := json.Marshal(proto.Prestart{Argv: spec.Prestart.Argv, EarlyEnv: spec.Prestart.EarlyEnv, LateEnv: spec.Prestart.LateEnv}); err == nil {
			args = []string{supervisorPath, proto.PrestartCommand, string(pre)}
		}
	}
	mounts := []specs.Mount{
		// Its own cgroup (the namespace's view), read-only: the supervisor
		// reads the job's usage and OOM kills there.
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"ro", "nosuid", "noexec", "nodev"}},
		tmpfs(tmpPath, l.TmpBytes, false),
		tmpfs(homePath, homeSize, true),
	}
	if workdir != tmpPath && workdir != homePath {
		mounts = append(mounts, tmpfs(workdir, l.WorkdirBytes, true))
	}
	for _, m := range spec.Mounts {
		// Only granted host directories (checked by the caller): read-only,
		// and private, so nothing mounted under them later shows inside.
		mounts = append(mounts, specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source,
			Options: []string{"rbind", "ro", "nosuid", "nodev", "rprivate"}})
	}
	opts := []oci.SpecOpts{
		oci.WithImageConfig(img),
		oci.WithProcessArgs(args...),
		oci.WithProcessCwd(workdir),
		oci.WithUIDGID(sandboxUID, sandboxGID),
		oci.WithEnv([]string{"HOME=" + homePath}),
		oci.WithCapabilities([]string{}),
		oci.WithNoNewPrivileges,
		seccomp.WithDefaultProfile(),
		oci.WithRootFSReadonly(),
		oci.WithMounts(mounts),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.CgroupNamespace}),
		withLimits(l),
		withRlimits(l),
	}
	return opts
}

// tmpfs is a capped tmpfs at path: the sandbox user's (owned) or
// everyone's with the sticky bit, as Docker's --tmpfs gives them.
func tmpfs(path string, size int64, owned bool) specs.Mount {
	o := []string{"rw", "exec", "nosuid", "nodev", "size=" + strconv.FormatInt(size, 10)}
	if owned {
		o = append(o, fmt.Sprintf("uid=%d", sandboxUID), fmt.Sprintf("gid=%d", sandboxGID), "mode=0755")
	} else {
		o = append(o, "mode=1777")
	}
	return specs.Mount{Destination: path, Type: "tmpfs", Source: "tmpfs", Options: o}
}

// withLimits sets memory (swap equal: none used), CPU quota and pids.
func withLimits(l sandbox.Limits) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		s.Linux.Resources = resources(l, s.Linux.Resources)
		adj := oomScoreAdj
		s.Process.OOMScoreAdj = &adj
		return nil
	}
}

// resources are l's memory, CPU and pids limits as OCI resources (on top
// of base, which may be nil).
func resources(l sandbox.Limits, base *specs.LinuxResources) *specs.LinuxResources {
	r := base
	if r == nil {
		r = &specs.LinuxResources{}
	}
	if l.MemoryBytes > 0 {
		mem := l.MemoryBytes
		if r.Memory == nil {
			r.Memory = &specs.LinuxMemory{}
		}
		r.Memory.Limit, r.Memory.Swap = &mem, &mem
	}
	if l.NanoCPUs > 0 {
		quota := l.NanoCPUs * cpuPeriod / 1e9
		period := uint64(cpuPeriod)
		if r.CPU == nil {
			r.CPU = &specs.LinuxCPU{}
		}
		r.CPU.Quota, r.CPU.Period = &quota, &period
	}
	if l.Pids > 0 {
		pids := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return r
}

// withRlimits: open files and file size as the limits say, no core dumps.
func withRlimits(l sandbox.Limits) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		set := map[string]uint64{"RLIMIT_CORE": 0}
		if l.OpenFiles > 0 {
			set["RLIMIT_NOFILE"] = uint64(l.OpenFiles)
		}
		if l.FileSizeBytes > 0 {
			set["RLIMIT_FSIZE"] = uint64(l.FileSizeBytes)
		}
		kept := s.Process.Rlimits[:0]
		for _, r := range s.Process.Rlimits {
			if _, ok := set[r.Type]; !ok {
				kept = append(kept, r)
			}
		}
		for _, typ := range []string{"RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_FSIZE"} {
			if v, ok := set[typ]; ok {
				kept = append(kept, specs.POSIXRlimit{Type: typ, Hard: v, Soft: v})
			}
		}
		s.Process.Rlimits = kept
		return nil
	}
}

package policy

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/sandboxer/sandboxer/internal/supervisor/proto"

	"github.com/sandboxer/sandboxer/internal/egress"
	"github.com/sandboxer/sandboxer/internal/secret"
)

// Sanity bounds. They exist to catch typos (and int64 overflow when a value is
// scaled to bytes or nanoseconds), not to second-guess the operator.
const (
	maxTimeoutS     = 86400            // limits.timeout_s.max: one day
	minMemoryMB     = 16               // below this containers fail to start
	maxMB           = 1 << 20          // any *_mb: 1 TiB
	maxCPUs         = 64.0             // limits.cpus.max
	minPids         = 16               // a shell and a command need a few
	maxPids         = 1 << 22          // Linux's pid_max ceiling
	minOpenFiles    = 16               // stdin/out/err plus a few
	maxOpenFiles    = 1 << 20          // Linux's default fs.nr_open
	maxConcurrent   = 1024             // jobs.max_concurrent
	maxQueued       = 1 << 20          // jobs.max_queued
	maxWaitS        = 86400            // jobs.max_wait_s
	maxSeconds      = 10 * 365 * 86400 // jobs.retention_s, jobs.cleanup_interval_s
	maxBytes        = 1 << 40          // output.*: 1 TiB
	maxPoolSize     = 64               // pool.size.<language>
	maxPoolParallel = 16               // pool.parallel
	maxWorkspaces   = 1024             // workspaces.max
	maxIdleS        = 7 * 86400        // sessions.idle_timeout_s
)

var (
	// LanguageNamePattern is what a key under languages must match.
	LanguageNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_+-]{0,31}$`)
	// ImagePattern is the (strict) image reference grammar accepted under
	// languages: an optional lowercase registry host[:port]/, a lowercase
	// repository path, an optional :tag and an optional @sha256:digest.
	ImagePattern = regexp.MustCompile(`^` +
		`(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*(?::[0-9]{1,5})?/)?` + // registry host
		`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` + // repository path
		`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` + // tag
		`(?:@sha256:[a-f0-9]{64})?$`) // digest
	runtimePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	// goEnvPattern is a plausible GOPROXY or GOSUMDB value: no quotes or
	// control characters (it reaches an installer's environment).
	goEnvPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.:/@+,|_~%-]{0,511}( https?://[A-Za-z0-9.:/_~%-]+)?$`)
	// networkNamePattern is a Docker network name (workspaces.install_network).
	networkNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	// pipIndexPattern is an index or registry URL (pip_index_url,
	// npm_registry_url): http(s), no spaces or quotes.
	pipIndexPattern = regexp.MustCompile(`^https?://[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]{1,1000}$`)
	// CommandNamePattern is what an entry of block.commands must match: a
	// command name, no path (the same grammar as internal/blocklist).
	CommandNamePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._+-]{0,63}$`)
)

// RuntimeRunsc is gVisor's OCI runtime name.
const RuntimeRunsc = "runsc"

// MinPidsRunsc is the smallest pids limit a gVisor sandbox starts with: its
// Sentry's and gofer's threads are in the container's pids cgroup (seen: 32
// exits with status 2, or hangs in create with --init; 64 works).
const MinPidsRunsc = 64

// MinPidsRunscRestore is the least pids limit under runsc with
// workspaces.hibernate_after_s: a restored sandbox makes more of gVisor's
// own threads (seen: at 64 every exec after a restore fails, ENOMEM from
// systrap's stub clone; 128 works).
const MinPidsRunscRestore = 128

// minPidsRunsc is the least pids limit of a sandbox under runsc.
func (p *Policy) minPidsRunsc() int64 {
	if p.Workspaces.HibernateAfterS > 0 {
		return MinPidsRunscRestore
	}
	return MinPidsRunsc
}

// problems collects validation errors, each prefixed "policy: <key>: ".
type problems []error

func (ps *problems) add(key, format string, args ...any) {
	*ps = append(*ps, fmt.Errorf("policy: %s: %s", key, fmt.Sprintf(format, args...)))
}

// intIn checks lo <= v <= hi.
func (ps *problems) intIn(key string, v, lo, hi int64) bool {
	switch {
	case v < lo && lo == 1:
		ps.add(key, "must be > 0, got %d", v)
	case v < lo:
		ps.add(key, "must be >= %d, got %d", lo, v)
	case v > hi:
		ps.add(key, "must be <= %d, got %d", hi, v)
	default:
		return true
	}
	return false
}

func (ps *problems) rangeIn(key string, r Range, lo, hi int64) {
	okD := ps.intIn(key+".default", r.Default, lo, hi)
	okM := ps.intIn(key+".max", r.Max, lo, hi)
	if okD && okM && r.Max < r.Default {
		ps.add(key+".max", "must be >= %s.default (%d), got %d", key, r.Default, r.Max)
	}
}

func (ps *problems) floatIn(key string, v, lo, hi float64) bool {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		ps.add(key, "must be a finite number, got %v", v)
	case v <= 0:
		ps.add(key, "must be > 0, got %v", v)
	case v < lo:
		ps.add(key, "must be >= %v, got %v", lo, v)
	case v > hi:
		ps.add(key, "must be <= %v, got %v", hi, v)
	default:
		return true
	}
	return false
}

// Validate checks the whole policy and returns every problem found (joined
// with errors.Join, one line each), each naming its YAML key, e.g.
//
//	policy: limits.memory_mb.max: must be >= limits.memory_mb.default (512), got 256
//
// It returns nil for a usable policy.
func (p *Policy) Validate() error {
	var ps problems

	l := p.Limits
	ps.rangeIn("limits.timeout_s", l.TimeoutS, 1, maxTimeoutS)
	ps.rangeIn("limits.memory_mb", l.MemoryMB, minMemoryMB, maxMB)
	okD := ps.floatIn("limits.cpus.default", l.CPUs.Default, minCPUs, maxCPUs)
	okM := ps.floatIn("limits.cpus.max", l.CPUs.Max, minCPUs, maxCPUs)
	if okD && okM && l.CPUs.Max < l.CPUs.Default {
		ps.add("limits.cpus.max", "must be >= limits.cpus.default (%v), got %v", l.CPUs.Default, l.CPUs.Max)
	}
	ps.rangeIn("limits.pids", l.Pids, minPids, maxPids)
	ps.intIn("limits.open_files", l.OpenFiles, minOpenFiles, maxOpenFiles)
	ps.intIn("limits.file_size_mb", l.FileSizeMB, 1, maxMB)
	ps.intIn("limits.tmp_mb", l.TmpMB, 1, maxMB)
	ps.intIn("limits.workdir_mb", l.WorkdirMB, 1, maxMB)

	o := p.Output
	okI := ps.intIn("output.inline_bytes", o.InlineBytes, 1, maxBytes)
	okB := ps.intIn("output.max_bytes_per_job", o.MaxBytesPerJob, 1, maxBytes)
	if okI && okB && o.MaxBytesPerJob < o.InlineBytes {
		ps.add("output.max_bytes_per_job", "must be >= output.inline_bytes (%d), got %d", o.InlineBytes, o.MaxBytesPerJob)
	}
	ps.intIn("output.ring_bytes", o.RingBytes, 1, maxBytes)
	ps.intIn("output.returned_bytes_per_job", o.ReturnedBytesPerJob, 0, proto.MaxReturnBytes)
	if o.EngineLog != EngineLogLocal && o.EngineLog != EngineLogNone {
		ps.add("output.engine_log", "must be %q or %q, got %q", EngineLogLocal, EngineLogNone, o.EngineLog)
	}

	j := p.Jobs
	ps.intIn("jobs.max_concurrent", int64(j.MaxConcurrent), 1, maxConcurrent)
	ps.intIn("jobs.max_queued", int64(j.MaxQueued), 0, maxQueued)
	ps.intIn("jobs.retention_s", j.RetentionS, 1, maxSeconds)
	ps.intIn("jobs.cleanup_interval_s", j.CleanupIntervalS, 1, maxSeconds)
	okW := ps.intIn("jobs.max_wait_s", j.MaxWaitS, 1, maxWaitS)
	if ps.intIn("jobs.default_wait_s", j.DefaultWaitS, 0, maxWaitS) && okW && j.DefaultWaitS > j.MaxWaitS {
		ps.add("jobs.default_wait_s", "must be <= jobs.max_wait_s (%d), got %d", j.MaxWaitS, j.DefaultWaitS)
	}

	switch p.Network {
	case NetworkNone, NetworkBridge, NetworkEgress:
	default:
		ps.add("network", "must be %q, %q or %q, got %q", NetworkNone, NetworkBridge, NetworkEgress, p.Network)
	}
	if (p.Network == NetworkEgress || p.Workspaces.InstallNetwork == NetworkEgress) && len(p.Egress.Allow) == 0 {
		ps.add("egress.allow", "must name at least one host with network: egress or workspaces.install_network: egress")
	}
	if _, err := egress.ParseList(p.Egress.Allow); err != nil {
		ps.add("egress.allow", "%v", err)
	}
	if _, err := egress.ParseHosts(p.Egress.Hosts); err != nil {
		ps.add("egress.hosts", "%v", err)
	}
	p.validateSecrets(&ps)
	for _, rk := range p.Runtimes() {
		if min := p.minPidsRunsc(); rk.Runtime == RuntimeRunsc && l.Pids.Default < min {
			ps.add("limits.pids.default", "must be at least %d with %s runsc%s: gVisor's own threads count against the pids limit, and below that containers fail to start or hang; got %d", min, rk.Key,
				map[bool]string{true: " and workspaces.hibernate_after_s (a restored sandbox makes more of them)"}[min == MinPidsRunscRestore], l.Pids.Default)
			break
		}
	}
	if p.Runtime != "" && !runtimePattern.MatchString(p.Runtime) {
		ps.add("runtime", "invalid OCI runtime name %q (want letters, digits, '.', '_', '-'; or empty for the engine default)", p.Runtime)
	}
	p.validateBackend(&ps)
	p.validateTemplates(&ps)

	names := make([]string, 0, len(p.Languages))
	for name := range p.Languages {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		key := "languages." + name
		if !LanguageNamePattern.MatchString(name) {
			ps.add(key, "invalid language name %q (want %s)", name, LanguageNamePattern)
			continue
		}
		img := p.Languages[name].Image
		switch {
		case img == "":
			ps.add(key+".image", "must be set")
		case len(img) > 255 || !ImagePattern.MatchString(img):
			ps.add(key+".image", "invalid image reference %q (want e.g. python:3.12-slim or registry.example.com/team/python:3.12: lowercase repository path, optional :tag, optional @sha256:digest)", img)
		}
	}

	pool := make([]string, 0, len(p.Pool.Size))
	for name := range p.Pool.Size {
		pool = append(pool, name)
	}
	sort.Strings(pool)
	for _, name := range pool {
		if !LanguageNamePattern.MatchString(name) {
			ps.add("pool.size."+name, "invalid language name %q (want %s)", name, LanguageNamePattern)
			continue
		}
		ps.intIn("pool.size."+name, int64(p.Pool.Size[name]), 0, maxPoolSize)
	}
	ps.intIn("pool.parallel", int64(p.Pool.Parallel), 1, maxPoolParallel)
	ps.intIn("pool.max_total", int64(p.Pool.MaxTotal), 0, 4*maxPoolSize)
	ps.intIn("pool.follow_idle_s", p.Pool.FollowIdleS, 10, maxSeconds)
	ps.intIn("workspaces.max", int64(p.Workspaces.Max), 0, maxWorkspaces)
	ps.intIn("workspaces.idle_stop_s", p.Workspaces.IdleStopS, 0, maxSeconds)
	ps.intIn("workspaces.pause_after_s", p.Workspaces.PauseAfterS, 0, maxSeconds)
	ps.intIn("workspaces.hibernate_after_s", p.Workspaces.HibernateAfterS, 0, maxSeconds)
	if h, idle := p.Workspaces.HibernateAfterS, p.Workspaces.IdleStopS; h > 0 && idle > 0 && h >= idle {
		ps.add("workspaces.hibernate_after_s", "must be less than workspaces.idle_stop_s (%d), or an idle workspace is stopped before it is hibernated; got %d", idle, h)
	}
	ps.intIn("workspaces.disk_mb", p.Workspaces.DiskMB, 1, maxMB)
	ps.intIn("workspaces.max_ports", int64(p.Workspaces.MaxPorts), 0, 64)
	if f := p.HTTP.TokenFile; f != "" && (!filepath.IsAbs(f) || strings.ContainsAny(f, "\x00\n")) {
		ps.add("http.token_file", "%q is not an absolute path of a token file", f)
	}
	for i, h := range p.HTTP.Hosts {
		if !hostPattern.MatchString(h) {
			ps.add(fmt.Sprintf("http.hosts[%d]", i), "%q is not a host name (letters, digits, '.', '-', an IP, or [IPv6], with an optional :port)", h)
		}
	}
	for i, e := range p.HTTP.TrustedProxies {
		if _, err := parsePrefix(e); err != nil {
			ps.add(fmt.Sprintf("http.trusted_proxies[%d]", i), "%q is not an address or a CIDR range (10.0.0.5, 10.0.0.0/8, fd00::/8)", e)
		}
	}
	if !networkNamePattern.MatchString(p.Workspaces.InstallNetwork) || p.Workspaces.InstallNetwork == "host" {
		ps.add("workspaces.install_network", "%q is not a Docker network name (bridge, a user-defined network, or none to forbid installs; host is refused)", p.Workspaces.InstallNetwork)
	}
	if f := p.Workspaces.InstallCAFile; f != "" && (!filepath.IsAbs(f) || strings.ContainsAny(f, "\x00\n")) {
		ps.add("workspaces.install_ca_file", "%q is not an absolute host path of a PEM file", f)
	}
	if u := p.Workspaces.PipIndexURL; u != "" && !pipIndexPattern.MatchString(u) {
		ps.add("workspaces.pip_index_url", "%q is not an http(s) URL", u)
	}
	if u := p.Workspaces.NpmRegistryURL; u != "" && !pipIndexPattern.MatchString(u) {
		ps.add("workspaces.npm_registry_url", "%q is not an http(s) URL", u)
	}
	if v := p.Workspaces.InstallGoProxy; !goEnvPattern.MatchString(v) {
		ps.add("workspaces.install_goproxy", "%q is not a GOPROXY list (URLs, direct or off, separated by , or |)", v)
	}
	if v := p.Workspaces.InstallGoSumDB; !goEnvPattern.MatchString(v) {
		ps.add("workspaces.install_gosumdb", "%q is not a GOSUMDB value (off, or a checksum database name and optional URL)", v)
	}

	p.validateMounts(&ps)

	for i, dir := range p.Scripts.EnvFileDirs {
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || dir == "/" {
			ps.add(fmt.Sprintf("scripts.env_file_dirs[%d]", i), "%q must be a clean absolute directory other than /", dir)
		}
	}
	ps.rangeIn("sessions.idle_timeout_s", p.Sessions.IdleTimeoutS, 1, maxIdleS)
	ps.intIn("approvals.expire_s", int64(p.Approvals.ExpireS), 30, 86400)

	if u := p.Scripts.PipIndexURL; u != "" && !pipIndexPattern.MatchString(u) {
		ps.add("scripts.pip_index_url", "%q is not an http(s) URL", u)
	}
	ps.intIn("scripts.dependency_cache_mb", p.Scripts.DependencyCacheMB, 1, maxMB)
	ps.intIn("scripts.go_build_cache_mb", p.Scripts.GoBuildCacheMB, 0, maxMB)
	ps.intIn("scripts.dependency_install_timeout_s", p.Scripts.DependencyInstallTimeoutS, 1, 3600)
	if f := p.Scripts.InstallCAFile; f != "" && (!filepath.IsAbs(f) || filepath.Clean(f) != f) {
		ps.add("scripts.install_ca_file", "%q must be a clean absolute path", f)
	}

	seen := map[string]bool{}
	for i, c := range p.Block.Commands {
		key := fmt.Sprintf("block.commands[%d]", i)
		switch {
		case !CommandNamePattern.MatchString(c):
			ps.add(key, "%q is not a command name (letters, digits, '.', '_', '+', '-'; no path: /usr/bin/rm is blocked as rm)", c)
		case seen[c]:
			ps.add(key, "%q is listed twice", c)
		}
		seen[c] = true
	}

	return errors.Join(ps...)
}

// hostPattern is an entry of http.hosts: a name or an address, with an
// optional port.
var hostPattern = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)

// mountNamePattern is a granted mount's name (mounts[i].name).
var mountNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// hostOnly are the places no granted mount may be, lie inside or hold:
// the kernel's and the system's (/proc, /sys, /dev, /run with the engines'
// sockets, /etc) and the engines' own data. The server adds its state
// directory, its binary and its engine's socket (MountSourceProblem's
// forbidden). "/" is refused too (it holds them all).
var hostOnly = []string{"/proc", "/sys", "/dev", "/run", "/var/run", "/etc",
	"/var/lib/docker", "/var/lib/containers", "/var/lib/containerd", "/var/lib/kubelet", "/var/lib/etcd",
	"/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock", "/run/containerd/containerd.sock"}

// validateMounts: each grant names a clean absolute directory that exists,
// that resolves (through every link) to none of the host's own places
// (hostOnly); names are unique.
func (p *Policy) validateMounts(ps *problems) {
	seen := map[string]bool{}
	for i, m := range p.Mounts {
		key := fmt.Sprintf("mounts[%d]", i)
		if !mountNamePattern.MatchString(m.Name) {
			ps.add(key+".name", "%q is not a mount name (%s)", m.Name, mountNamePattern)
		} else if seen[m.Name] {
			ps.add(key+".name", "%q is granted twice", m.Name)
		}
		seen[m.Name] = true
		if _, problem := ResolveMountSource(m.Source, nil); problem != "" {
			ps.add(key+".source", "%s", problem)
		}
	}
}

// MountSourceProblem says what is wrong with a mount's source, if anything
// (ResolveMountSource's problem).
func MountSourceProblem(source string, forbidden []string) string {
	_, problem := ResolveMountSource(source, forbidden)
	return problem
}

// ResolveMountSource resolves a mount's source through every link (of the
// path and of each of its parents) and says what is wrong with it, if
// anything: it must be a clean absolute path to a directory, and neither
// it nor what it resolves to may be "/", or be, lie inside or hold one of
// the host's own places (hostOnly) or of forbidden (the server's state
// directory, binary and engine socket; each resolved too). It runs when the
// policy loads and again at each use, so a link swapped in between is
// caught; the resolved path is what is then mounted.
func ResolveMountSource(source string, forbidden []string) (string, string) {
	if !filepath.IsAbs(source) || filepath.Clean(source) != source || strings.ContainsAny(source, "\x00\n:") {
		return "", fmt.Sprintf("%q must be a clean absolute path (no ':')", source)
	}
	real, err := filepath.EvalSymlinks(source)
	if err != nil {
		return "", fmt.Sprintf("%q: %v", source, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", fmt.Sprintf("%q: %v", source, err)
	}
	if !st.IsDir() {
		return "", fmt.Sprintf("%q is not a directory", source)
	}
	via := ""
	if real != source {
		via = fmt.Sprintf(" (it resolves to %s)", real)
	}
	if real == "/" || source == "/" {
		return "", fmt.Sprintf("%q%s is the host's root: grant the project's own directory", source, via)
	}
	for _, f := range append(append([]string{}, hostOnly...), forbidden...) {
		if f == "" {
			continue
		}
		places := []string{f}
		if r, err := filepath.EvalSymlinks(f); err == nil && r != f {
			places = append(places, r)
		}
		for _, place := range places {
			for _, p := range []string{source, real} {
				switch {
				case p == place:
					return "", fmt.Sprintf("%q%s is %s, which no sandbox may see", source, via, f)
				case strings.HasPrefix(p, place+"/"):
					return "", fmt.Sprintf("%q%s lies inside %s, which no sandbox may see", source, via, f)
				case strings.HasPrefix(place, p+"/"):
					return "", fmt.Sprintf("%q%s holds %s, which no sandbox may see", source, via, f)
				}
			}
		}
	}
	return real, ""
}

// namespacePattern is a Kubernetes namespace name (an RFC 1123 label).
var namespacePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// containerdNamespacePattern is a containerd namespace name.
var containerdNamespacePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,75}$`)

// validateBackend checks the kubernetes and containerd keys' syntax. What
// the backend itself allows (its networks, a runtime, templates) is its row
// of internal/backend's table, which the configuration checks too.
func (p *Policy) validateBackend(ps *problems) {
	k := p.Kubernetes
	if k.Namespace != "" && !namespacePattern.MatchString(k.Namespace) {
		ps.add("kubernetes.namespace", "invalid namespace %q (want lowercase letters, digits and '-', at most 63, starting and ending with a letter or digit)", k.Namespace)
	}
	if k.Kubeconfig != "" && !filepath.IsAbs(k.Kubeconfig) {
		ps.add("kubernetes.kubeconfig", "must be an absolute path, got %q", k.Kubeconfig)
	}
	ps.intIn("kubernetes.mount_mb", k.MountMB, 1, maxMB)
	c := p.Containerd
	if c.Address != "" && !filepath.IsAbs(c.Address) {
		ps.add("containerd.address", "must be an absolute path to containerd's socket, got %q", c.Address)
	}
	if c.Namespace != "" && !containerdNamespacePattern.MatchString(c.Namespace) {
		ps.add("containerd.namespace", "invalid namespace %q (want letters, digits, '.', '_' and '-', at most 76, starting with a letter or digit)", c.Namespace)
	}
}

// reservedSecretName says whether name is a variable the server sets in a
// sandbox itself (the image's HOME and PATH, the proxy's and its CA's): a
// secret of that name would be overwritten or would break the proxy path.
func reservedSecretName(name string) bool {
	if name == "HOME" || name == "PATH" || strings.HasPrefix(name, "SANDBOXER_") {
		return true
	}
	for _, kv := range append(egress.ProxyEnv(""), egress.CAEnv()...) {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			return true
		}
	}
	return false
}

// validateSecrets: each secret has a valid name, exactly one source, and
// hosts within egress.allow (the proxy is the only place a value goes).
func (p *Policy) validateSecrets(ps *problems) {
	ceiling, err := egress.ParseList(p.Egress.Allow)
	if err != nil {
		ceiling = nil
	}
	for _, name := range p.SecretNames() {
		s := p.Secrets[name]
		key := "secrets." + name
		switch {
		case !secret.NamePattern.MatchString(name):
			ps.add(key, "invalid secret name %q: it becomes an environment variable (want %s)", name, secret.NamePattern)
			continue
		case reservedSecretName(name):
			ps.add(key, "%s is a variable the server sets in sandboxes itself: name the secret otherwise", name)
		}
		switch {
		case (s.ValueFile == "") == (s.Env == ""):
			ps.add(key, "set exactly one of value_file and env")
		case s.ValueFile != "" && !filepath.IsAbs(s.ValueFile):
			ps.add(key+".value_file", "must be an absolute path, got %q", s.ValueFile)
		case s.Env != "" && !secret.NamePattern.MatchString(s.Env):
			ps.add(key+".env", "invalid variable name %q", s.Env)
		}
		if len(s.Hosts) == 0 {
			ps.add(key+".hosts", "must name at least one host (egress.allow syntax): the value goes only to these")
			continue
		}
		if len(p.Egress.Allow) == 0 {
			ps.add(key+".hosts", "egress.allow is empty: a secret's hosts must be within it")
			continue
		}
		if _, err := egress.Narrow(ceiling, s.Hosts); err != nil {
			ps.add(key+".hosts", "%v", err)
		}
		for i, t := range s.Tenants {
			if strings.TrimSpace(t) == "" {
				ps.add(fmt.Sprintf("%s.tenants[%d]", key, i), "must be a token name, got an empty string")
			}
		}
	}
}

// Package policy is what the operator allows: defaults and ceilings for job
// limits, output sizes, job-manager settings, the default network mode, the OCI
// runtime and optional per-language image overrides.
//
// The intended sequence is
//
//	p := policy.Default()          // or: p, err := policy.Load(path)
//	err = p.ApplyEnv(os.Getenv)    // SANDBOXER_* overrides
//	err = p.Validate()             // every problem, each naming its YAML key
//
// and then, per request, p.Resolve(policy.Request{...}) turns what an agent
// asked for into concrete limits, refusing anything past a ceiling.
//
// policies/default.yaml in the repository documents every key with its default;
// a test keeps it identical to Default().
package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sandboxer/sandboxer/internal/secret"
)

// Policy is the whole operator policy. The zero value is not useful: start from
// Default() or Load().
type Policy struct {
	Limits Limits `yaml:"limits"`
	Output Output `yaml:"output"`
	Jobs   Jobs   `yaml:"jobs"`
	// Network is the network mode of job containers: "none" (default),
	// "bridge", or "egress" (only the hosts of Egress.Allow, through the
	// server's proxy).
	Network string `yaml:"network"`
	// Egress is what network "egress" allows.
	Egress Egress `yaml:"egress"`
	// Secrets are credentials jobs use without holding them, by name: the
	// sandbox sees a placeholder, the egress proxy swaps in the value for
	// the secret's hosts (docs/security.md). Never nil after Default() or Load().
	Secrets map[string]Secret `yaml:"secrets"`
	// Runtime is the OCI runtime of job containers; "" = sandboxer-runc
	// where the project's setup registered it, else the engine's default
	// (e.g. "runsc" for gVisor).
	Runtime string `yaml:"runtime"`
	// Snapshots are the settings of snapshot_workspace's images (their runtime).
	Snapshots Snapshots `yaml:"snapshots"`
	// RefuseKnownEscapes stops serve when the engine or the runtime its
	// sandboxes use has a known container escape (internal/backend's
	// table); false: serve logs it and goes on.
	RefuseKnownEscapes bool `yaml:"refuse_known_escapes"`
	// Backend is where sandboxes run: "docker" (default), "kubernetes"
	// (a pod per job, docs/kubernetes.md) or "containerd" (straight on
	// containerd, docs/engines.md).
	Backend string `yaml:"backend"`
	// Kubernetes is where backend "kubernetes" finds its cluster.
	Kubernetes Kubernetes `yaml:"kubernetes"`
	// Containerd is where backend "containerd" finds its containerd.
	Containerd Containerd `yaml:"containerd"`
	// Languages optionally overrides the image of a language, by language name.
	// Never nil after Default() or Load().
	Languages map[string]Language `yaml:"languages"`
	// Templates are images the operator defines from a Dockerfile, by name
	// (docs/templates.md). Never nil after Default() or Load().
	Templates map[string]Template `yaml:"templates"`
	// TemplateBuilds caps template builds and their disk.
	TemplateBuilds TemplateBuilds `yaml:"templates_build"`
	// Pool keeps sandboxes started before their jobs, so jobs start in milliseconds.
	Pool Pool `yaml:"pool"`
	// Scripts configures run_script and benchmark_script.
	Scripts Scripts `yaml:"scripts"`
	// Workspaces are named, persistent sandboxes.
	Workspaces Workspaces `yaml:"workspaces"`
	// Sessions are the interactive sessions' settings.
	Sessions Sessions `yaml:"sessions"`
	// Block is the command block list (a convenience, not a boundary).
	Block Block `yaml:"block"`
	// Mounts are host directories the operator grants: a job that names one
	// sees it read-only at /mnt/<name>. Never nil after Default() or Load().
	Mounts []Mount `yaml:"mounts"`
	// HTTP configures serve --http (docs/http.md).
	HTTP HTTP `yaml:"http"`
	// Approvals are the actions a person approves before they run.
	Approvals Approvals `yaml:"approvals"`

	// ServerPaths are the server's own places that no mount may reach (its
	// state directory, its binary, its engine's socket): set by the server's
	// configuration, not by the file.
	ServerPaths []string `yaml:"-"`
}

// Backends a policy may name: internal/backend is the table of what each
// one is, opens, allows and checks.
const (
	BackendDocker     = "docker"
	BackendPodman     = "podman"
	BackendKubernetes = "kubernetes"
	BackendContainerd = "containerd"
)

// Containerd says which containerd, and which of its namespaces, backend
// "containerd" uses.
type Containerd struct {
	// Address is containerd's socket, an absolute path; "" =
	// /run/sandboxer-containerd/containerd.sock (scripts/containerd.sh's).
	Address string `yaml:"address"`
	// Namespace is containerd's namespace of the sandboxes; "" = "sandboxer".
	Namespace string `yaml:"namespace"`
}

// Kubernetes says which cluster and namespace backend "kubernetes" uses.
type Kubernetes struct {
	// Namespace of the pods; "" = the kubeconfig context's, else "default".
	Namespace string `yaml:"namespace"`
	// Kubeconfig is an absolute path; "" = KUBECONFIG, else ~/.kube/config.
	Kubeconfig string `yaml:"kubeconfig"`
	// MountMB bounds the granted mounts a job names, together: on this
	// backend they are copied into the job's pod.
	MountMB int64 `yaml:"mount_mb"`
}

// HTTP configures the Streamable HTTP listener.
type HTTP struct {
	// TokenFile is the token file, as --token-file (which wins when given).
	TokenFile string `yaml:"token_file"`
	// Hosts are the names (host, or host:port) a listener bound beyond
	// loopback answers to in the Host header; empty: any (the token is the
	// guard there). A loopback listener answers loopback names only.
	Hosts []string `yaml:"hosts"`
	// TrustedProxies are the reverse proxies (addresses or CIDR ranges)
	// whose X-Forwarded-For names the client, for the front door's count
	// of bad credentials (internal/auth.Door); empty: the peer is the client.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// TrustedPrefixes are http.trusted_proxies as ranges (an address is its
// own /32 or /128); entries validation refused are left out.
func (h HTTP) TrustedPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, e := range h.TrustedProxies {
		if p, err := parsePrefix(e); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// parsePrefix reads an address or a CIDR range.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Mount is one granted host directory.
type Mount struct {
	Name   string `yaml:"name"`   // ^[a-z0-9][a-z0-9-]{0,31}$; seen at /mnt/<name>
	Source string `yaml:"source"` // an absolute directory on the engine's host
}

// MountTarget is where a granted mount appears inside a sandbox.
func MountTarget(name string) string { return "/mnt/" + name }

// ResolveMount resolves granted mount name's source now (ResolveMountSource,
// with the server's own places): what to mount, or an error naming the key.
func (p *Policy) ResolveMount(name string) (string, error) {
	for i, m := range p.Mounts {
		if m.Name == name {
			real, problem := ResolveMountSource(m.Source, p.ServerPaths)
			if problem != "" {
				return "", fmt.Errorf("policy key mounts[%d].source: %s", i, problem)
			}
			return real, nil
		}
	}
	return "", fmt.Errorf("mount %q is not granted (policy key mounts)", name)
}

// MountNames are the granted mounts' names, in the policy's order.
func (p *Policy) MountNames() []string {
	names := make([]string, 0, len(p.Mounts))
	for _, m := range p.Mounts {
		names = append(names, m.Name)
	}
	return names
}

// Block is the command block list: commands that scripts may not run, checked
// on the parsed shell syntax of every entry point (internal/blocklist).
type Block struct {
	// Commands are command names (no paths: /usr/bin/rm is caught as rm).
	// Never nil after Default() or Load().
	Commands []string `yaml:"commands"`
	// AgentEdits lets agents add and remove their own entries (block_command,
	// unblock_command); the policy's entries stay whatever an agent does.
	AgentEdits bool `yaml:"agent_edits"`
}

// Sessions are the interactive sessions' settings.
type Sessions struct {
	// IdleTimeoutS: a session that gets no input for this many seconds ends
	// (killed, reason idle) and its sandbox goes.
	IdleTimeoutS Range `yaml:"idle_timeout_s"`
}

// Workspaces are named, persistent sandboxes: a long-lived container with a
// volume at /workspace, stopped when idle and started again on use.
type Workspaces struct {
	Enabled bool `yaml:"enabled"`
	// Max is how many workspaces may exist at once.
	Max int `yaml:"max"`
	// IdleStopS stops a workspace's container after this many seconds
	// without a job (its files and packages stay); 0 = never.
	IdleStopS int64 `yaml:"idle_stop_s"`
	// PauseAfterS freezes a workspace's container (its processes and
	// memory kept, no CPU) after this many seconds with nothing running but
	// idle sessions; the next call that touches it thaws it. 0 = never.
	// Engines with a freezer only (not kubernetes).
	PauseAfterS int64 `yaml:"pause_after_s"`
	// HibernateAfterS checkpoints a workspace's processes and memory to an
	// image under the state directory and stops its container after this
	// many seconds with nothing running but idle sessions; the next call
	// restores it. Where its runtime cannot be checkpointed (runc here),
	// the workspace is stopped instead, as idle_stop_s does. 0 = never.
	HibernateAfterS int64 `yaml:"hibernate_after_s"`
	// DiskMB is the most a workspace's files (under /workspace) may take,
	// enforced by polling while jobs run: a job that fills past it is killed.
	DiskMB int64 `yaml:"disk_mb"`
	// MaxPorts is how many ports of one workspace expose_port may have open.
	MaxPorts int `yaml:"max_ports"`
	// InstallNetwork is the Docker network a workspace joins while
	// install_packages runs; "none" forbids installs.
	InstallNetwork string `yaml:"install_network"`
	// PipIndexURL is the package index pip installs from ("" = pip's default, PyPI).
	PipIndexURL string `yaml:"pip_index_url"`
	// NpmRegistryURL is the registry npm installs from ("" = npm's default).
	NpmRegistryURL string `yaml:"npm_registry_url"`
	// InstallCAFile is a host PEM bundle of extra CA certificates the
	// package managers of install_packages trust ("" = none): for egress
	// whose TLS is intercepted by a CA the images do not know.
	InstallCAFile string `yaml:"install_ca_file"`
	// InstallGoProxy and InstallGoSumDB are GOPROXY and GOSUMDB of go
	// installs (Go's own defaults); jobs themselves build offline.
	InstallGoProxy string `yaml:"install_goproxy"`
	InstallGoSumDB string `yaml:"install_gosumdb"`
}

// Scripts configures run_script and benchmark_script.
type Scripts struct {
	// EnvFileDirs are the host directories (absolute) under which env_file may
	// name a file; none by default, so env_file host paths are refused.
	// Never nil after Default() or Load().
	EnvFileDirs []string `yaml:"env_file_dirs"`
	// PipIndexURL is the index run_script's python dependencies install
	// from ("" = pip's default, PyPI).
	PipIndexURL string `yaml:"pip_index_url"`
	// DependencyCacheMB caps the dependency caches together (Docker volumes,
	// one per language, image and list); past it the least recently used go.
	DependencyCacheMB int64 `yaml:"dependency_cache_mb"`
	// DependencyInstallTimeoutS bounds one dependency install.
	DependencyInstallTimeoutS int64 `yaml:"dependency_install_timeout_s"`
	// InstallCAFile is a host path of a PEM bundle that dependency installs
	// trust besides the image's CAs (TLS-intercepting egress); "" = none.
	InstallCAFile string `yaml:"install_ca_file"`
	// GoBuildCacheMB is the size of each tenant's shared Go build cache (a
	// volume fresh go sandboxes read and only a trusted builder writes; see
	// internal/gobuild); past it a new, empty generation starts. 0 = off.
	GoBuildCacheMB int64 `yaml:"go_build_cache_mb"`
}

// Pool is the warm pool: per language, how many fresh sandboxes (with the
// default limits) wait, started, for a job. Each serves exactly one job.
type Pool struct {
	Enabled bool `yaml:"enabled"`
	// Size is how many warm sandboxes to keep per language; a language not
	// named keeps none. Never nil after Default() or Load().
	Size map[string]int `yaml:"size"`
	// Parallel is how many sandboxes may be starting at once while refilling.
	Parallel int `yaml:"parallel"`
	// MaxTotal is the most warm sandboxes kept in all: past the configured
	// sizes, a shape (language, limits) a job used gets one warm sandbox
	// while the budget lasts; 0 keeps only the configured ones.
	MaxTotal int `yaml:"max_total"`
	// FollowIdleS: a shape kept for its use is dropped after this many
	// seconds without a job.
	FollowIdleS int64 `yaml:"follow_idle_s"`
}

// Range is a per-request integer limit: a request may ask for anything from the
// field's floor up to Max; a request that omits it gets Default.
type Range struct {
	Default int64 `yaml:"default"`
	Max     int64 `yaml:"max"`
}

// FloatRange is Range for fractional limits (CPUs).
type FloatRange struct {
	Default float64 `yaml:"default"`
	Max     float64 `yaml:"max"`
}

// Limits are the per-job resource limits.
type Limits struct {
	TimeoutS   Range      `yaml:"timeout_s"`    // wall-clock seconds; requests may be fractional (>= 0.1)
	MemoryMB   Range      `yaml:"memory_mb"`    // MiB of memory (swap is not given on top)
	CPUs       FloatRange `yaml:"cpus"`         // CPUs (1.0 = one core's worth of time)
	Pids       Range      `yaml:"pids"`         // max processes/threads in the container
	OpenFiles  int64      `yaml:"open_files"`   // RLIMIT_NOFILE, fixed (not per request)
	FileSizeMB int64      `yaml:"file_size_mb"` // RLIMIT_FSIZE in MiB, fixed
	TmpMB      int64      `yaml:"tmp_mb"`       // size of the /tmp tmpfs in MiB, fixed
	WorkdirMB  int64      `yaml:"workdir_mb"`   // size of the working-directory tmpfs in MiB, fixed
}

// Output are the output-capture sizes.
type Output struct {
	// InlineBytes is how much of stdout and of stderr (each) a call returns
	// inline; beyond it a head and a tail are kept.
	InlineBytes int64 `yaml:"inline_bytes"`
	// MaxBytesPerJob caps the output kept on disk for one job.
	MaxBytesPerJob int64 `yaml:"max_bytes_per_job"`
	// RingBytes is the in-memory ring buffer per job.
	RingBytes int64 `yaml:"ring_bytes"`
	// EngineLog is Docker's own log of a job container: "local" (size-capped at
	// MaxBytesPerJob; lets a restarted server recover what a job printed while
	// it was down, but the engine's per-line logging slows floods of short
	// lines to a few MB/s) or "none" (full speed; output printed while the
	// server is down is lost, though the job is still adopted after a restart).
	EngineLog string `yaml:"engine_log"`
	// ReturnedBytesPerJob caps the files a fresh sandbox's job returns
	// (returns), kept with its record until it is pruned.
	ReturnedBytesPerJob int64 `yaml:"returned_bytes_per_job"`
}

// Jobs are the job-manager settings.
type Jobs struct {
	MaxConcurrent    int   `yaml:"max_concurrent"`     // jobs running at once
	MaxQueued        int   `yaml:"max_queued"`         // jobs waiting for a slot; past that, refused (0 = no queue)
	RetentionS       int64 `yaml:"retention_s"`        // finished jobs are pruned after this many seconds
	CleanupIntervalS int64 `yaml:"cleanup_interval_s"` // how often the pruner runs, seconds
	DefaultWaitS     int64 `yaml:"default_wait_s"`     // how long run_command waits before returning a running handle (0 = return at once)
	MaxWaitS         int64 `yaml:"max_wait_s"`         // the most a caller may ask to wait in one call
}

// Language is an operator override for one language.
type Language struct {
	Image string `yaml:"image"`
}

// Default returns the built-in policy. policies/default.yaml spells out the
// same values.
func Default() *Policy {
	return &Policy{
		Limits: Limits{
			TimeoutS:   Range{Default: 30, Max: 3600},
			MemoryMB:   Range{Default: 512, Max: 4096},
			CPUs:       FloatRange{Default: 1.0, Max: 2.0},
			Pids:       Range{Default: 256, Max: 1024},
			OpenFiles:  1024,
			FileSizeMB: 1024,
			TmpMB:      256,
			WorkdirMB:  256,
		},
		Output: Output{
			InlineBytes:         16 << 10,
			MaxBytesPerJob:      16 << 20,
			ReturnedBytesPerJob: 16 << 20,
			RingBytes:           256 << 10,
			EngineLog:           EngineLogLocal,
		},
		Jobs: Jobs{
			MaxConcurrent:    4,
			MaxQueued:        64,
			RetentionS:       86400,
			CleanupIntervalS: 60,
			DefaultWaitS:     30,
			MaxWaitS:         50, // below the common 60 s client request timeout
		},
		Network:        NetworkNone,
		Egress:         Egress{Allow: []string{}, Hosts: map[string]string{}},
		Secrets:        map[string]Secret{},
		Approvals:      Approvals{ExpireS: 600},
		Runtime:        "",
		Backend:        BackendDocker,
		Kubernetes:     Kubernetes{MountMB: 256},
		Languages:      map[string]Language{},
		Templates:      map[string]Template{},
		TemplateBuilds: TemplateBuilds{MaxContextMB: 256, MaxBuildS: 900, MaxImageMB: 4096, DiskMB: 20480},
		Pool:           Pool{Enabled: true, Size: map[string]int{"bash": 2, "python": 1}, Parallel: 2, MaxTotal: 6, FollowIdleS: 300},
		Scripts:        Scripts{EnvFileDirs: []string{}, DependencyCacheMB: 2048, DependencyInstallTimeoutS: 300, GoBuildCacheMB: 1024},
		Workspaces: Workspaces{Enabled: true, Max: 8, IdleStopS: 600, DiskMB: 1024, MaxPorts: 4,
			InstallNetwork: NetworkBridge, PipIndexURL: "", InstallCAFile: "",
			InstallGoProxy: "https://proxy.golang.org,direct", InstallGoSumDB: "sum.golang.org"},
		Sessions: Sessions{IdleTimeoutS: Range{Default: 600, Max: 3600}},
		Block:    Block{Commands: []string{}},
		Mounts:   []Mount{},
		HTTP:     HTTP{TrustedProxies: []string{}},
	}
}

// Network modes a policy may name.
// Engine log modes (output.engine_log).
const (
	EngineLogLocal = "local"
	EngineLogNone  = "none"
)

const (
	NetworkNone   = "none"
	NetworkBridge = "bridge"
	NetworkEgress = "egress"
)

// Approvals name the actions that wait for a person's approval, asked for
// through the client (an MCP elicitation: docs/security.md#approvals).
type Approvals struct {
	// InstallPackages: every install_packages call.
	InstallPackages bool `yaml:"install_packages"`
	// Egress: a job or workspace that names hosts in its egress argument.
	Egress bool `yaml:"egress"`
	// Secrets: a job or workspace that uses a secret.
	Secrets bool `yaml:"secrets"`
	// ExpireS is how long a request for approval may be answered.
	ExpireS int `yaml:"expire_s"`
}

// Any says whether some action waits for approval.
func (a Approvals) Any() bool { return a.InstallPackages || a.Egress || a.Secrets }

// Egress is the allowlist of network "egress".
type Egress struct {
	// Allow are the hosts jobs may reach through the server's proxy:
	// "*.example.com" (its subdomains), "pkg.internal:443", an address with
	// a port; no port means 80 and 443.
	Allow []string `yaml:"allow"`
	// Hosts are addresses of names the proxy resolves without DNS (an
	// internal mirror's name): name -> IP address.
	Hosts map[string]string `yaml:"hosts"`
}

// Secret is one credential: where its value lives on the server (exactly
// one of ValueFile and Env), the hosts the proxy puts it in requests to,
// and the tenants that may use it.
type Secret struct {
	// ValueFile is an absolute host path, mode 0600; read at each use.
	ValueFile string `yaml:"value_file"`
	// Env is a variable of the server's environment; read at each use.
	Env string `yaml:"env"`
	// Hosts are egress.allow entries, each within egress.allow.
	Hosts []string `yaml:"hosts"`
	// Tenants are the token file's names that may use it; empty = every
	// tenant (and the stdio server's single user).
	Tenants []string `yaml:"tenants"`
}

// Source is where s's value lives.
func (s Secret) Source() secret.Source { return secret.Source{File: s.ValueFile, Env: s.Env} }

// MayUse says whether tenant may use s.
func (s Secret) MayUse(tenant string) bool {
	return len(s.Tenants) == 0 || slices.Contains(s.Tenants, tenant)
}

// SecretNames are the policy's secrets' names, sorted.
func (p *Policy) SecretNames() []string {
	names := make([]string, 0, len(p.Secrets))
	for n := range p.Secrets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Retention is Jobs.RetentionS as a duration.
func (j Jobs) Retention() time.Duration { return seconds(j.RetentionS) }

// CleanupInterval is Jobs.CleanupIntervalS as a duration.
func (j Jobs) CleanupInterval() time.Duration { return seconds(j.CleanupIntervalS) }

// DefaultWait is Jobs.DefaultWaitS as a duration.
func (j Jobs) DefaultWait() time.Duration { return seconds(j.DefaultWaitS) }

// MaxWait is Jobs.MaxWaitS as a duration.
func (j Jobs) MaxWait() time.Duration { return seconds(j.MaxWaitS) }

func seconds(s int64) time.Duration { return time.Duration(s) * time.Second }

// Image returns the operator's image override for a language, if any.
func (p *Policy) Image(language string) (string, bool) {
	l, ok := p.Languages[language]
	if !ok || l.Image == "" {
		return "", false
	}
	return l.Image, true
}

package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/images"
	"github.com/sandboxer/sandboxer/internal/lang"
	"github.com/sandboxer/sandboxer/internal/policy"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// Package installs (install_packages): the workspace's container never
// joins a network, so no job running in it can wait for an install to get
// one. Each install runs in an install container of its own (the runtime's
// StartInstaller: the workspace's image, environment, user, limits and
// hardening, its volume at /workspace) on the policy's install network,
// removed afterwards whatever happened. npm, pip, go and cargo install into
// the volume. apt downloads there (lists and .debs into a root-only
// directory of the install container, which no job can write), the
// download moves into the workspace's root filesystem through the engine's
// archive API, and apt installs from it offline in the workspace. On a
// runtime whose execs cannot run as root (sandbox.TunnelInstaller), apt
// runs as the sandbox user instead and unpacks the packages into the
// volume (aptUnpackScript), where the jobs' supervisor finds them. Each
// manager's installer runs as an exec, packages passed as argv after "--",
// never through a shell's parsing.

// Package managers (lang's table, which run_script's dependencies read
// too), and auto: the workspace language's.
const (
	ManagerAuto  = "auto"
	ManagerApt   = lang.ManagerApt
	ManagerPip   = lang.ManagerPip
	ManagerNpm   = lang.ManagerNpm
	ManagerCargo = lang.ManagerCargo
	ManagerGo    = lang.ManagerGo
)

// Managers are the package managers install_packages knows, in the order they run.
var Managers = lang.ManagerNames()

// Limits of one install.
const (
	MaxPackages      = 50 // packages per call, all managers together
	MaxPackageBytes  = lang.MaxRequirementBytes
	installLogBytes  = 256 << 10
	installLogLines  = 20 // lines of the log tail reported per manager
	packageLogLines  = 5  // lines reported per package (those naming it)
	installQueryTime = 60 * time.Second
)

// CheckPackage says what is wrong with a package spec for a manager, if
// anything: lang's grammar, the same as run_script's dependencies'.
func CheckPackage(manager, spec string) error {
	m, ok := lang.PackageManager(manager)
	if !ok {
		return fmt.Errorf("unknown package manager %q: use one of %s", truncate(manager, 32), strings.Join(Managers, ", "))
	}
	if err := m.Check(spec); err != nil {
		return fmt.Errorf("%s package %v", manager, err)
	}
	return nil
}

// AutoManager is the manager `auto` means for a workspace's language (its
// record's lang.Language.Packages; apt for one the registry does not know).
func AutoManager(language string) string {
	if l, ok := lang.Builtin(language); ok && l.Packages != "" {
		return l.Packages
	}
	return ManagerApt
}

// packageName is a spec without its version (what is queried afterwards).
func packageName(manager, spec string) string {
	switch manager {
	case ManagerApt:
		return strings.SplitN(spec, "=", 2)[0]
	case ManagerPip:
		n := spec
		if i := strings.IndexAny(n, "[=<>~!"); i >= 0 {
			n = n[:i]
		}
		return n
	case ManagerNpm:
		if i := strings.LastIndex(spec, "@"); i > 0 {
			return spec[:i]
		}
	case ManagerGo, ManagerCargo:
		return strings.SplitN(spec, "@", 2)[0]
	}
	return spec
}

// PackageResult is what became of one package.
type PackageResult struct {
	Manager   string
	Spec      string
	Name      string
	Installed bool
	Version   string
	Log       []string // lines of the manager's log that name the package
}

// ManagerResult is one manager's run.
type ManagerResult struct {
	Manager  string
	ExitCode int
	Error    string   // the installer could not run, or failed
	LogTail  []string // last lines of its output
	Packages []PackageResult
}

// InstallRequest is what install_packages asks for.
type InstallRequest struct {
	Workspace string
	ByManager map[string][]string // already checked with CheckPackage
	Timeout   time.Duration
	// Progress, when set, is told what runs (a line at a time).
	Progress func(manager, line string)
}

// installLocks serialize installs per workspace: two installers writing
// the same node_modules or dpkg database would trip over each other.
var installLocks sync.Map // workspace name -> *sync.Mutex

// Install runs the installs for the workspace, each manager in turn, in an
// install container on the install network (see the package comment).
func (m *Manager) Install(ctx context.Context, req InstallRequest) ([]ManagerResult, error) {
	pol := m.pol.Workspaces
	if pol.InstallNetwork == "" || pol.InstallNetwork == policy.NetworkNone {
		return nil, errors.New("package installs are forbidden by the policy (workspaces.install_network: none)")
	}
	var ca []byte
	if pol.InstallCAFile != "" {
		var err error
		if ca, err = os.ReadFile(pol.InstallCAFile); err != nil {
			return nil, fmt.Errorf("read workspaces.install_ca_file: %v (fix the policy)", err)
		}
	}
	tunnel := m.tunnel != nil && m.tunnel.InstallsThroughTunnel(pol.InstallNetwork)
	aptUnpacks := tunnel && !m.tunnel.RootExec()
	if tunnel && m.TunnelProxy == nil {
		return nil, errors.New("installs on this backend go through the tunnel to the server's proxy, and this server has none")
	}
	mu, _ := installLocks.LoadOrStore(req.Workspace, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()

	w, release, err := m.Acquire(ctx, req.Workspace)
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	var proxyEnv []string
	var proxy http.Handler
	if tunnel {
		// The install pod has no network: its installers reach the proxy
		// over their exec (sandbox.ExecThroughTunnel), and the workspace's
		// pod, where jobs run, never carries the tunnel.
		var revoke func()
		proxy, revoke = m.TunnelProxy(ctx, "install:"+req.Workspace)
		defer revoke()
	} else if pol.InstallNetwork == policy.NetworkEgress {
		// The installers reach the allowlist's registries through the proxy.
		if m.Egress == nil {
			return nil, errors.New("workspaces.install_network is egress, but the egress proxy is not running")
		}
		var revoke func()
		proxyEnv, revoke = m.Egress(ctx, "install:"+req.Workspace)
		defer revoke()
	}
	inst, err := m.rt.StartInstaller(ctx, w.ContainerID, pol.InstallNetwork)
	if err != nil {
		return nil, fmt.Errorf("start the install container on network %s: %w", pol.InstallNetwork, err)
	}
	defer func() {
		// Removing it ends whatever the installers left running (a loop, a
		// fork bomb past the timeout): the workspace's container is untouched.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer rcancel()
		if err := m.rt.Remove(rctx, inst); err != nil {
			m.log.Error().Err(err).Str("workspace", req.Workspace).Msg("remove the install container")
		}
	}()
	m.log.Info().Str("workspace", req.Workspace).Interface("packages", req.ByManager).Msg("install packages")

	var results []ManagerResult
	for _, mgr := range Managers {
		specs := req.ByManager[mgr]
		if len(specs) == 0 {
			continue
		}
		r := m.installWith(ctx, w.ContainerID, inst, mgr, specs, ca, proxyEnv, proxy, aptUnpacks, req.Progress)
		m.Observer.Install(mgr, r.Error == "" && r.ExitCode == 0)
		results = append(results, r)
	}
	return results, nil
}

// caPrelude reads extra CA certificates from stdin (when SBX_CA is set) into
// a fresh file under /tmp and points every package manager at them.
const caPrelude = `set -u
b=
if [ -n "${SBX_CA:-}" ]; then
  ca=$(mktemp /tmp/sbx-ca.XXXXXX) && b=$(mktemp /tmp/sbx-bundle.XXXXXX) || exit 70
  trap 'rm -f "$ca" "$b"' EXIT
  cat > "$ca"; cat /etc/ssl/certs/ca-certificates.crt "$ca" > "$b" 2>/dev/null || cp "$ca" "$b"
  chmod 644 "$ca" "$b"
  export NODE_EXTRA_CA_CERTS="$ca" SSL_CERT_FILE="$b" PIP_CERT="$b" REQUESTS_CA_BUNDLE="$b" CARGO_HTTP_CAINFO="$b" GIT_SSL_CAINFO="$b"
fi
`

// installScripts run with the packages as "$@".
var installScripts = map[string]string{
	// apt runs as uid 0 but without capabilities: the container's
	// no-new-privileges keeps an exec'd root from gaining any (the bounding
	// set notwithstanding). So apt does not drop to its _apt user, downloads
	// into a root-owned cache of its own, and packages whose files belong to
	// other users cannot be installed.
	// apt in the install container only downloads: the package lists and
	// the .debs (with their dependencies as the image has them) go into a
	// root-owned directory there, which moves to the workspace afterwards
	// (aptInstallOffline). apt runs as uid 0 but without capabilities: the
	// container's no-new-privileges keeps an exec'd root from gaining any
	// (the bounding set notwithstanding). So apt does not drop to its _apt
	// user, and packages whose files belong to other users cannot be
	// installed.
	ManagerApt: `export DEBIAN_FRONTEND=noninteractive
c=` + aptDir + `
rm -rf "$c"; mkdir -p "$c/archives/partial" "$c/lists/partial" || exit 70
cp -a /var/lib/apt/lists/. "$c/lists/" 2>/dev/null
apt() {
  if [ -n "$b" ]; then set -- -o "Acquire::https::CAInfo=$b" "$@"; fi
  apt-get -o APT::Sandbox::User=root -o Acquire::Retries=0 -o "Dir::Cache::Archives=$c/archives" -o "Dir::State::Lists=$c/lists" "$@"
}
echo "+ apt-get update"
apt -q update </dev/null || echo "apt-get update failed; installing from the lists there are"
echo "+ apt-get install --download-only $*"
apt install -y -q --no-install-recommends --download-only -- "$@" </dev/null || exit
# Podman's archive API gives copied files to the workspace's user: open
# them to a capability-less root there (aptInbox keeps everyone else out).
chmod -R a+rwX "$c"
`,
	ManagerNpm: `cd /workspace || exit 70
echo "+ npm install $* (into /workspace/node_modules)"
npm install --no-audit --no-fund --loglevel=warn --fetch-retries=0 -- "$@" </dev/null
`,
	ManagerPip: `echo "+ pip install --user $*"
if [ -n "${SBX_PIP_INDEX:-}" ]; then
  if [ -n "${SBX_PIP_TRUSTED:-}" ]; then set -- --index-url "$SBX_PIP_INDEX" --trusted-host "$SBX_PIP_TRUSTED" -- "$@"
  else set -- --index-url "$SBX_PIP_INDEX" -- "$@"; fi
else set -- -- "$@"; fi
python3 -m pip install --user --break-system-packages --no-input --progress-bar off --retries 0 "$@" </dev/null
`,
	// The seeds are linked first (proto.LinkGoCacheSeedsCommand): go get
	// beside the daemon's linking could fail on a standard package.
	ManagerGo: `cd /workspace || exit 70
` + images.SupervisorPath + " " + proto.LinkGoCacheSeedsCommand + `
if [ -f go.mod ]; then echo "+ go get $*"; go get -- "$@" </dev/null; else echo "+ go install $*"; go install -- "$@" </dev/null; fi
`,
	ManagerCargo: `echo "+ cargo install $*"
cargo install --locked -- "$@" </dev/null
`,
}

// AptUnpackDir is where apt unpacks packages on a runtime without root
// execs: their files under root/, their control records (with a Status
// line, as dpkg's own status file has them) in status. The jobs'
// supervisor adds root's bin and lib directories to PATH and
// LD_LIBRARY_PATH (the environment's SANDBOXER_APT_DIR names it).
const AptUnpackDir = Root + "/.apt"

// aptUnpackScript installs "$@" without root: apt, as the sandbox user,
// resolves them against the image's dpkg status and the packages unpacked
// before, downloads them with their missing dependencies into a directory
// of AptUnpackDir that it removes afterwards (checked against
// the lists' hashes, the lists against Debian's keys), and dpkg-deb
// unpacks each into AptUnpackDir. No maintainer script runs, so a package
// that needs one to work (a service, a user, an alternative) may not.
const aptUnpackScript = `export DEBIAN_FRONTEND=noninteractive
r=` + AptUnpackDir + `
mkdir -p "$r/root" && touch "$r/status" || exit 70
# Lists and downloads on the volume, not the /tmp tmpfs (memory, and small);
# those of an install that was killed go now (installs take turns).
rm -rf "$r"/download.*
c=$(mktemp -d "$r/download.XXXXXX") || exit 70
trap 'rm -rf "$c" ${ca:+"$ca"} ${b:+"$b"}' EXIT
mkdir -p "$c/archives/partial" "$c/lists/partial" "$c/cache" || exit 70
cp -a /var/lib/apt/lists/. "$c/lists/" 2>/dev/null
cat /var/lib/dpkg/status "$r/status" > "$c/status" || exit 70
apt() {
  if [ -n "$b" ]; then set -- -o "Acquire::https::CAInfo=$b" "$@"; fi
  apt-get -o Debug::NoLocking=1 -o Acquire::Retries=0 -o "Dir::Cache=$c/cache" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= \
    -o "Dir::Cache::Archives=$c/archives" -o "Dir::State::Lists=$c/lists" -o "Dir::State::status=$c/status" "$@"
}
echo "+ apt-get update"
apt -q update </dev/null || echo "apt-get update failed; installing from the lists there are"
echo "+ apt-get install --download-only $* (unpacked into $r/root: no root here)"
apt install -y -q --no-install-recommends --download-only -- "$@" </dev/null || exit
for d in "$c"/archives/*.deb; do
  [ -e "$d" ] || continue
  echo "+ unpack ${d##*/}"
  dpkg-deb -x "$d" "$r/root" || exit
  { dpkg-deb -f "$d" | grep -v '^Status:'; echo "Status: install ok installed"; echo; } >> "$r/status" || exit
done
`

// AptUnpackedList defines the shell function unpacked, which prints
// "name version" of each package aptUnpackScript unpacked.
const AptUnpackedList = `unpacked() { awk 'BEGIN{RS=""} {p=""; s=""; v=""; k=split($0, l, "\n"); for (i=1; i<=k; i++) { if (l[i] ~ /^Package: /) p=substr(l[i], 10); else if (l[i] ~ /^Version: /) v=substr(l[i], 10); else if (l[i] ~ /^Status: /) s=substr(l[i], 9) } if (s=="install ok installed") print p" "v}' ` + AptUnpackDir + `/status 2>/dev/null; }
`

// aptUnpackedQuery is queryScripts' apt for packages aptUnpackScript
// unpacked: the image's dpkg status first, then the volume's.
const aptUnpackedQuery = AptUnpackedList + `for n; do v=$(dpkg-query -W -f='${db:Status-Status} ${Version}' -- "$n" 2>/dev/null); case "$v" in "installed "*) v=${v#installed };; *) v=$(unpacked | awk -v n="$n" '$1==n{v=$2} END{print v}');; esac; printf '@@sbx\t%s\t%s\n' "$n" "$v"; done`

// aptDir is where apt's lists and downloads go in the install container.
const aptDir = "/var/cache/sandboxer-apt"

// aptInbox is the directory of the workspace's root filesystem, root's and
// 0700, that aptDir is copied into: no job can reach the downloads
// between the copy and the install, whoever the engine makes their owner.
const aptInbox = "/var/cache/sandboxer-apt-inbox"

// aptInstallOffline installs "$@" in the workspace's container from the
// lists and .debs the install container fetched (copied to aptDir), with
// no network, then removes them. apt checks each .deb against the lists'
// hashes; the lists were verified against Debian's keys when fetched.
const aptInstallOffline = `export DEBIAN_FRONTEND=noninteractive
c=` + aptInbox + "/sandboxer-apt" + `
trap 'rm -rf ` + aptInbox + `' EXIT
echo "+ apt-get install $* (in the workspace, offline)"
apt-get -o APT::Sandbox::User=root -o "Dir::Cache::Archives=$c/archives" -o "Dir::State::Lists=$c/lists" install -y -q --no-install-recommends --no-download -- "$@" </dev/null
`

// queryScripts print "@@sbx<TAB>name<TAB>version" for each name in "$@"
// (version empty when the package is not installed).
var queryScripts = map[string]string{
	ManagerApt:   `for n; do v=$(dpkg-query -W -f='${db:Status-Status} ${Version}' -- "$n" 2>/dev/null); case "$v" in "installed "*) v=${v#installed };; *) v=;; esac; printf '@@sbx\t%s\t%s\n' "$n" "$v"; done`,
	ManagerNpm:   `for n; do v=$(cd /workspace && node -p 'require(process.argv[1] + "/package.json").version' "/workspace/node_modules/$n" 2>/dev/null); printf '@@sbx\t%s\t%s\n' "$n" "$v"; done`,
	ManagerPip:   `for n; do v=$(python3 -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$n" 2>/dev/null); printf '@@sbx\t%s\t%s\n' "$n" "$v"; done`,
	ManagerGo:    `cd /workspace; for n; do if [ -f go.mod ]; then v=$(go list -m -f '{{.Version}}' -- "$n" 2>/dev/null); else b=$(go env GOBIN); [ -n "$b" ] || b=$(go env GOPATH)/bin; v=; [ -x "$b/${n##*/}" ] && v=$(go version -m "$b/${n##*/}" 2>/dev/null | awk '$1=="mod"{print $3; exit}'); fi; printf '@@sbx\t%s\t%s\n' "$n" "$v"; done`,
	ManagerCargo: `l=$(cargo install --list 2>/dev/null); for n; do v=$(printf '%s\n' "$l" | awk -v n="$n" '$1==n{sub(/^v/,"",$2); sub(/:$/,"",$2); print $2; exit}'); printf '@@sbx\t%s\t%s\n' "$n" "$v"; done`,
}

func (m *Manager) installWith(ctx context.Context, workspaceID, installer, mgr string, specs []string, ca []byte, proxyEnv []string, proxy http.Handler, aptUnpacks bool, progress func(string, string)) ManagerResult {
	res := ManagerResult{Manager: mgr}
	user := "" // the sandbox user: files in /workspace and ~ are the jobs'
	script, query := installScripts[mgr], queryScripts[mgr]
	if mgr == ManagerApt && aptUnpacks {
		script, query = aptUnpackScript, aptUnpackedQuery
	} else if mgr == ManagerApt {
		user = "0:0"
	}
	env := []string{"HOME=/home/sandbox"}
	if user == "0:0" {
		env = []string{"HOME=/root"}
	}
	if p := m.pol.Workspaces.PipIndexURL; p != "" {
		env = append(env, "SBX_PIP_INDEX="+p)
		// The operator named this index: a plain-http one is trusted.
		if u, err := url.Parse(p); err == nil && u.Scheme == "http" {
			env = append(env, "SBX_PIP_TRUSTED="+u.Hostname())
		}
	}
	if r := m.pol.Workspaces.NpmRegistryURL; r != "" && mgr == ManagerNpm {
		env = append(env, "npm_config_registry="+r)
	}
	if mgr == ManagerGo {
		// The image builds offline (GOPROXY=off); the install alone reaches
		// the module proxy the policy names, and modules land on the volume.
		env = append(env, "GOPROXY="+m.pol.Workspaces.InstallGoProxy, "GOSUMDB="+m.pol.Workspaces.InstallGoSumDB, "GOFLAGS=-mod=mod")
	}
	opts := sandbox.ExecOptions{User: user, Env: append(append([]string(nil), env...), proxyEnv...), Proxy: proxy}
	if len(ca) > 0 {
		opts.Env = append(opts.Env, "SBX_CA=1")
		opts.Stdin = bytes.NewReader(ca)
	}
	log := &logTail{max: installLogBytes, onLine: func(l string) {
		if progress != nil {
			progress(mgr, l)
		}
	}}
	opts.Cmd = append([]string{"sh", "-c", caPrelude + script, "sh"}, specs...)
	opts.Stdout, opts.Stderr = log, log
	code, err := m.rt.Exec(ctx, installer, opts)
	if err == nil && code == 0 && mgr == ManagerApt && !aptUnpacks {
		code, err = m.aptMoveAndInstall(ctx, installer, workspaceID, specs, log)
	}
	res.ExitCode = code
	switch {
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		res.Error = "the install ran out of time (timeout_s): the install container was removed with everything its installers started"
	case err != nil:
		res.Error = err.Error()
	case code != 0:
		res.Error = fmt.Sprintf("%s exited %d", mgr, code)
		if m.installerOOM(ctx, installer) {
			res.Error += ": the installer ran out of memory (the workspace's memory limit, memory_mb of create_workspace, applies to installs too)"
		}
	}
	lines := log.lines()
	if res.Error != "" {
		res.Error += failureHint(mgr, lines, "workspaces.install_ca_file")
	}
	res.LogTail = lines
	if len(res.LogTail) > installLogLines {
		res.LogTail = res.LogTail[len(res.LogTail)-installLogLines:]
	}

	// What is there now, asked in the workspace's container (as the same user).
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = packageName(mgr, s)
	}
	versions := map[string]string{}
	qctx, qcancel := context.WithTimeout(context.WithoutCancel(ctx), installQueryTime)
	defer qcancel()
	q := &capped{max: 1 << 20}
	if _, err := m.rt.Exec(qctx, workspaceID, sandbox.ExecOptions{User: user, Env: env,
		Cmd: append([]string{"sh", "-c", query, "sh"}, names...), Stdout: q}); err == nil {
		for _, l := range strings.Split(q.buf.String(), "\n") {
			f := strings.SplitN(l, "\t", 3)
			if len(f) == 3 && f[0] == "@@sbx" {
				versions[f[1]] = strings.TrimSpace(f[2])
			}
		}
	}
	for i, spec := range specs {
		pr := PackageResult{Manager: mgr, Spec: spec, Name: names[i], Version: versions[names[i]]}
		// A manager that failed (ran out of time, was killed) may leave a
		// package unpacked but its scripts unrun: not installed.
		pr.Installed = res.Error == "" && (pr.Version != "" || mgr == ManagerGo)
		for _, l := range lines {
			if strings.Contains(l, names[i]) {
				pr.Log = append(pr.Log, l)
			}
		}
		if len(pr.Log) > packageLogLines {
			pr.Log = pr.Log[len(pr.Log)-packageLogLines:]
		}
		res.Packages = append(res.Packages, pr)
	}
	return res
}

// aptMoveAndInstall moves the install container's apt downloads into the
// workspace's root filesystem through the engine's archive API (never
// through the volume, which jobs can write) and installs them there offline.
func (m *Manager) aptMoveAndInstall(ctx context.Context, installer, workspaceID string, specs []string, log io.Writer) (int, error) {
	tar, err := m.rt.CopyFrom(ctx, installer, aptDir)
	if err != nil {
		return -1, fmt.Errorf("read apt's downloads from the install container: %w", err)
	}
	defer tar.Close()
	mkdir := fmt.Sprintf("rm -rf %[1]s && mkdir -m 0700 %[1]s", aptInbox)
	if code, err := m.rt.Exec(ctx, workspaceID, sandbox.ExecOptions{User: "0:0", Env: []string{"HOME=/root"},
		Cmd: []string{"sh", "-c", mkdir}, Stdout: log, Stderr: log}); err != nil || code != 0 {
		return -1, fmt.Errorf("make %s in the workspace (exit %d): %v", aptInbox, code, err)
	}
	err = m.rt.CopyTo(ctx, workspaceID, aptInbox, tar)
	tar.Close()
	if err != nil {
		return -1, fmt.Errorf("copy apt's downloads into the workspace: %w", err)
	}
	return m.rt.Exec(ctx, workspaceID, sandbox.ExecOptions{User: "0:0", Env: []string{"HOME=/root"},
		Cmd: append([]string{"sh", "-c", aptInstallOffline, "sh"}, specs...), Stdout: log, Stderr: log})
}

// installerOOM says whether the kernel killed an installer's process for
// memory (the install container has the workspace's memory limit).
func (m *Manager) installerOOM(ctx context.Context, installer string) bool {
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	oom, err := m.rt.OOMKilled(octx, installer)
	return err == nil && oom
}

// logTail keeps the last max bytes of an installer's output, and calls
// onLine for each complete line.
type logTail struct {
	mu      sync.Mutex
	buf     []byte
	max     int
	partial []byte
	onLine  func(string)
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if len(l.buf) > l.max {
		l.buf = append([]byte(nil), l.buf[len(l.buf)-l.max:]...)
	}
	if l.onLine != nil {
		l.partial = append(l.partial, p...)
		for {
			i := bytes.IndexByte(l.partial, '\n')
			if i < 0 {
				break
			}
			if line := strings.TrimSpace(string(l.partial[:i])); line != "" {
				l.onLine(truncate(line, 200))
			}
			l.partial = l.partial[i+1:]
		}
		if len(l.partial) > 4096 {
			l.partial = l.partial[:0]
		}
	}
	return len(p), nil
}

// lines are the output's lines (carriage-return progress collapsed), blank ones left out.
func (l *logTail) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(string(l.buf), "\n") {
		if i := strings.LastIndexByte(strings.TrimRight(line, "\r"), '\r'); i >= 0 {
			line = line[i+1:]
		}
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, truncate(line, 300))
		}
	}
	return out
}

// PackageManagerKnown says whether install_packages knows a manager.
func PackageManagerKnown(manager string) (string, bool) {
	_, ok := lang.PackageManager(manager)
	return manager, ok
}

// tlsFailures are what installers print when a certificate does not verify:
// retrying cannot fix it, and the installers are told not to retry.
var tlsFailures = []string{
	"certificate signed by unknown authority", "failed to verify certificate", "certificate verify failed",
	"CERTIFICATE_VERIFY_FAILED", "SELF_SIGNED_CERT_IN_CHAIN", "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
	"unable to get local issuer certificate", "Certificate verification failed", "SSL certificate problem",
}

// unreachable are what installers print when their registry cannot be reached.
var unreachable = []string{"Could not resolve host", "Temporary failure in name resolution", "Network is unreachable",
	"Connection refused", "no such host", "Could not connect to", "failed to get `", "network failure"}

// FailureHint says what fixes an install that failed for a reason the log
// shows: a TLS certificate that does not verify names caKey, the policy key
// that fixes it; an unreachable registry says so. "" when neither shows.
func FailureHint(lines []string, caKey string) string {
	for _, l := range lines {
		for _, m := range tlsFailures {
			if strings.Contains(l, m) {
				return ": TLS certificate verification failed (" + truncate(strings.TrimSpace(l), 160) + "): this host's egress " +
					"intercepts TLS with a CA the image does not trust; set " + caKey + " to a PEM file of that CA"
			}
		}
	}
	for _, l := range lines {
		for _, m := range unreachable {
			if strings.Contains(l, m) {
				return ": the package registry could not be reached (" + truncate(strings.TrimSpace(l), 160) + ")"
			}
		}
	}
	return ""
}

func failureHint(manager string, lines []string, caKey string) string {
	hint := FailureHint(lines, caKey)
	if hint == "" && manager == ManagerCargo {
		return ": cargo installs need crates.io (or a mirror configured in the image)"
	}
	return hint
}

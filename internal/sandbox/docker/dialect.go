package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// dialect is what differs between the engines that serve the Docker API,
// found once from the engine's version. Everything above this package sees
// one runtime; each difference is here, named (docs/engines.md lists them).
type dialect struct {
	product string // "Docker" or "Podman"
	// ownedTmpfs are the tmpfs options that make it the sandbox user's:
	// Docker takes uid=/gid=; Podman 4 refuses them and has U (chown to
	// the container's user) instead.
	ownedTmpfs string
	// logDriver keeps a size-capped log the engine can replay after a
	// server restart: Docker's local driver; Podman has no local driver,
	// and its k8s-file takes max-size.
	logDriver   string
	logRotation bool // the driver takes max-file and compress
	// nameRlimits: Podman sets nofile and nproc to 1048576 and 4194304 in
	// any container that does not name them, and the container cannot
	// start where root may not raise its limits that far. Docker leaves
	// them as the engine's own. Named, they stay within reach; the cgroup's
	// pids limit is what bounds a sandbox's processes.
	nameRlimits bool
	// patchedRuntime is PatchedRuntime when the engine has it (the project's
	// setup registers it): sandboxes whose spec names no runtime run on it,
	// while the engine's other containers keep the engine's default.
	patchedRuntime string
	// unenforced is why the engine cannot hold a sandbox's limits, if it
	// cannot: then no sandbox starts there (limits are hard ceilings).
	unenforced string
	// seccomp is the profile's file for Podman, whose own default allows
	// user namespaces and the keyring (seccomp.go); "" keeps the engine's
	// default (Docker's is that profile).
	seccomp string
}

// securityOpts are every sandbox's: no new privileges, and the seccomp
// profile where the engine's own is not Docker's.
func (d dialect) securityOpts() []string {
	if d.seccomp != "" {
		return []string{"no-new-privileges", "seccomp=" + d.seccomp}
	}
	return []string{"no-new-privileges"}
}

// Rlimits named for Podman where the sandbox names none (see nameRlimits).
const (
	podmanNofile = 1024
	podmanNproc  = 32768
)

var (
	dockerDialect = dialect{product: "Docker", ownedTmpfs: "uid=1000,gid=1000", logDriver: "local", logRotation: true}
	podmanDialect = dialect{product: "Podman", ownedTmpfs: "U", logDriver: "k8s-file", nameRlimits: true}
)

// dialect is the backend's product's dialect, with what the engine says
// of its limits, asked once. Until an answer comes (the engine down), the
// product's dialect is assumed and nothing is cached. An engine that is
// another product than the backend says starts no sandbox (enforce).
func (r *Runtime) dialect(ctx context.Context) dialect {
	r.dialectMu.Lock()
	defer r.dialectMu.Unlock()
	if r.dial != nil {
		return *r.dial
	}
	d := dockerDialect
	if r.product == ProductPodman {
		d = podmanDialect
		path, err := seccompProfileFile()
		if err != nil {
			d.unenforced = fmt.Sprintf("sandboxes on Podman need Docker's seccomp profile in a file, and it could not be written: %v", err)
		}
		d.seccomp = path
	}
	ver, err := r.cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return d
	}
	info, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return d
	}
	d.unenforced = limitsUnenforced(info.Info.CgroupVersion, info.Info.SecurityOptions, r.podmanRootless(ctx))
	if _, ok := info.Info.Runtimes[PatchedRuntime]; ok {
		d.patchedRuntime = PatchedRuntime
	}
	if got := product(ver.Components); got != d.product {
		d.unenforced = fmt.Sprintf("the engine at %s is %s, but the policy names backend %s: set backend: %s",
			r.endpoint.Host, got, strings.ToLower(d.product), strings.ToLower(got))
	}
	r.dial = &d
	return d
}

// limitsUnenforced: a rootless engine on cgroup v1 has no cgroup controllers
// to delegate, and ignores memory, CPU and pids limits (Podman says so with
// a warning; Docker's rootless mode likewise).
func limitsUnenforced(cgroupVersion string, securityOptions []string, podmanRootless bool) string {
	if cgroupVersion != "1" {
		return ""
	}
	for _, o := range append(securityOptions, map[bool]string{true: "name=rootless"}[podmanRootless]) {
		if strings.Contains(o, "name=rootless") {
			return "the engine runs rootless on cgroup v1, where it ignores memory, CPU and process limits: " +
				"use a rootful engine, or a host with cgroup v2"
		}
	}
	return ""
}

// PatchedRuntime is the name under which the project's setup
// (scripts/runc.sh) registers a current runc with the engines it manages,
// where the host's has known escapes (internal/backend's table).
const PatchedRuntime = "sandboxer-runc"

// runtime is the OCI runtime a sandbox runs on: the one its spec names
// (the policy's runtime key), else the patched runc where the engine has
// it, else the engine's default.
func (d dialect) runtime(named string) string {
	if named != "" {
		return named
	}
	return d.patchedRuntime
}

// enforce refuses to start a sandbox on an engine that cannot hold its limits.
func (d dialect) enforce() error {
	if d.unenforced != "" {
		return errors.New("refusing to start a sandbox: " + d.unenforced)
	}
	return nil
}

// logConfig is the engine's own logging of a sandbox. A size-capped driver
// that the engine can read back, so a restarted server can recover what a
// job printed while it was down; json-file would be unbounded.
func (d dialect) logConfig(mode string, maxBytes int64) container.LogConfig {
	if mode == "none" {
		return container.LogConfig{Type: "none"}
	}
	cfg := map[string]string{"max-size": strconv.FormatInt(maxBytes, 10)}
	if d.logRotation {
		cfg["max-file"], cfg["compress"] = "2", "false"
	}
	return container.LogConfig{Type: d.logDriver, Config: cfg}
}

// tmpfsOptions are a tmpfs's mount options: the sandbox user's own, or
// shared with the sticky bit (like /tmp).
func (d dialect) tmpfsOptions(size int64, owned bool) string {
	o := "rw,exec,nosuid,nodev,size=" + strconv.FormatInt(size, 10)
	if owned {
		return o + "," + d.ownedTmpfs + ",mode=0755"
	}
	return o + ",mode=1777"
}

// ulimits completes a container's rlimits for the engine (see nameRlimits).
func (d dialect) ulimits(u []*container.Ulimit) []*container.Ulimit {
	if !d.nameRlimits {
		return u
	}
	named := map[string]bool{}
	for _, l := range u {
		named[l.Name] = true
	}
	if !named["nofile"] {
		u = append(u, &container.Ulimit{Name: "nofile", Soft: podmanNofile, Hard: podmanNofile})
	}
	if !named["nproc"] {
		u = append(u, &container.Ulimit{Name: "nproc", Soft: podmanNproc, Hard: podmanNproc})
	}
	return u
}

// notRunning: the container is gone or not running. Docker answers 404 or
// 409; Podman 4 sometimes answers 500 with its own words for the same.
func notRunning(err error) bool {
	if err == nil {
		return false
	}
	if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "no such container") || strings.Contains(msg, "container state improper")
}

// stoppingRace: Podman 4 refuses to remove a container that stops while it
// removes it ("could not be stopped: … container state improper: stopped");
// asked again, it removes it.
func stoppingRace(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "could not be stopped") && strings.Contains(msg, "state improper")
}

// podmanRootless reads the "Rootless" field that Podman adds to the engine's
// /info (Docker says rootless in SecurityOptions instead, and the client's
// Info type has no such field). Any failure reads as false.
func (r *Runtime) podmanRootless(ctx context.Context) bool {
	// The client's own dialer: the socket, TLS or ssh, as its calls go.
	dial := r.cli.Dialer()
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://engine/v"+r.cli.ClientVersion()+"/info", nil)
	if err != nil {
		return false
	}
	res, err := hc.Do(req)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	var info struct{ Rootless bool }
	return json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&info) == nil && info.Rootless
}

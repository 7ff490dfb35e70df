package docker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/uuid"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// StartInstaller starts a workspace's install container: made from the
// workspace container's own configuration as the engine recorded it (image,
// environment, user, limits, capabilities, seccomp, tmpfs, runtime), so it
// is hardened exactly like the workspace, with the workspace's volume at
// /workspace and the named network. Granted host mounts and published
// ports are left out: an install has the network, and host files must not
// travel with it. The workspace's container itself never joins a network
// (but the egress network, for a workspace made with its own allowlist), so
// a job running there never sees the install's.
func (r *Runtime) StartInstaller(ctx context.Context, workspaceID, network string) (string, error) {
	info, err := r.cli.ContainerInspect(ctx, workspaceID, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", sandbox.ErrNotFound
		}
		return "", r.engineErr(fmt.Errorf("inspect workspace container: %w", err))
	}
	ws := info.Container
	if ws.Config == nil || ws.HostConfig == nil {
		return "", fmt.Errorf("workspace container %.12s: the engine reported no configuration", workspaceID)
	}
	cfg := *ws.Config
	// The image the workspace runs, by ID: its tag may have moved since.
	cfg.Image = ws.Image
	cfg.Hostname, cfg.Domainname = "", ""
	cfg.ExposedPorts = nil
	cfg.Cmd = []string{"sleep", "infinity"}
	cfg.Labels = map[string]string{
		sandbox.LabelManaged: "true", sandbox.LabelInstance: r.instance,
		sandbox.LabelServer: r.server, sandbox.LabelKind: sandbox.KindHelper,
		sandbox.LabelWorkspace: ws.Config.Labels[sandbox.LabelWorkspace],
	}
	host := *ws.HostConfig
	host.NetworkMode = container.NetworkMode(r.installerNetwork(network))
	host.DNS = nil // the workspace's (none on egress) is not the installer's
	if host.NetworkMode == egressNetwork {
		host.DNS = r.resolvers(sandbox.NetworkEgress)
	}
	host.PortBindings, host.PublishAllPorts, host.Links, host.Binds, host.VolumesFrom = nil, false, nil, nil, nil
	host.ContainerIDFile = ""
	host.AutoRemove = false
	host.LogConfig = container.LogConfig{Type: "none"}
	host.Mounts = nil
	// Podman's inspect reports a CPU limit both ways and names rlimits as
	// RLIMIT_NOFILE; its create takes one way and the short names only.
	if host.NanoCPUs > 0 {
		host.CPUPeriod, host.CPUQuota = 0, 0
	}
	var ulimits []*container.Ulimit
	for _, u := range host.Ulimits {
		n := strings.ToLower(strings.TrimPrefix(u.Name, "RLIMIT_"))
		ulimits = append(ulimits, &container.Ulimit{Name: n, Soft: u.Soft, Hard: u.Hard})
	}
	host.Ulimits = ulimits
	for _, m := range ws.HostConfig.Mounts {
		if m.Type == mount.TypeVolume && m.Target == defaultWorkDir {
			host.Mounts = append(host.Mounts, m)
		}
	}
	if len(host.Mounts) == 0 {
		// Podman's inspect leaves HostConfig.Mounts empty and lists the
		// volume among the container's mount points only.
		for _, m := range ws.Mounts {
			if m.Type == mount.TypeVolume && m.Destination == defaultWorkDir && m.Name != "" {
				host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeVolume, Source: m.Name, Target: defaultWorkDir})
			}
		}
	}
	if len(host.Mounts) != 1 {
		return "", fmt.Errorf("workspace container %.12s has no volume at %s", workspaceID, defaultWorkDir)
	}
	suffix := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "sandboxer-install-" + suffix, Config: &cfg, HostConfig: &host,
	})
	if err != nil {
		return "", r.engineErr(fmt.Errorf("create install container: %w", err))
	}
	if _, err := r.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		_ = r.Remove(context.WithoutCancel(ctx), created.ID)
		return "", r.engineErr(fmt.Errorf("start install container on network %s: %w", network, err))
	}
	return created.ID, nil
}

// OOMKilled says whether the kernel killed a process of the container for
// memory. The engine's State.OOMKilled is set only when the main process
// ends (Engine 20.10), so the container's memory cgroup is asked too: its
// oom_kill counter (cgroup v2 memory.events, v1 memory.oom_control).
func (r *Runtime) OOMKilled(ctx context.Context, containerID string) (bool, error) {
	info, err := r.cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, sandbox.ErrNotFound
		}
		return false, r.engineErr(err)
	}
	if info.Container.State != nil && info.Container.State.OOMKilled {
		return true, nil
	}
	var out bytes.Buffer
	if _, err := r.Exec(ctx, containerID, sandbox.ExecOptions{User: "0:0", Stdout: &out,
		Cmd: []string{"cat", "/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"}}); err != nil {
		return false, err
	}
	return oomKills(out.String()) > 0, nil
}

// oomKills reads the oom_kill counter of a memory cgroup's events.
func oomKills(events string) int {
	for _, l := range strings.Split(events, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "oom_kill" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

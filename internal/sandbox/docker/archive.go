package docker

import (
	"context"
	"fmt"
	"io"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/uuid"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Trees move through the engine's archive API (tar streams), never through
// the server's own disk, so imports and forks work on a remote engine too.

// StartHelper starts a short-lived container for reading granted mounts
// (an import's scan and copy): no network, read-only root, small limits.
func (r *Runtime) StartHelper(ctx context.Context, image string, mounts []sandbox.Mount) (string, error) {
	suffix := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	pids := int64(64)
	init := true
	d := r.dialect(ctx)
	created, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "sandboxer-helper-" + suffix,
		Config: &container.Config{
			Image: image, Cmd: []string{"sleep", "infinity"}, User: sandboxUser, WorkingDir: "/",
			Labels: map[string]string{
				sandbox.LabelManaged: "true", sandbox.LabelInstance: r.instance,
				sandbox.LabelServer: r.server, sandbox.LabelKind: sandbox.KindHelper,
			},
		},
		HostConfig: &container.HostConfig{
			Runtime:     d.runtime(""),
			NetworkMode: "none", CapDrop: []string{"ALL"}, SecurityOpt: d.securityOpts(),
			ReadonlyRootfs: true, Mounts: engineMounts(mounts), Init: &init,
			LogConfig: container.LogConfig{Type: "none"},
			Resources: container.Resources{Memory: 256 << 20, MemorySwap: 256 << 20, PidsLimit: &pids,
				Ulimits: d.ulimits(nil)},
		},
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			if ierr := r.missingImage(ctx, image); ierr != nil {
				return "", ierr
			}
		}
		return "", r.engineErr(fmt.Errorf("create helper: %w", err))
	}
	if _, err := r.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		_ = r.Remove(context.WithoutCancel(ctx), created.ID)
		return "", r.engineErr(fmt.Errorf("start helper: %w", err))
	}
	return created.ID, nil
}

// CopyFrom streams path of a container (running or stopped; its mounts
// included) as a tar archive; "dir/." gives dir's contents.
func (r *Runtime) CopyFrom(ctx context.Context, containerID, path string) (io.ReadCloser, error) {
	res, err := r.cli.CopyFromContainer(ctx, containerID, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s in container %s", sandbox.ErrNotFound, path, containerID)
		}
		return nil, r.engineErr(fmt.Errorf("copy from container: %w", err))
	}
	return res.Content, nil
}

// CopyTo extracts a tar archive into dir of a container, keeping the
// archive's owners, modes and times. (CopyUIDGID would instead chown all to
// the container's user, looked up by name: "1000:1000" is not one.)
func (r *Runtime) CopyTo(ctx context.Context, containerID, dir string, archive io.Reader) error {
	_, err := r.cli.CopyToContainer(ctx, containerID, client.CopyToContainerOptions{
		DestinationPath: dir, Content: archive,
	})
	if err != nil {
		return r.engineErr(fmt.Errorf("copy into container: %w", err))
	}
	return nil
}

package docker

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// Checkpoints of workspaces (sandbox.WorkspaceCheckpointer): gVisor's own,
// driven through the Engine API, which Docker serves in its experimental
// mode only. CRIU, runc's way, fails `criu check` on the kernels we run
// on, so only runsc workspaces are checkpointed. The engine writes an image
// wherever it is told, but restores only from the container's own
// checkpoint directory under its data root ("custom checkpointdir is not
// supported" on start): a restore copies the image there for the start and
// removes it after, so the server must share the engine's host.

var _ sandbox.WorkspaceCheckpointer = (*Runtime)(nil)

// restoreCheckpoint is the one checkpoint a workspace container holds, and
// only while it starts from it.
const restoreCheckpoint = "sandboxer-restore"

// CheckpointRefusal says why workspaces on runtime cannot be checkpointed.
func (r *Runtime) CheckpointRefusal(ctx context.Context, runtime string) string {
	info, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return fmt.Sprintf("the engine did not answer: %v", r.engineErr(err))
	}
	i := info.Info
	name := r.dialect(ctx).runtime(runtime)
	if name == "" {
		name = i.DefaultRuntime
	}
	rt, ok := i.Runtimes[name]
	switch {
	case !ok:
		return fmt.Sprintf("the engine has no runtime %q", name)
	case filepath.Base(rt.Path) != "runsc":
		return fmt.Sprintf("workspaces on runtime %s cannot be checkpointed here: runc's checkpoints need CRIU, which fails on this kernel (gVisor, runtime runsc, has its own)", name)
	case !i.ExperimentalBuild:
		return "the Docker engine serves checkpoints in its experimental mode only, and it runs without it (`make gvisor` turns it on)"
	}
	if _, err := os.Stat(filepath.Join(i.DockerRootDir, "containers")); err != nil {
		return fmt.Sprintf("the engine's data directory %s is not on this server's host (a restore copies the image into it)", i.DockerRootDir)
	}
	return ""
}

// CheckpointWorkspace writes the container's image into dir. The stream to
// its daemon is cut first (its jobs held) and its waiting exec closed, so
// that the image holds no process of the server's execs, whose pipes a
// restore could not give back.
func (r *Runtime) CheckpointWorkspace(ctx context.Context, id, dir string, leaveRunning bool) error {
	if err := r.setPaused(ctx, id, false); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	r.dropExec(id)
	r.daemons.Hold(id)
	_, err := r.cli.CheckpointCreate(ctx, id, client.CheckpointCreateOptions{
		CheckpointID: filepath.Base(dir), CheckpointDir: filepath.Dir(dir), Exit: !leaveRunning,
	})
	if err == nil {
		err = ownerOnly(dir)
	}
	if err != nil || leaveRunning {
		// Still running: its jobs go on, on a new stream.
		if rerr := r.daemons.Resume(ctx, id); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		if cerrdefs.IsNotFound(err) {
			return sandbox.ErrNotFound
		}
		return r.engineErr(fmt.Errorf("checkpoint workspace container: %w", err))
	}
	return nil
}

// RestoreWorkspace starts the container from the image in dir.
func (r *Runtime) RestoreWorkspace(ctx context.Context, id, dir string) error {
	info, err := r.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return r.engineErr(err)
	}
	target := filepath.Join(info.Info.DockerRootDir, "containers", id, "checkpoints", restoreCheckpoint)
	if _, err := os.Stat(filepath.Dir(filepath.Dir(target))); err != nil {
		return fmt.Errorf("restore: the container's directory is not on this host: %w", err)
	}
	if err := copyDir(dir, target); err != nil {
		_ = os.RemoveAll(target)
		return fmt.Errorf("restore: copy the image: %w", err)
	}
	// The engine uploads the directory to containerd's content store by its
	// digest: two restores of one image at once (a fork's copies) would
	// commit the same content and collide. A file naming the container
	// makes each upload its own; runsc reads only its image's files.
	if err := os.WriteFile(filepath.Join(target, "sandboxer-container"), []byte(id), 0o600); err != nil {
		_ = os.RemoveAll(target)
		return fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(target)
	r.dropExec(id)
	if _, err := r.cli.ContainerStart(ctx, id, client.ContainerStartOptions{CheckpointID: restoreCheckpoint}); err != nil {
		if cerrdefs.IsNotFound(err) {
			return sandbox.ErrNotFound
		}
		return r.engineErr(fmt.Errorf("restore workspace container: %w", err))
	}
	return r.daemons.Resume(ctx, id)
}

// ownerOnly makes an image's directory 0700 and its files 0600: it is a
// copy of a tenant's memory.
func ownerOnly(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if d.IsDir() {
			mode = 0o700
		}
		return os.Chmod(p, mode)
	})
}

// copyDir copies the regular files of an image's directory (it has no
// subdirectory) into to, made 0700.
func copyDir(from, to string) error {
	if err := os.RemoveAll(to); err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s in the image is not a regular file", e.Name())
		}
		if err := copyFile(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// underGVisor says whether a container runs on a runtime whose binary is
// runsc (kept per container: a container's runtime never changes).
func (r *Runtime) underGVisor(ctx context.Context, containerID string) bool {
	r.execMu.Lock()
	v, ok := r.gvisor[containerID]
	r.execMu.Unlock()
	if ok {
		return v
	}
	info, err := r.cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil || info.Container.HostConfig == nil {
		return false
	}
	name := info.Container.HostConfig.Runtime
	if name == "" || name == "runc" || name == PatchedRuntime {
		v = false
	} else if ei, err := r.cli.Info(ctx, client.InfoOptions{}); err == nil {
		v = filepath.Base(ei.Info.Runtimes[name].Path) == "runsc"
	} else {
		return false
	}
	r.execMu.Lock()
	if r.gvisor == nil {
		r.gvisor = map[string]bool{}
	}
	r.gvisor[containerID] = v
	r.execMu.Unlock()
	return v
}

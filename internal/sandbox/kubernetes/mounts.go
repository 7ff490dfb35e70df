package kubernetes

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/sandboxer/sandboxer/internal/hosttree"
	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// Granted mounts are directories on the server's host, which a pod cannot
// see (and hostPath volumes are what the restricted Pod Security Standard
// forbids). So the server reads them itself, with the checks an import
// makes on Docker (hosttree: no link followed, no path leaving the
// directory, special files skipped, what uid 1000 cannot read refused), and
// copies them over pods/exec as tar:
//
//   - a job's mounts into an emptyDir at /mnt, filled before its job
//     starts (a warm pod's when it is handed the job), files and directories
//     then made read-only (a-w): a snapshot at the job's start, whose
//     writes (the job's uid owns the copy) never reach the host;
//   - an import through StartHelper: a helper of the server's own, whose
//     Exec runs the supervisor's scan and whose CopyFrom streams the tree.

const (
	// mountsDir is where a pod's granted mounts are copied (policy.MountTarget).
	mountsDir = "/mnt"
	// DefaultMountBytes bounds the granted mounts a job's pod gets when the
	// Config gives no limit.
	DefaultMountBytes = 256 << 20
	// mountsSlack is the emptyDir's room for directories and blocks over
	// the files' sizes.
	mountsSlack = 64 << 20
	// hostHelperPrefix begins the id of a helper of the server's own.
	hostHelperPrefix = "host-helper-"
)

// hostMounts splits a spec's mounts: granted host directories (under
// /mnt/NAME, copied into the pod) are returned; engine volumes (dependency
// caches' claims) are claimMounts'.
func hostMounts(ms []sandbox.Mount) ([]sandbox.Mount, error) {
	var out []sandbox.Mount
	for _, m := range ms {
		if m.Source == "" {
			continue
		}
		if dir, name := path.Split(m.Target); path.Clean(dir) != mountsDir || name == "" || strings.HasPrefix(name, ".") {
			return nil, fmt.Errorf("mounts: target %q is not %s/NAME", m.Target, mountsDir)
		}
		out = append(out, m)
	}
	return out, nil
}

// mountsVolume is the emptyDir of a pod's granted mounts (on the node's
// disk: a copy in memory would count against the job's memory).
func (r *Runtime) mountsVolume() (corev1.Volume, corev1.VolumeMount) {
	ed := &corev1.EmptyDirVolumeSource{SizeLimit: resource.NewQuantity(r.mountBytes+mountsSlack, resource.BinarySI)}
	return corev1.Volume{Name: "mounts", VolumeSource: corev1.VolumeSource{EmptyDir: ed}},
		corev1.VolumeMount{Name: "mounts", MountPath: mountsDir}
}

// scanMounts checks a job's granted mounts before a pod gets them: each
// readable by the sandbox user, all together within the limit.
func (r *Runtime) scanMounts(ms []sandbox.Mount) error {
	var total int64
	var names []string
	for _, m := range ms {
		res, err := scanHost(m.Source)
		if err != nil {
			return fmt.Errorf("mounts: %s: %w", path.Base(m.Target), err)
		}
		total += res.Bytes
		names = append(names, path.Base(m.Target))
	}
	if total > r.mountBytes {
		return fmt.Errorf("mounts: %s hold %d MiB, more than a job's copy may (policy kubernetes.mount_mb=%d): on backend kubernetes a mount is copied into the job's pod; grant a smaller directory or raise the limit",
			strings.Join(names, ", "), total>>20, r.mountBytes>>20)
	}
	return nil
}

// scanHost scans a granted directory as the sandbox user would read it.
func scanHost(dir string) (proto.ScanResult, error) {
	var res proto.ScanResult
	root, err := os.OpenRoot(dir)
	if err != nil {
		return res, err
	}
	defer root.Close()
	if err := hosttree.Scan(root.Name(), &res, hosttree.ReadableBy(sandboxUID, sandboxUID)); err != nil {
		return res, fmt.Errorf("%w (the server reads the tree as uid %d would: make it readable to that user)", err, sandboxUID)
	}
	return res, nil
}

// fillMounts copies a job's granted mounts into its pod's /mnt and makes
// them read-only, before the job is handed over. The caller has checked
// them with scanMounts (the copy still stops at the limit if they grew).
func (r *Runtime) fillMounts(ctx context.Context, pod string, ms []sandbox.Mount) error {
	if len(ms) == 0 {
		return nil
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		tw := tar.NewWriter(pw)
		var err error
		for _, m := range ms {
			if err = writeHostTree(tw, m.Source, path.Base(m.Target), r.mountBytes); err != nil {
				break
			}
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
		written <- err
	}()
	argv := []string{"/bin/sh", "-c", `tar -x -f - -C "$0" && chmod -R a-w "$@"`, mountsDir}
	for _, m := range ms {
		argv = append(argv, m.Target)
	}
	var errb strings.Builder
	code, err := r.exec(ctx, pod, argv, pr, io.Discard, &sandbox.LimitWriter{W: &errb, N: 4 << 10})
	pr.CloseWithError(errors.New("copy ended"))
	if werr := <-written; errors.Is(werr, hosttree.ErrTooLarge) {
		return fmt.Errorf("mounts: a mount grew past policy kubernetes.mount_mb=%d while it was copied", r.mountBytes>>20)
	} else if werr != nil {
		return fmt.Errorf("mounts: read the granted directory: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("mounts: copy into pod %s: %w", pod, err)
	}
	if code != 0 {
		return fmt.Errorf("mounts: copy into pod %s: exit %d: %s", pod, code, strings.TrimSpace(errb.String()))
	}
	return nil
}

// writeHostTree writes a granted directory to tw under prefix.
func writeHostTree(tw *tar.Writer, dir, prefix string, maxBytes int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return hosttree.WriteTar(tw, root, prefix, sandboxUID, sandboxUID, maxBytes, hosttree.ReadableBy(sandboxUID, sandboxUID), nil)
}

// StartHelper makes a helper of the server's own for an import: granted
// mounts are host paths no pod can see, so the server reads them itself.
// Its Exec runs only the supervisor's scan (in the server, as hosttree.Scan
// with the sandbox user's rights checked), its CopyFrom streams a tree as
// tar, and Remove forgets it. No pod is made.
func (r *Runtime) StartHelper(ctx context.Context, image string, mounts []sandbox.Mount) (string, error) {
	for _, m := range mounts {
		if m.Source == "" {
			return "", errors.New("a helper on backend kubernetes reads granted mounts only")
		}
	}
	id := hostHelperPrefix + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	r.helperMu.Lock()
	defer r.helperMu.Unlock()
	if r.helpers == nil {
		r.helpers = map[string][]sandbox.Mount{}
	}
	r.helpers[id] = mounts
	return id, nil
}

// hostHelper returns a helper's mounts; ok is false for a pod's name.
func (r *Runtime) hostHelper(id string) (ms []sandbox.Mount, ok bool) {
	if !strings.HasPrefix(id, hostHelperPrefix) {
		return nil, false
	}
	r.helperMu.Lock()
	defer r.helperMu.Unlock()
	ms, ok = r.helpers[id]
	return ms, true
}

func (r *Runtime) removeHostHelper(id string) {
	r.helperMu.Lock()
	defer r.helperMu.Unlock()
	delete(r.helpers, id)
}

// helperSource is the granted directory a helper sees at target (or below it).
func helperSource(ms []sandbox.Mount, id, p string) (dir string, err error) {
	p = path.Clean(p)
	for _, m := range ms {
		if p == path.Clean(m.Target) {
			return m.Source, nil
		}
	}
	return "", fmt.Errorf("%w: %s in helper %s", sandbox.ErrNotFound, p, id)
}

// helperExec runs the supervisor's scan or tar of a helper's mount in the
// server, with the sandbox user's rights checked (what it may not read is
// listed, never copied), as the supervisor in a helper would.
func (r *Runtime) helperExec(id string, ms []sandbox.Mount, o sandbox.ExecOptions) (int, error) {
	if len(o.Cmd) != 3 || o.Cmd[0] != supervisorPath || (o.Cmd[1] != proto.ScanCommand && o.Cmd[1] != proto.TarCommand) {
		return -1, fmt.Errorf("helper %s runs only the supervisor's %s and %s", id, proto.ScanCommand, proto.TarCommand)
	}
	dir, err := helperSource(ms, id, o.Cmd[2])
	if err != nil {
		return -1, err
	}
	if o.Cmd[1] == proto.TarCommand {
		return helperTar(dir, o)
	}
	res, err := scanHost(dir)
	if err != nil {
		res.Error = err.Error()
	}
	if o.Stdout != nil {
		_ = json.NewEncoder(o.Stdout).Encode(res)
	}
	if res.Error != "" {
		return 1, nil
	}
	return 0, nil
}

// helperTar writes dir as the supervisor's tar would: the tree on stdout,
// a TarResult on stderr.
func helperTar(dir string, o sandbox.ExecOptions) (int, error) {
	var res proto.TarResult
	err := func() error {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return err
		}
		defer root.Close()
		tw := tar.NewWriter(o.Stdout)
		if err := hosttree.WriteTar(tw, root, "", sandboxUID, sandboxUID, 0, hosttree.ReadableBy(sandboxUID, sandboxUID), res.Skip); err != nil {
			return err
		}
		return tw.Close()
	}()
	if err != nil {
		res.Error = err.Error()
	}
	if o.Stderr != nil {
		_ = json.NewEncoder(o.Stderr).Encode(res)
	}
	if res.Error != "" {
		return 1, nil
	}
	return 0, nil
}

// helperCopyFrom streams a helper's mount ("target/." or "target") as tar.
func helperCopyFrom(ms []sandbox.Mount, id, p string) (io.ReadCloser, error) {
	dir, err := helperSource(ms, id, strings.TrimSuffix(p, "/."))
	if err != nil {
		return nil, err
	}
	prefix := ""
	if !strings.HasSuffix(p, "/.") {
		prefix = path.Base(path.Clean(p))
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := writeHostTree(tw, dir, prefix, 0)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}

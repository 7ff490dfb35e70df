package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// A workspace on Kubernetes is a PersistentVolumeClaim (its files, at
// /workspace) and, while it runs, a pod of the same name whose main process
// is the supervisor's daemon (see supervisor.Daemons): stopping it deletes
// the pod and keeps the claim; starting it makes the pod again from the
// spec kept on the claim. Jobs go over one pods/exec of `sandboxer-supervisor
// connect` per workspace; plain commands, file helpers and tar copies are
// pods/exec too.

var _ sandbox.WorkspaceRuntime = (*Runtime)(nil)

const (
	// annWorkspace keeps a workspace's pod spec (image, limits, env) on its claim.
	annWorkspace = "dev.sandboxer/workspace-spec"
	// annWorkspaceName is the workspace's name (a label value could not hold every name).
	annWorkspaceName = "dev.sandboxer/workspace"
	// workspaceClaimSize is what a workspace's claim requests; the server's
	// disk quota (workspaces.disk_mb, measured with du) is what binds.
	workspaceClaimSize = 1 << 30
	// stopTimeout bounds the wait for a stopped workspace's pod to be gone.
	stopTimeout = time.Minute
)

// workspaceSpec is what a workspace's pod is made from, kept on its claim.
type workspaceSpec struct {
	Image  string         `json:"image"`
	Limits sandbox.Limits `json:"limits"`
	Env    []string       `json:"env,omitempty"`
	// Network is sandbox.NetworkEgress for a workspace made with egress:
	// its pod gets an egress tunnel (egress.go).
	Network string `json:"network,omitempty"`
	// Runtime is the pods' RuntimeClass ("" = the cluster's default).
	Runtime string `json:"runtime,omitempty"`
	// Mounts are granted host directories, copied into each of its pods
	// at /mnt/NAME when the pod starts (mounts.go).
	Mounts []sandbox.Mount `json:"mounts,omitempty"`
}

// CreateWorkspace creates the workspace's claim (its pod is made by StartWorkspace).
func (r *Runtime) CreateWorkspace(ctx context.Context, ws sandbox.WorkspaceSpec) (sandbox.WorkspaceRefs, error) {
	if err := r.checkNetwork(ws.Network); err != nil {
		return sandbox.WorkspaceRefs{}, err
	}
	// Granted mounts: the server's host paths, copied into the pod at each
	// start (a pod cannot see them); checked now, before anything is made.
	mounts, err := hostMounts(ws.Mounts)
	if err != nil {
		return sandbox.WorkspaceRefs{}, err
	}
	if len(mounts) != len(ws.Mounts) {
		return sandbox.WorkspaceRefs{}, errors.New("a workspace mounts granted host directories only")
	}
	if err := r.scanMounts(mounts); err != nil {
		return sandbox.WorkspaceRefs{}, err
	}
	name := podPrefix + "ws-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	spec, _ := json.Marshal(workspaceSpec{Image: ws.Image, Limits: ws.Limits, Env: ws.Env, Network: ws.Network, Runtime: ws.Runtime, Mounts: mounts})
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: r.workspaceLabels(),
			Annotations: map[string]string{
				annInstance: r.instance, annServer: r.server, sandbox.LabelKind: sandbox.KindWorkspace,
				annWorkspaceName: ws.Name, annWorkspace: string(spec),
			},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(workspaceClaimSize, resource.BinarySI),
			}},
		},
	}
	if _, err := r.core.PersistentVolumeClaims(r.namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return sandbox.WorkspaceRefs{}, r.engineErr(fmt.Errorf("create persistent volume claim: %w", err))
	}
	return sandbox.WorkspaceRefs{ContainerID: name, Volume: name}, nil
}

func (r *Runtime) workspaceLabels() map[string]string {
	return map[string]string{
		sandbox.LabelManaged:  "true",
		sandbox.LabelInstance: labelValue(r.instance),
		sandbox.LabelServer:   labelValue(r.server),
		sandbox.LabelKind:     labelValue(sandbox.KindWorkspace),
	}
}

// StartWorkspace makes the workspace's pod (a running one is left alone)
// and waits until its daemon runs.
func (r *Runtime) StartWorkspace(ctx context.Context, id string) error {
	pod, err := r.core.Pods(r.namespace).Get(ctx, id, metav1.GetOptions{})
	switch {
	case err == nil && pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
		if err := r.waitRunning(ctx, pod, pod.Spec.Containers[0].Image); err != nil {
			return err
		}
		return r.workspaceTunnel(ctx, id)
	case err == nil:
		// Ended or going: make it again once it is gone.
		if err := r.deleteAndWait(ctx, id); err != nil {
			return err
		}
	case !apierrors.IsNotFound(err):
		return r.engineErr(fmt.Errorf("get pod %s: %w", id, err))
	}
	claim, err := r.core.PersistentVolumeClaims(r.namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return sandbox.ErrNotFound
		}
		return r.engineErr(fmt.Errorf("get persistent volume claim %s: %w", id, err))
	}
	var ws workspaceSpec
	if err := json.Unmarshal([]byte(claim.Annotations[annWorkspace]), &ws); err != nil || ws.Image == "" {
		return fmt.Errorf("persistent volume claim %s has no workspace spec (annotation %s)", id, annWorkspace)
	}
	r.wsTunnels.Drop(id) // a former pod's
	pod, err = r.core.Pods(r.namespace).Create(ctx, r.workspacePod(id, claim, ws), metav1.CreateOptions{})
	if err != nil {
		return r.engineErr(fmt.Errorf("create pod: %w", err))
	}
	if err := r.waitRunning(ctx, pod, ws.Image); err != nil {
		r.removeQuietly(id)
		return err
	}
	if err := r.scanMounts(ws.Mounts); err != nil { // the tree may have changed since
		r.removeQuietly(id)
		return err
	}
	if err := r.fillMounts(ctx, id, ws.Mounts); err != nil {
		r.removeQuietly(id)
		return err
	}
	if err := r.workspaceTunnel(ctx, id); err != nil {
		r.removeQuietly(id)
		return err
	}
	// The daemon's protocol is checked on its stream (its Hello is the
	// first frame of every connect), not in the log.
	return nil
}

// workspacePod is a job pod's hardening (podFor) with the daemon as its
// main process and the claim at /workspace.
func (r *Runtime) workspacePod(id string, claim *corev1.PersistentVolumeClaim, ws workspaceSpec) *corev1.Pod {
	pod := r.podFor(sandbox.Spec{Image: ws.Image, Limits: ws.Limits, Kind: sandbox.KindWorkspace, WorkDir: tmpPath, Runtime: ws.Runtime})
	pod.GenerateName, pod.Name = "", id
	pod.Labels = r.workspaceLabels()
	pod.Annotations[annWorkspaceName] = claim.Annotations[annWorkspaceName]
	if ws.Network == sandbox.NetworkEgress {
		pod.Annotations[annEgress] = "true"
	}
	c := &pod.Spec.Containers[0]
	c.Command = []string{"/bin/sh", "-c", `exec "$0" "$1" 2>>` + terminationLog, supervisorPath, proto.DaemonCommand}
	c.Stdin, c.StdinOnce = false, false
	c.WorkingDir = defaultWorkDir
	for _, kv := range ws.Env {
		k, v, _ := strings.Cut(kv, "=")
		c.Env = append(c.Env, corev1.EnvVar{Name: k, Value: v})
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "workspace", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name},
	}})
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "workspace", MountPath: defaultWorkDir})
	if len(ws.Mounts) > 0 {
		v, m := r.mountsVolume()
		pod.Spec.Volumes, c.VolumeMounts = append(pod.Spec.Volumes, v), append(c.VolumeMounts, m)
	}
	return pod
}

// deleteAndWait deletes a pod and waits (bounded) until it is gone, so a
// pod of the same name can be made again.
func (r *Runtime) deleteAndWait(ctx context.Context, id string) error {
	if err := r.Remove(ctx, id); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	for {
		_, err := r.core.Pods(r.namespace).Get(ctx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return r.engineErr(fmt.Errorf("get pod %s: %w", id, err))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s is still there %s after its deletion", id, stopTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StopWorkspace deletes the workspace's pod (its jobs end with it); the
// claim and its files stay.
func (r *Runtime) StopWorkspace(ctx context.Context, id string) error {
	r.daemons.Drop(id)
	r.wsTunnels.Drop(id)
	return r.deleteAndWait(ctx, id)
}

// WorkspaceRunning says whether the workspace's pod runs; ErrNotFound when
// its claim is gone too.
func (r *Runtime) WorkspaceRunning(ctx context.Context, id string) (bool, error) {
	if r.daemons.Live(id) != nil {
		return true, nil // its daemon's stream ends when the pod goes
	}
	pod, err := r.core.Pods(r.namespace).Get(ctx, id, metav1.GetOptions{})
	if err == nil {
		if pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning {
			return true, nil
		}
	} else if !apierrors.IsNotFound(err) {
		return false, r.engineErr(fmt.Errorf("get pod %s: %w", id, err))
	}
	claim, err := r.core.PersistentVolumeClaims(r.namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, sandbox.ErrNotFound
		}
		return false, r.engineErr(fmt.Errorf("get persistent volume claim %s: %w", id, err))
	}
	if claim.DeletionTimestamp != nil {
		return false, sandbox.ErrNotFound // being deleted (its finalizer waits for the pod)
	}
	return false, nil
}

// RemoveWorkspace deletes the pod, then the claim; idempotent.
func (r *Runtime) RemoveWorkspace(ctx context.Context, refs sandbox.WorkspaceRefs) error {
	if refs.ContainerID != "" {
		r.daemons.Drop(refs.ContainerID)
		r.wsTunnels.Drop(refs.ContainerID)
		if err := r.deleteAndWait(ctx, refs.ContainerID); err != nil {
			return err
		}
	}
	if refs.Volume != "" {
		err := r.core.PersistentVolumeClaims(r.namespace).Delete(ctx, refs.Volume, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return r.engineErr(fmt.Errorf("delete persistent volume claim %s: %w", refs.Volume, err))
		}
	}
	return nil
}

// RootExec: an install pod has no network (the cluster's pods have none),
// so installs go through the tunnel over pods/exec; and pods/exec cannot
// run as root (restricted pods run as uid 1000), so apt unpacks packages
// into the workspace's claim.
func (r *Runtime) RootExec() bool { return false }

// InstallsThroughTunnel: install pods have no network on any install network.
func (r *Runtime) InstallsThroughTunnel(string) bool { return true }

var _ sandbox.TunnelInstaller = (*Runtime)(nil)

// StartInstaller makes a workspace's install pod: the workspace pod's spec
// and hardening (image, limits, environment, uid 1000, no network: network
// is ignored), the workspace's claim at /workspace, on the workspace pod's
// node (the claim is ReadWriteOnce), its main process a sleep. Installs run
// there through the tunnel (Exec with ExecOptions.Proxy), never in the
// workspace pod where jobs run: no job can reach the tunnel's proxy.
func (r *Runtime) StartInstaller(ctx context.Context, workspaceContainerID, network string) (string, error) {
	ws, err := r.core.Pods(r.namespace).Get(ctx, workspaceContainerID, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", sandbox.ErrNotFound
		}
		return "", r.engineErr(fmt.Errorf("get pod %s: %w", workspaceContainerID, err))
	}
	claim, err := r.core.PersistentVolumeClaims(r.namespace).Get(ctx, workspaceContainerID, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", sandbox.ErrNotFound
		}
		return "", r.engineErr(fmt.Errorf("get persistent volume claim %s: %w", workspaceContainerID, err))
	}
	var spec workspaceSpec
	if err := json.Unmarshal([]byte(claim.Annotations[annWorkspace]), &spec); err != nil || spec.Image == "" {
		return "", fmt.Errorf("persistent volume claim %s has no workspace spec (annotation %s)", claim.Name, annWorkspace)
	}
	pod := r.installerPod(claim, spec, ws.Spec.NodeName)
	pod, err = r.core.Pods(r.namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return "", r.engineErr(fmt.Errorf("create install pod: %w", err))
	}
	if err := r.waitRunning(ctx, pod, spec.Image); err != nil {
		r.removeQuietly(pod.Name)
		return "", err
	}
	return pod.Name, nil
}

// installerPod is the workspace pod's spec as a helper pod that sleeps,
// pinned to node (when known).
func (r *Runtime) installerPod(claim *corev1.PersistentVolumeClaim, ws workspaceSpec, node string) *corev1.Pod {
	pod := r.workspacePod(claim.Name, claim, ws)
	pod.Name, pod.GenerateName = "", podPrefix+"install-"
	pod.Labels = r.podFor(sandbox.Spec{Kind: sandbox.KindHelper}).Labels
	pod.Annotations[sandbox.LabelKind] = sandbox.KindHelper
	delete(pod.Annotations, annEgress) // its installs have a tunnel of their own
	c := &pod.Spec.Containers[0]
	c.Command = []string{"sleep", "infinity"}
	if node != "" {
		pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}}
	}
	return pod
}

// OOMKilled says whether the pod's container was killed for memory.
func (r *Runtime) OOMKilled(ctx context.Context, id string) (bool, error) {
	pod, err := r.core.Pods(r.namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false, sandbox.ErrNotFound
		}
		return false, r.engineErr(fmt.Errorf("get pod %s: %w", id, err))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if t != nil && t.Reason == "OOMKilled" {
				return true, nil
			}
		}
	}
	return false, nil
}

// dialDaemon makes the stream to a workspace pod's daemon: a pods/exec of
// `sandboxer-supervisor connect`, which pipes it to the daemon's socket.
// pods/exec cannot choose a user: it runs as the pod's (uid 1000).
func (r *Runtime) dialDaemon(ctx context.Context, id string, diag io.Writer) (supervisor.Stream, error) {
	if running, err := r.WorkspaceRunning(ctx, id); err != nil {
		return supervisor.Stream{}, err
	} else if !running {
		return supervisor.Stream{}, fmt.Errorf("workspace pod %s is not running: %w", id, sandbox.ErrNotFound)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := r.exec(sctx, id, []string{supervisorPath, proto.ConnectCommand}, inR, outW, diag)
		if err == nil {
			err = io.EOF
		}
		inW.Close()
		outW.CloseWithError(err)
	}()
	// Closing ends the exec and drains what it still copies (a closed pipe
	// would have client-go log the failed copy).
	closeR := func() {
		cancel()
		go func() { _, _ = io.Copy(io.Discard, outR) }()
	}
	return supervisor.Stream{Conn: supervisor.PipeConn(inW), R: outR, CloseR: closeR}, nil
}

// StartIn runs spec as a job on a new channel of the workspace's stream.
func (r *Runtime) StartIn(ctx context.Context, id string, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	// A workspace made with egress: its tunnel again if it broke (or this
	// server adopted the running pod).
	if err := r.workspaceTunnel(ctx, id); err != nil {
		return nil, err
	}
	ch, pr, err := r.daemons.OpenJob(ctx, id, spec.JobID)
	if err != nil {
		return nil, err
	}
	h := newHandle(r, id)
	h.ws, h.key, h.ch = ch.Stream(), ch.Key(), ch
	h.C.W = supervisor.ConnWriter(ch)
	go h.C.ReadUntilEnd(pr, func() { pr.Close() })
	if err := h.launch(ctx, spec, out); err != nil {
		ch.Close()
		return nil, err
	}
	go h.waitForEnd()
	return h, nil
}

// adoptDaemonJob re-attaches a job a previous server started in a
// workspace: the daemon replays its output past what was captured.
func (r *Runtime) adoptDaemonJob(ctx context.Context, id, key string, skipStdout, skipStderr int64, out sandbox.Output) (sandbox.Handle, error) {
	c, err := r.daemons.Conn(ctx, id)
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, sandbox.ErrNotFound // the workspace stopped: its jobs with it
		}
		return nil, err
	}
	ch, pr := supervisor.NewChannel(key, skipStdout, skipStderr)
	h := newHandle(r, id)
	h.ws, h.key, h.ch = c, key, ch
	h.C.W = supervisor.ConnWriter(ch)
	// The daemon kept the job's input and terminal for the next server.
	h.C.HasStdin, h.C.TTY, h.C.Kept = true, true, true
	h.C.Out.Set(out, 0, 0) // the daemon sends only what was not captured
	// Reading first: the replay comes before the daemon's answer.
	go h.C.ReadUntilEnd(pr, func() { pr.Close() })
	known, err := c.Attach(ctx, ch)
	if err != nil || !known {
		ch.EndChannel()
		if err == nil {
			err = sandbox.ErrNotFound
		}
		return nil, err
	}
	go h.waitForEnd()
	return h, nil
}

// Exec runs a plain command in a running workspace (or install) pod through pods/exec,
// in /workspace, as the pod's user: pods/exec cannot choose one, and a
// workspace pod has no root (runAsNonRoot), so User "0:0" runs as uid 1000
// too (every file under /workspace is uid 1000's here: no root install
// makes any). Env is set through env(1). With o.Proxy it runs through the
// tunnel (sandbox.ExecThroughTunnel): separate stdin, stdout and stderr, no
// TTY, and it returns when the process ends.
func (r *Runtime) Exec(ctx context.Context, id string, o sandbox.ExecOptions) (int, error) {
	if ms, ok := r.hostHelper(id); ok {
		return r.helperExec(id, ms, o)
	}
	if o.Proxy != nil { // no network in the pod: through the exec's own stream
		return sandbox.ExecThroughTunnel(ctx, o, func(ctx context.Context, o sandbox.ExecOptions) (int, error) {
			return r.Exec(ctx, id, o)
		})
	}
	argv := o.Cmd
	if len(o.Env) > 0 {
		argv = append(append([]string{"env"}, o.Env...), o.Cmd...)
	}
	stdout, stderr := o.Stdout, o.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	code, err := r.exec(ctx, id, argv, o.Stdin, stdout, stderr)
	if err != nil && strings.Contains(err.Error(), "not running") {
		return -1, sandbox.ErrNotFound
	}
	return code, err
}

// CopyFrom streams a path of a running workspace pod as a tar archive
// ("dir/." gives dir's contents), through tar in the pod.
func (r *Runtime) CopyFrom(ctx context.Context, id, p string) (io.ReadCloser, error) {
	if ms, ok := r.hostHelper(id); ok {
		return helperCopyFrom(ms, id, p)
	}
	dir, base := path.Split(strings.TrimSuffix(p, "/"))
	if dir == "" {
		dir = "."
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		var errb strings.Builder
		code, err := r.exec(ctx, id, []string{"tar", "-c", "-f", "-", "-C", dir, base}, nil, pw, &sandbox.LimitWriter{W: &errb, N: 4 << 10})
		if err == nil && code != 0 {
			err = fmt.Errorf("copy %s from pod %s: tar exited %d: %s", p, id, code, strings.TrimSpace(errb.String()))
		}
		pw.CloseWithError(err)
	}()
	return &copyReader{PipeReader: pr, cancel: cancel}, nil
}

// copyReader is CopyFrom's archive: closing it ends the exec and drains
// what is still on its way (a tar reader stops before tar's padding).
type copyReader struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (c *copyReader) Close() error {
	c.cancel()
	go func() { _, _ = io.Copy(io.Discard, c.PipeReader) }()
	return nil
}

// CopyTo extracts a tar archive into a directory of a running workspace
// pod, through tar in the pod (as uid 1000: owners are not kept).
func (r *Runtime) CopyTo(ctx context.Context, id, dir string, archive io.Reader) error {
	var errb strings.Builder
	code, err := r.exec(ctx, id, []string{"tar", "-x", "-f", "-", "-C", dir}, archive, io.Discard, &sandbox.LimitWriter{W: &errb, N: 4 << 10})
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("copy into %s of pod %s: tar exited %d: %s", dir, id, code, strings.TrimSpace(errb.String()))
	}
	return nil
}

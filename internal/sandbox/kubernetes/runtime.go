// Package kubernetes implements sandbox.Runtime on the Kubernetes API with
// client-go: one Pod per job, hardened in its spec, whose only container runs
// the image's sandboxer-supervisor. The supervisor's frames travel over the
// pods/attach subresource (its stdout; its stderr is diagnostics), exactly as
// they do over Docker's attach; a restarted server reads them back from the
// container's log (pods/log). It is the only package that imports client-go.
package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor"
)

const (
	// supervisorPath is where every image carries the supervisor.
	supervisorPath = "/usr/local/bin/sandboxer-supervisor"
	// terminationLog is the container's termination message file (the
	// kubelet's default path, world-writable): the supervisor's stderr.
	terminationLog = "/dev/termination-log"
	defaultWorkDir = "/workspace"
	tmpPath        = "/tmp"
	homePath       = "/home/sandbox"
	homeSize       = 64 << 20
	// podPrefix begins every pod's name (generateName).
	podPrefix = "sandboxer-"
	// containerName is the pod's only container.
	containerName = "job"
	// sandboxUID is the images' non-root user.
	sandboxUID = 1000
	// startTimeout bounds the wait for a pod's container to run.
	startTimeout = 2 * time.Minute
	// cleanupTimeout bounds the calls made after the caller's context is gone.
	cleanupTimeout = 30 * time.Second
	// drainTimeout bounds how long we wait for output after the end is known.
	drainTimeout = 5 * time.Second
)

// Annotations keep the exact values that the labels can only carry as hashes
// (a label value is at most 63 characters of [A-Za-z0-9_.-]).
const (
	annInstance = "dev.sandboxer/instance"
	annServer   = "dev.sandboxer/server"
	annJobID    = "dev.sandboxer/job-id"
)

// Runtime runs sandboxes as Pods in one namespace.
type Runtime struct {
	core      coreV1
	cfg       *rest.Config
	host      string
	namespace string
	instance  string
	server    string

	// Removals under way (removeLater), counted under removeMu: a
	// WaitGroup's Add from zero may not race its Wait (Close).
	removeMu   sync.Mutex
	removing   int
	removeIdle chan struct{} // closed while removing == 0

	onError func(operation string) // WithErrorHook

	// daemons are the streams to workspace pods' daemons (workspace.go).
	daemons *supervisor.Daemons

	// egressProxy serves the egress tunnels (egress.go); nil: none.
	egressProxy http.Handler
	wsTunnels   sandbox.WorkspaceTunnels // workspace pods' egress tunnels
	// mountBytes bounds the granted mounts copied into a job's pod (mounts.go).
	mountBytes int64
	// largest keeps LargestSandbox's answer a while (capacity.go).
	largest largest
	// helpers are StartHelper's helpers of the server's own, by id.
	helperMu sync.Mutex
	helpers  map[string][]sandbox.Mount
}

var _ sandbox.Runtime = (*Runtime)(nil)

// Option configures a Runtime.
type Option func(*Runtime)

// WithServer labels every pod with the server process's identity.
func WithServer(id string) Option { return func(r *Runtime) { r.server = id } }

// WithErrorHook tells f of each failed API call, by operation (the error's
// leading words, e.g. "create pod"), for the metrics.
func WithErrorHook(f func(operation string)) Option { return func(r *Runtime) { r.onError = f } }

// Config says which cluster and namespace: Kubeconfig "" means KUBECONFIG,
// else ~/.kube/config; Namespace "" means the kubeconfig context's, else
// "default". MountBytes bounds the granted mounts a job's pod gets a copy
// of (0 = DefaultMountBytes).
type Config struct {
	Kubeconfig string
	Namespace  string
	MountBytes int64
}

// New connects to the cluster cfg names. It succeeds while the cluster is
// down (the first call fails instead), like the Docker runtime.
func New(instance string, cfg Config, opts ...Option) (*Runtime, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if cfg.Kubeconfig != "" {
		rules.ExplicitPath = cfg.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfigName(cfg.Kubeconfig), err)
	}
	ns := cfg.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	if rc.QPS == 0 {
		// client-go's default (5 a second, bursts of 10) throttles a server
		// starting pods for several jobs and a warm pool at once.
		rc.QPS, rc.Burst = 50, 100
	}
	core, err := newCoreV1(rc)
	if err != nil {
		return nil, err
	}
	r := &Runtime{core: core, cfg: rc, host: rc.Host, namespace: ns, instance: instance, mountBytes: cfg.MountBytes}
	if r.mountBytes <= 0 {
		r.mountBytes = DefaultMountBytes
	}
	for _, o := range opts {
		o(r)
	}
	r.daemons = &supervisor.Daemons{Dial: r.dialDaemon, Running: r.WorkspaceRunning, EngineErr: r.engineErr}
	return r, nil
}

func kubeconfigName(explicit string) string {
	switch {
	case explicit != "":
		return explicit
	case os.Getenv("KUBECONFIG") != "":
		return "KUBECONFIG=" + os.Getenv("KUBECONFIG")
	}
	return "~/.kube/config"
}

// Host names the API server and the namespace, for logs.
func (r *Runtime) Host() string { return r.host + " namespace " + r.namespace }

// Namespace is where the pods go.
func (r *Runtime) Namespace() string { return r.namespace }

// Close waits (bounded) for pod removals under way.
func (r *Runtime) Close() error {
	r.daemons.Close()      // the daemons keep the jobs for the next server
	r.wsTunnels.CloseAll() // their egress goes with this server
	r.removeMu.Lock()
	idle, busy := r.removeIdle, r.removing > 0
	r.removeMu.Unlock()
	if busy {
		select {
		case <-idle:
		case <-time.After(cleanupTimeout):
		}
	}
	return nil
}

// engineErr types a failed API call (connection failures become a
// sandbox.EngineError) and counts it through the error hook.
func (r *Runtime) engineErr(err error) error {
	if err == nil {
		return nil
	}
	if r.onError != nil && !errors.Is(err, context.Canceled) {
		r.onError(operation(err))
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) || errors.Is(err, context.Canceled) {
		return err
	}
	return &sandbox.EngineError{Host: "Kubernetes API " + r.host, Err: err, Hint: kubeHint}
}

func (r *Runtime) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.core.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return &sandbox.EngineError{Host: "Kubernetes API " + r.host, Err: err, Hint: kubeHint}
	}
	return nil
}

// ImageExists says whether a node reports the image among its own (the
// kubelet's node status; pods never pull, see podFor). The list lags an
// import by up to the kubelet's status period.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	nodes, err := r.core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, r.engineErr(fmt.Errorf("list nodes: %w", err))
	}
	want := map[string]bool{ref: true, "docker.io/" + ref: true, "docker.io/library/" + ref: true}
	for _, n := range nodes.Items {
		for _, img := range n.Status.Images {
			for _, name := range img.Names {
				if want[name] {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// labelValue turns any string into a valid label value that stands for it.
func labelValue(s string) string {
	if s == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(s))
	return "h" + hex.EncodeToString(sum[:20])
}

func (r *Runtime) selector() string {
	if r.instance == "" {
		return sandbox.LabelManaged + "=true"
	}
	return sandbox.LabelInstance + "=" + labelValue(r.instance)
}

// kubeHint is what to do when the cluster does not answer.
const kubeHint = "check the cluster (kubectl get --raw /readyz) and the server's kubeconfig (policy kubernetes.kubeconfig, KUBECONFIG, or the in-cluster service account)"

// podFor is the hardening profile (docs/architecture.md, "The hardening
// profile") stated in a pod spec.
func (r *Runtime) podFor(spec sandbox.Spec) *corev1.Pod {
	l := spec.Limits
	workdir := spec.WorkDir
	if workdir == "" {
		workdir = defaultWorkDir
	}
	yes, no := true, false
	uid := int64(sandboxUID)
	grace := int64(0)
	res := corev1.ResourceList{}
	if l.MemoryBytes > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(l.MemoryBytes, resource.BinarySI)
	}
	if l.NanoCPUs > 0 {
		res[corev1.ResourceCPU] = *resource.NewMilliQuantity(max(l.NanoCPUs/1e6, 1), resource.DecimalSI)
	}
	type vol struct {
		name, path string
		size       int64
	}
	vols := []vol{{"tmp", tmpPath, l.TmpBytes}, {"home", homePath, homeSize}}
	if workdir != tmpPath && workdir != homePath {
		vols = append(vols, vol{"work", workdir, l.WorkdirBytes})
	}
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range vols {
		ed := &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
		if v.size > 0 {
			ed.SizeLimit = resource.NewQuantity(v.size, resource.BinarySI)
		}
		volumes = append(volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{EmptyDir: ed}})
		mounts = append(mounts, corev1.VolumeMount{Name: v.name, MountPath: v.path})
	}
	cv, cm := claimMounts(spec)
	volumes, mounts = append(volumes, cv...), append(mounts, cm...)
	if hm, _ := hostMounts(spec.Mounts); len(hm) > 0 { // granted mounts, copied in before the job (mounts.go)
		v, m := r.mountsVolume()
		volumes, mounts = append(volumes, v), append(mounts, m)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: podPrefix,
			Labels: map[string]string{
				sandbox.LabelManaged:  "true",
				sandbox.LabelInstance: labelValue(r.instance),
				sandbox.LabelServer:   labelValue(r.server),
				sandbox.LabelJobID:    labelValue(spec.JobID),
				sandbox.LabelKind:     labelValue(spec.Kind),
			},
			Annotations: map[string]string{
				annInstance: r.instance, annServer: r.server, annJobID: spec.JobID,
				sandbox.LabelKind: spec.Kind, sandbox.LabelNetwork: spec.Network,
			},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			// No resolver: a pod's names never need one (egress goes through
			// the tunnel to the proxy, which resolves the allowed names
			// itself), and the cluster's DNS would answer any name a job
			// sent it, a way out for data. 0.0.0.0 is the pod's own
			// namespace, where nothing answers (as Docker's noResolver).
			DNSPolicy:                     corev1.DNSNone,
			DNSConfig:                     &corev1.PodDNSConfig{Nameservers: []string{"0.0.0.0"}},
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  containerName,
				Image: spec.Image,
				// The supervisor waits for the job on its stdin; the job's own
				// command is never the container's. Its own stderr goes to the
				// termination message, not the container's log: the log
				// merges both streams, and adoption reads frames back from it
				// (a diagnostic line there, such as "server input ended",
				// would break the frames that follow).
				Command:    []string{"/bin/sh", "-c", `exec "$0" 2>>` + terminationLog, supervisorPath},
				WorkingDir: workdir,
				Stdin:      true,
				// StdinOnce: when the server goes, the supervisor sees its input
				// end (and keeps the job running).
				StdinOnce: true,
				// There is no registry: an image is present on the node or missing.
				ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
					AllowPrivilegeEscalation: &no, Privileged: &no,
					ReadOnlyRootFilesystem: &yes,
					Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:         &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
				Resources:                corev1.ResourceRequirements{Limits: res, Requests: res},
				VolumeMounts:             mounts,
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: volumes,
			// The policy's runtime names a RuntimeClass (e.g. runsc: gVisor).
			RuntimeClassName: runtimeClass(spec.Runtime),
		},
	}
}

// runtimeClass is a pod's runtimeClassName: nil for the cluster's default.
func runtimeClass(name string) *string {
	if name == "" {
		return nil
	}
	return &name
}

// Start creates the pod, waits for its supervisor to run, attaches to it and
// hands it the job.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	if err := checkMounts(spec); err != nil {
		return nil, err
	}
	if err := r.checkNetwork(spec.Network); err != nil {
		return nil, err
	}
	mounts, err := hostMounts(spec.Mounts)
	if err != nil {
		return nil, err
	}
	if err := r.scanMounts(mounts); err != nil {
		return nil, err // before any pod is made
	}
	room := &roomWait{}
	pod, err := r.createPod(ctx, r.podFor(spec), room)
	if err != nil {
		return nil, err
	}
	name := pod.Name
	fail := func(err error) (sandbox.Handle, error) {
		r.removeQuietly(name)
		return nil, err
	}
	if err := r.waitPod(ctx, pod, spec.Image, room); err != nil {
		return fail(err)
	}
	if err := r.checkHello(ctx, name); err != nil {
		return fail(err)
	}
	if err := r.fillMounts(ctx, name, mounts); err != nil {
		return fail(err)
	}
	h := newHandle(r, name)
	if err := h.attach(); err != nil {
		return fail(err)
	}
	if err := h.openTunnel(ctx, spec); err != nil {
		h.closeInput()
		return fail(err)
	}
	if err := h.launch(ctx, spec, out); err != nil {
		h.closeInput()
		return fail(err)
	}
	go h.waitForEnd()
	return h, nil
}

// waitRunning waits until the pod's container runs (or cannot), for a
// job's start: while no node has room for the pod, it waits as long as ctx
// lasts, telling ctx why (sandbox.WaitingForCapacity), and startTimeout
// counts only the time it does not wait for room.
func (r *Runtime) waitRunning(ctx context.Context, pod *corev1.Pod, image string) error {
	return r.waitPod(ctx, pod, image, &roomWait{})
}

// waitPod is waitRunning with the state of the start's wait for room (a
// warm pod's fails at once instead: warmRoom).
func (r *Runtime) waitPod(ctx context.Context, pod *corev1.Pod, image string, room *roomWait) error {
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	room.deadline = deadline
	w, err := r.core.Pods(r.namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   "metadata.name=" + pod.Name,
		ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		return r.engineErr(fmt.Errorf("watch pod %s: %w", pod.Name, err))
	}
	defer w.Stop()
	check := func(p *corev1.Pod) (bool, error) {
		if err := room.placed(ctx, p); err != nil {
			return false, err
		}
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Running != nil:
				return true, nil
			case cs.State.Terminated != nil:
				t := cs.State.Terminated
				return false, fmt.Errorf("pod %s ended before its job was handed over: %s (exit %d) %s", p.Name, t.Reason, t.ExitCode, t.Message)
			case cs.State.Waiting != nil:
				switch cs.State.Waiting.Reason {
				case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
					return false, &sandbox.ImageError{Image: image}
				case "CreateContainerError", "CreateContainerConfigError", "RunContainerError":
					return false, fmt.Errorf("pod %s: %s: %s", p.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
				}
			}
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return false, fmt.Errorf("pod %s ended (%s) before its job was handed over: %s", p.Name, p.Status.Phase, p.Status.Message)
		}
		return false, nil
	}
	if ok, err := check(pod); ok || err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			if room.why != "" {
				return fmt.Errorf("pod %s waited for room (%s): %w", pod.Name, room.why, ctx.Err())
			}
			return fmt.Errorf("pod %s did not start (%s): %w", pod.Name, r.whyNotStarted(pod.Name), ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("pod %s did not start within %s (%s): %w", pod.Name, startTimeout, r.whyNotStarted(pod.Name), context.DeadlineExceeded)
		case ev, open := <-w.ResultChan():
			if !open {
				p, err := r.core.Pods(r.namespace).Get(ctx, pod.Name, metav1.GetOptions{})
				if err != nil {
					return r.engineErr(fmt.Errorf("pod %s: %w", pod.Name, err))
				}
				if ok, err := check(p); ok || err != nil {
					return err
				}
				return r.waitPod(ctx, p, image, room)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod {
				continue
			}
			if ev.Type == "DELETED" {
				return fmt.Errorf("pod %s was deleted before it started", pod.Name)
			}
			if ok, err := check(p); ok || err != nil {
				return err
			}
		}
	}
}

// whyNotStarted says what held a pod back, for the error of a start that
// missed its deadline: its phase and containers' waiting reasons, and its
// last events (scheduling, image, sandbox creation), newest last.
func (r *Runtime) whyNotStarted(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var parts []string
	if p, err := r.core.Pods(r.namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
		phase := "phase " + string(p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				phase += fmt.Sprintf(", container waiting: %s %s", w.Reason, w.Message)
			}
		}
		parts = append(parts, strings.TrimSpace(phase))
	}
	evs, err := r.core.Events(r.namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		parts = append(parts, "its events could not be read: "+err.Error())
	} else {
		parts = append(parts, podEvents(evs.Items, maxStartEvents))
	}
	return strings.Join(parts, "; ")
}

// maxStartEvents is how many of a pod's last events a start error quotes.
const maxStartEvents = 5

// podEvents are a pod's last n events as "Reason: message", oldest first.
func podEvents(evs []corev1.Event, n int) string {
	if len(evs) == 0 {
		return "no events"
	}
	at := func(e corev1.Event) time.Time {
		for _, t := range []time.Time{e.EventTime.Time, e.LastTimestamp.Time, e.FirstTimestamp.Time} {
			if !t.IsZero() {
				return t
			}
		}
		return e.CreationTimestamp.Time
	}
	sort.SliceStable(evs, func(i, j int) bool { return at(evs[i]).Before(at(evs[j])) })
	if len(evs) > n {
		evs = evs[len(evs)-n:]
	}
	lines := make([]string, 0, len(evs))
	for _, e := range evs {
		msg := strings.TrimSpace(e.Message)
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		lines = append(lines, e.Reason+": "+msg)
	}
	return "events: " + strings.Join(lines, " | ")
}

// Adopt follows a pod a previous server process started: the supervisor's
// frames are read back from the container's log from the start, skipping
// job output already captured, until the end.
func (r *Runtime) Adopt(ctx context.Context, id string, skipStdout, skipStderr int64, out sandbox.Output) (sandbox.Handle, error) {
	if pod, key, ok := strings.Cut(id, "/"); ok {
		return r.adoptDaemonJob(ctx, pod, key, skipStdout, skipStderr, out)
	}
	pod, err := r.core.Pods(r.namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) {
			return nil, sandbox.ErrNotFound
		}
		return nil, r.engineErr(err)
	}
	if r.instance != "" && pod.Annotations[annInstance] != r.instance {
		return nil, fmt.Errorf("pod %s does not belong to this server", id)
	}
	h := newHandle(r, id)
	h.C.Out.Set(out, skipStdout, skipStderr)
	if err := h.followLog(ctx); err != nil {
		return nil, err
	}
	if pod.Annotations[sandbox.LabelNetwork] == sandbox.NetworkEgress && r.egressProxy != nil {
		// Its tunnel went with the former server: a new one keeps its
		// grant working. One that cannot open leaves the job without
		// egress (its requests fail to connect), not without its result.
		_ = h.openTunnel(ctx, sandbox.Spec{Network: sandbox.NetworkEgress})
	}
	go h.waitForEnd()
	return h, nil
}

func (r *Runtime) List(ctx context.Context) ([]sandbox.Container, error) {
	pods, err := r.core.Pods(r.namespace).List(ctx, metav1.ListOptions{LabelSelector: r.selector()})
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("list pods: %w", err))
	}
	var out []sandbox.Container
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue // being removed
		}
		out = append(out, sandbox.Container{
			ID:       p.Name,
			JobID:    p.Annotations[annJobID],
			Kind:     p.Annotations[sandbox.LabelKind],
			Instance: p.Annotations[annInstance],
			Server:   p.Annotations[annServer],
			Running:  p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending,
		})
	}
	return out, nil
}

// Remove deletes a pod at once (no grace: the kubelet kills what runs in it);
// a pod already gone is success.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	if _, ok := r.hostHelper(id); ok {
		r.removeHostHelper(id)
		return nil
	}
	_, err := r.remove(ctx, id)
	return err
}

func (r *Runtime) remove(ctx context.Context, id string) (alreadyGone bool, err error) {
	grace := int64(0)
	err = r.core.Pods(r.namespace).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(err), apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		return true, nil
	}
	return false, r.engineErr(fmt.Errorf("delete pod %s: %w", id, err))
}

func (r *Runtime) removeQuietly(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = r.Remove(ctx, id)
}

// removeLater deletes an ended pod in the background; Close waits for it.
func (r *Runtime) removeLater(id string) {
	r.removeMu.Lock()
	if r.removing == 0 {
		r.removeIdle = make(chan struct{})
	}
	r.removing++
	r.removeMu.Unlock()
	go func() {
		defer func() {
			r.removeMu.Lock()
			if r.removing--; r.removing == 0 {
				close(r.removeIdle)
			}
			r.removeMu.Unlock()
		}()
		r.removeQuietly(id)
	}()
}

// exitOf reads how the pod's container ended from its status.
func (r *Runtime) exitOf(ctx context.Context, id string) (sandbox.ExitStatus, bool) {
	pod, err := r.core.Pods(r.namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return sandbox.ExitStatus{ExitCode: -1, Gone: true}, true
		}
		return sandbox.ExitStatus{ExitCode: -1, Err: r.engineErr(err)}, true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			st := sandbox.ExitStatus{ExitCode: int(t.ExitCode), OOMKilled: t.Reason == "OOMKilled",
				StartedAt: t.StartedAt.Time, FinishedAt: t.FinishedAt.Time}
			if m := strings.TrimSpace(t.Message); m != "" {
				// The supervisor's stderr (see podFor), for a supervisor
				// that ended without a report.
				st.StartErr = errors.New(m)
			}
			return st, true
		}
	}
	return sandbox.ExitStatus{}, false
}

// operation is a failed call's leading words without the pod's name ("exec
// in pod", "create pod"): a metrics label takes a bounded set of values.
func operation(err error) string {
	op, _, _ := strings.Cut(err.Error(), ":")
	words := strings.Fields(op)
	kept := words[:0]
	for _, w := range words {
		if !strings.HasPrefix(w, podPrefix) {
			kept = append(kept, w)
		}
	}
	return strings.Join(kept, " ")
}

var _ sandbox.Engine = (*Runtime)(nil)

// Capabilities: a pod has no network of its own here (NetworkPolicy denies
// it), so egress, installs and volume fills go through the tunnel over exec.
func (r *Runtime) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{Warm: r, Workspaces: r, Volumes: r, VolumeFiller: r, Processes: r, EgressTunnel: r, TunnelInstalls: r, Capacity: r}
}

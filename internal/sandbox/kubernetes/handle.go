package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// deadlineBackstop: the supervisor stops a job this long after its
// timeout by itself, for a server that is gone.
const deadlineBackstop = time.Second

// handle is one pod whose supervisor runs one job.
type handle struct {
	rt                  *Runtime
	name                string
	supervisor.Attached // the supervisor's stream

	stdin      *io.PipeWriter // frames to the supervisor (the attach's stdin); nil when adopted
	cancel     context.CancelFunc
	followsLog bool // output read back from the container's log (adopted)
	attachErr  error
	// ws is set when the job is a channel of a workspace daemon's stream
	// (kill mode "tree"); key names it there, ch is its side of the stream.
	ws  *supervisor.Daemon
	key string
	ch  *supervisor.Channel
	// tunnel is the job's egress tunnel (network egress), closed with it.
	tunnel *sandbox.Tunnel

	done      chan struct{}
	destroyed chan struct{}
	destroyMu sync.Once
	status    sandbox.ExitStatus
}

func newHandle(rt *Runtime, name string) *handle {
	return &handle{
		rt: rt, name: name,
		Attached:  supervisor.Attach(),
		done:      make(chan struct{}),
		destroyed: make(chan struct{}),
	}
}

// ContainerID is the pod's name; a workspace job's adds its key, by which a
// later server re-attaches it.
func (h *handle) ContainerID() string {
	if h.ws != nil {
		return h.name + "/" + h.key
	}
	return h.name
}

func (h *handle) Done() <-chan struct{}      { return h.done }
func (h *handle) Status() sandbox.ExitStatus { <-h.done; return h.status }

func (h *handle) ended() bool { return h.C.Ended() }

// attach joins the pod's container through pods/attach: frames to its
// stdin, its stdout parsed as frames. The
// stream lives until the container ends (or Close).
func (h *handle) attach() error {
	req := h.rt.core.RESTClient().Post().Namespace(h.rt.namespace).
		Resource("pods").Name(h.name).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: containerName, Stdin: true, Stdout: true}, paramCodec)
	exec, err := remotecommand.NewSPDYExecutor(h.rt.cfg, "POST", req.URL())
	if err != nil {
		return fmt.Errorf("attach to pod %s: %w", h.name, err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	h.stdin, h.cancel = inW, cancel
	h.C.W = supervisor.PipeWriter(inW)
	go func() {
		// No stderr: the supervisor's goes to the termination message (see
		// podFor), and containerd ends an attach whose stderr ends, closing
		// the container's stdin with it.
		err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW})
		h.attachErr = err
		// Writers still waiting fail; the stream's own copy of stdin sees an end.
		inW.Close()
		outW.CloseWithError(err)
	}()
	go h.C.ReadUntilEnd(outR, func() { outR.Close() })
	return nil
}

// followLog reads the container's log (frames from the start) until it ends.
func (h *handle) followLog(ctx context.Context) error {
	lctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.followsLog = true
	rc, err := h.rt.core.Pods(h.rt.namespace).GetLogs(h.name, &corev1.PodLogOptions{Container: containerName, Follow: true}).Stream(lctx)
	if err != nil {
		cancel()
		return h.rt.engineErr(fmt.Errorf("read the log of pod %s: %w", h.name, err))
	}
	go h.C.ReadUntilEnd(rc, func() { rc.Close() })
	return nil
}

// openTunnel opens the job's egress tunnel into its pod, for a job on
// network egress: its grant (the spec's HTTP_PROXY token) passes there.
func (h *handle) openTunnel(ctx context.Context, spec sandbox.Spec) error {
	if spec.Network != sandbox.NetworkEgress {
		return nil
	}
	t, err := h.rt.openTunnel(ctx, h.name)
	if err != nil {
		return err
	}
	h.tunnel = t
	return nil
}

// launch hands the supervisor its job.
func (h *handle) launch(ctx context.Context, spec sandbox.Spec, out sandbox.Output) error {
	ps := supervisor.JobSpec(spec, defaultWorkDir)
	ps.KillMode = proto.KillContainer
	if h.ws != nil {
		// A workspace's pod is shared: a kill or timeout takes the job's tree only.
		ps.KillMode = proto.KillTree
	} else {
		// The pod's attach may drop what the job wrote last when the pod's
		// container ends: the supervisor waits until the server has it all.
		ps.AwaitExitAck, h.C.AckExit = true, true
	}
	// No per-pod ulimits in a pod spec: the supervisor lowers them for the job.
	ps.Rlimits = supervisor.JobRlimits(spec.Limits)
	ps.Rlimits["core"] = 0
	if spec.Timeout > 0 {
		ps.TimeoutMS = (spec.Timeout + deadlineBackstop).Milliseconds()
	}
	h.C.HasStdin, h.C.TTY = spec.OpenStdin, spec.TTY != nil
	if err := ps.Validate(); err != nil {
		return err
	}
	payload, err := json.Marshal(ps)
	if err != nil {
		return err
	}
	h.C.Out.Set(out, 0, 0)
	if err := h.C.WriteFrame(ctx, proto.TypeSpec, payload); err != nil {
		return fmt.Errorf("hand pod %s its job: %w", h.name, err)
	}
	return nil
}

// Signal goes through the supervisor; with no stream to it (adopted, or
// ended) there is nothing the API could deliver a signal with.
func (h *handle) Signal(ctx context.Context, signal string) error {
	if _, err := h.SignalFrame(ctx, signal); err != nil && !h.ended() {
		return fmt.Errorf("signal the job in pod %s: %w", h.name, err)
	}
	return nil
}

// Destroy deletes the pod, which kills everything in it.
// A workspace job is killed by its supervisor (Kill frame: its process
// tree); the workspace's pod stays.
func (h *handle) Destroy(ctx context.Context) error {
	h.destroyMu.Do(func() { close(h.destroyed) })
	if h.ws != nil {
		if h.ended() {
			return nil
		}
		if err := h.C.WriteFrame(ctx, proto.TypeKill, nil); err != nil && !h.ended() {
			return fmt.Errorf("kill the job in workspace pod %s: %w", h.name, err)
		}
		return nil
	}
	return h.rt.Remove(ctx, h.name)
}

func (h *handle) wasDestroyed() bool {
	select {
	case <-h.destroyed:
		return true
	default:
		return false
	}
}

func (h *handle) closeInput() {
	if h.tunnel != nil {
		h.tunnel.Close()
	}
	if h.ch != nil {
		h.ch.Close()
	}
	if h.stdin != nil {
		h.stdin.Close()
	}
	if h.cancel != nil {
		h.cancel()
	}
}

// waitForEnd records how the job ended: from the supervisor's Exit frame,
// else from the pod's status, else the pod is gone. Then the pod goes.
func (h *handle) waitForEnd() {
	select {
	case <-h.C.Exited():
	case <-h.C.Drained():
	}
	select {
	case <-h.C.Drained():
	case <-time.After(drainTimeout):
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if h.C.Exit() == nil && h.followsLog {
		h.rereadLog(ctx)
	}
	if h.ws != nil {
		// A job in a workspace: the pod is the workspace's, never removed here.
		if e := h.C.Exit(); e != nil {
			h.status = supervisor.ExitStatus(e)
		} else {
			h.status = h.rt.daemons.Verdict(ctx, h.name, h.ws)
		}
		h.closeInput()
		close(h.done)
		return
	}
	if e := h.C.Exit(); e != nil {
		h.status = supervisor.ExitStatus(e)
		if e.ExitCode > 128 && h.wasDestroyed() {
			// Destroyed: the kubelet's TERM (then KILL) of the deleted pod
			// ended it. Said as Docker's kill says it (137), so the caller
			// tells the removal from an exit of the job's own (a timeout).
			h.status.ExitCode = 128 + 9
		}
		if e.ExitCode > 128 && !h.wasDestroyed() && h.removedFromOutside(ctx) {
			// The kubelet stops a deleted pod with TERM: the supervisor
			// reports that as the job's end, but the end was not the job's.
			h.status.Gone = true
		}
		h.closeInput()
		h.rt.removeLater(h.name)
		close(h.done)
		return
	}
	// No report: the stream ended without one. The pod's status may say how.
	var st sandbox.ExitStatus
	for i := 0; ; i++ {
		var known bool
		if st, known = h.rt.exitOf(ctx, h.name); known || i >= 20 || ctx.Err() != nil {
			if !known {
				st = sandbox.ExitStatus{ExitCode: -1, Err: fmt.Errorf("the stream from pod %s ended and its container still runs: %v", h.name, h.attachErr)}
			}
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if st.Gone && h.wasDestroyed() {
		st.Gone = false
	}
	if st.StartErr != nil {
		// The termination message: the supervisor's stderr (see podFor).
		if diag := st.StartErr.Error(); st.Err == nil && !st.Gone && !h.wasDestroyed() && st.ExitCode != 0 {
			st.StartErr = fmt.Errorf("the sandbox supervisor ended without a report: %s", diag)
		} else {
			st.StartErr = nil
		}
	}
	h.closeInput()
	gone, err := h.rt.remove(ctx, h.name)
	if err != nil {
		st.CleanupErr = err
	}
	if gone && !h.wasDestroyed() && st.Err == nil {
		st.Gone = true
	}
	h.status = st
	close(h.done)
}

// removedFromOutside says whether the pod is gone or being deleted.
func (h *handle) removedFromOutside(ctx context.Context) bool {
	pod, err := h.rt.core.Pods(h.rt.namespace).Get(ctx, h.name, metav1.GetOptions{})
	if err != nil {
		return apierrors.IsNotFound(err)
	}
	return pod.DeletionTimestamp != nil
}

// rereadLog parses what the container's log holds past the frames already
// read: a followed log can end a moment before the last frame is in it.
func (h *handle) rereadLog(ctx context.Context) {
	rc, err := h.rt.core.Pods(h.rt.namespace).GetLogs(h.name, &corev1.PodLogOptions{Container: containerName}).Stream(ctx)
	if err != nil {
		return
	}
	defer rc.Close()
	if _, err := io.CopyN(io.Discard, rc, h.C.Consumed()); err != nil {
		return
	}
	h.C.Parse(rc)
}

// helloPolls bounds the wait for a started supervisor's Hello to reach the
// container's log (20 ms apart).
const helloPolls = 100

// checkHello reads the supervisor's Hello, the first frame it writes, back
// from the container's log and refuses another protocol version. The attach
// joins after the supervisor wrote it (pods/attach does not replay), so the
// log is the only place it can be read. A log still without a whole frame
// after the bounded wait is not an error here: a supervisor that says
// nothing fails at its job frame instead.
func (r *Runtime) checkHello(ctx context.Context, name string) error {
	limit := int64(4 << 10)
	for i := 0; i < helloPolls; i++ {
		rc, err := r.core.Pods(r.namespace).GetLogs(name, &corev1.PodLogOptions{Container: containerName, LimitBytes: &limit}).Stream(ctx)
		if err != nil {
			return r.engineErr(fmt.Errorf("read the log of pod %s: %w", name, err))
		}
		typ, p, err := proto.NewReader(rc).Next()
		rc.Close()
		if err == nil {
			if typ != proto.TypeHello {
				return fmt.Errorf("the sandbox supervisor in pod %s began with a %s frame, not Hello: rebuild the images (make images)", name, proto.TypeName(typ))
			}
			return supervisor.CheckHello(p)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

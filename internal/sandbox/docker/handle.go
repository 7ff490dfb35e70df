package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

const (
	// inputWindow is how much input may be on its way to a job (sent, not yet
	// taken by its stdin): the supervisor never has to drop any, and a job
	// that does not read holds a writer back instead.
	inputWindow = 256 << 10
	// inputChunk is the largest Data frame sent.
	inputChunk = 64 << 10
	// diagBytes is how much of the supervisor's own stderr is kept for errors.
	diagBytes = 4 << 10
)

// handle is one sandbox: a container whose main process is the supervisor.
// Frames from the supervisor arrive on the container's stdout; frames to it
// go to its stdin. Its end is observed once, by waitForEnd.
type handle struct {
	rt         *Runtime
	id         string
	cancelWait context.CancelFunc
	conn       net.Conn // the attach connection; nil when adopted
	followsLog bool     // output comes from the engine's log (adopted)
	// joinMidStream: the output stream was joined while running (adopted
	// without an engine log), so frames are found by Resync.
	joinMidStream bool
	hasStdin      bool // the job reads frames' Data (stdin "pipe")
	// execID is set when the job runs as an exec of the supervisor in a
	// workspace's container (kill mode "tree"): ending the job never
	// touches the container.
	execID string
	// ws is set when the job is a channel of a workspace daemon's stream
	// (kill mode "tree"), key names it there.
	ws  *wsConn
	key string
	tty bool // the job runs on a terminal (Resize works)

	writeMu sync.Mutex    // one frame at a time on conn
	turn    chan struct{} // one stdin writer (or closer) at a time

	ackMu   sync.Mutex
	ackCond *sync.Cond
	sent    uint64 // Data bytes sent
	acked   uint64 // Data bytes the job's stdin took
	eofSent bool

	out       outputSwitch
	launched  chan struct{} // closed by Launch
	hello     chan struct{} // closed once Hello arrived (or the stream ended)
	helloOnce func()
	helloErr  error
	exit      *proto.Exit   // the supervisor's report, once it came
	exited    chan struct{} // closed when the report came
	consumed  int64         // bytes of the supervisor's stdout parsed so far
	diag      tailBuffer    // the supervisor's stderr

	drained   chan struct{} // closed when the output stream ended
	done      chan struct{}
	destroyed chan struct{} // closed by Destroy: the end is ours, not a surprise
	destroyMu sync.Once
	status    sandbox.ExitStatus
	prepared  sandbox.Spec // the spec it was made with (warm sandboxes)
}

func newHandle(rt *Runtime, id string, cancelWait context.CancelFunc) *handle {
	h := &handle{
		rt: rt, id: id, cancelWait: cancelWait,
		turn:      make(chan struct{}, 1),
		launched:  make(chan struct{}),
		hello:     make(chan struct{}),
		drained:   make(chan struct{}),
		exited:    make(chan struct{}),
		done:      make(chan struct{}),
		destroyed: make(chan struct{}),
	}
	h.ackCond = sync.NewCond(&h.ackMu)
	h.helloOnce = sync.OnceFunc(func() { close(h.hello) })
	return h
}

// ContainerID is the container's id; a workspace daemon's job adds its key,
// by which a later server re-attaches it.
func (h *handle) ContainerID() string {
	if h.ws != nil {
		return h.id + "/" + h.key
	}
	return h.id
}

// shared says whether the job runs in a workspace's container, which ending
// the job never touches.
func (h *handle) shared() bool { return h.execID != "" || h.ws != nil }

func (h *handle) Done() <-chan struct{} { return h.done }

// Status is valid once Done is closed.
func (h *handle) Status() sandbox.ExitStatus {
	<-h.done
	return h.status
}

// ended says whether the sandbox is gone (or going): no input can reach it.
func (h *handle) ended() bool {
	select {
	case <-h.drained:
		return true
	case <-h.exited:
		return true
	default:
		return false
	}
}

// writeFrame writes one frame to the supervisor, giving up when ctx ends.
func (h *handle) writeFrame(ctx context.Context, typ byte, payload []byte) error {
	if h.conn == nil {
		return sandbox.ErrNoStdin
	}
	frame, err := proto.AppendFrame(nil, typ, payload)
	if err != nil {
		return err
	}
	h.writeMu.Lock()
	defer h.writeMu.Unlock()
	deadline, _ := ctx.Deadline()
	_ = h.conn.SetWriteDeadline(deadline)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		_ = h.conn.SetWriteDeadline(time.Unix(1, 0))
	})
	_, err = h.conn.Write(frame)
	if !stop() {
		<-fired
	}
	_ = h.conn.SetWriteDeadline(time.Time{})
	if err != nil && (ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return context.DeadlineExceeded
	}
	return err
}

// WriteStdin sends p as Data frames, never more than inputWindow ahead of
// what the job has read: it returns how much was sent when ctx ends first.
func (h *handle) WriteStdin(ctx context.Context, p []byte) (int, error) {
	if !h.hasStdin || h.conn == nil {
		return 0, sandbox.ErrNoStdin
	}
	select {
	case h.turn <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-h.turn }()
	if h.eofSent {
		return 0, sandbox.ErrNoStdin
	}
	written := 0
	for len(p) > 0 {
		n := min(len(p), inputChunk)
		if err := h.waitWindow(ctx, n); err != nil {
			return written, err
		}
		if err := h.writeFrame(ctx, proto.TypeData, p[:n]); err != nil {
			return written, err
		}
		h.ackMu.Lock()
		h.sent += uint64(n)
		h.ackMu.Unlock()
		written += n
		p = p[n:]
	}
	return written, nil
}

// waitWindow waits until n more bytes fit in the input window.
func (h *handle) waitWindow(ctx context.Context, n int) error {
	stop := context.AfterFunc(ctx, func() {
		h.ackMu.Lock()
		h.ackCond.Broadcast()
		h.ackMu.Unlock()
	})
	defer stop()
	h.ackMu.Lock()
	defer h.ackMu.Unlock()
	for h.sent-h.acked+uint64(n) > inputWindow {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if h.ended() {
			return io.ErrClosedPipe
		}
		h.ackCond.Wait()
	}
	return nil
}

// CloseStdin sends end-of-file to the job, after writes in progress.
func (h *handle) CloseStdin() error {
	if !h.hasStdin || h.conn == nil {
		return nil
	}
	h.turn <- struct{}{}
	defer func() { <-h.turn }()
	if h.eofSent || h.ended() {
		return nil
	}
	h.eofSent = true
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	return h.writeFrame(ctx, proto.TypeEOF, nil)
}

// Signal delivers a signal to the job: through the supervisor while attached,
// else through the engine (init passes it to the supervisor, which passes it on).
func (h *handle) Signal(ctx context.Context, signal string) error {
	if h.conn != nil && !h.ended() {
		if err := h.writeFrame(ctx, proto.TypeSignal, []byte(signal)); err == nil {
			return nil
		} else if h.shared() {
			return err
		}
	}
	if h.shared() {
		return nil // the exec has ended: nothing left to signal (never the shared container)
	}
	_, err := h.rt.cli.ContainerKill(ctx, h.id, client.ContainerKillOptions{Signal: signal})
	if notRunning(err) {
		return nil // already gone or not running: nothing left to signal
	}
	return h.rt.engineErr(err)
}

// Resize changes a TTY job's terminal size.
func (h *handle) Resize(ctx context.Context, rows, cols uint16) error {
	if !h.tty {
		return sandbox.ErrNoTTY
	}
	payload, _ := json.Marshal(proto.TTYSpec{Rows: rows, Cols: cols})
	return h.writeFrame(ctx, proto.TypeResize, payload)
}

// Destroy removes the container, which kills every process in it. A job in a
// workspace's container is killed by its supervisor (Kill frame: its whole
// process tree, setsid'd descendants too); the container stays.
func (h *handle) Destroy(ctx context.Context) error {
	h.destroyMu.Do(func() { close(h.destroyed) })
	if h.shared() {
		if h.ended() {
			return nil
		}
		if err := h.writeFrame(ctx, proto.TypeKill, nil); err != nil && !h.ended() {
			// An exec's supervisor kills the job by itself once its input
			// is gone (kill_on_detach); closing our end makes sure it sees
			// that. A daemon's job waits for the next stream's Kill.
			if h.execID != "" {
				h.conn.Close()
			}
			return fmt.Errorf("kill the job in workspace container %.12s: %w", h.id, err)
		}
		return nil
	}
	return h.rt.Remove(ctx, h.id)
}

func (h *handle) wasDestroyed() bool {
	select {
	case <-h.destroyed:
		return true
	default:
		return false
	}
}

// outputSwitch is where job output goes: nowhere until Launch sets it.
type outputSwitch struct {
	mu  sync.Mutex
	out sandbox.Output
	// skip counts bytes of each stream to pass over (already captured by an
	// earlier server process, when adopting).
	skip [3]int64
}

func (s *outputSwitch) set(out sandbox.Output, skipStdout, skipStderr int64) {
	s.mu.Lock()
	s.out = out
	s.skip[sandbox.Stdout], s.skip[sandbox.Stderr] = skipStdout, skipStderr
	s.mu.Unlock()
}

func (s *outputSwitch) write(stream sandbox.Stream, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return
	}
	if k := s.skip[stream]; k > 0 {
		if int64(len(p)) <= k {
			s.skip[stream] -= int64(len(p))
			return
		}
		p = p[k:]
		s.skip[stream] = 0
	}
	s.out.Write(stream, p)
}

// tailBuffer keeps the last diagBytes written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > diagBytes {
		t.b = t.b[len(t.b)-diagBytes:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

// readFrames demultiplexes the engine's stream and acts on the supervisor's
// frames until the stream ends.
func (h *handle) readFrames(src io.Reader, closeSrc func()) {
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, &h.diag, src)
		pw.CloseWithError(err)
	}()
	h.readParsed(pr, func() { pr.Close(); closeSrc() })
}

// readParsed acts on the supervisor's frames from r (already taken out of
// the engine's stream) until it ends.
func (h *handle) readParsed(r io.Reader, closeSrc func()) {
	defer close(h.drained)
	defer closeSrc()
	defer func() {
		// Writers waiting for window space see the end.
		h.ackMu.Lock()
		h.ackCond.Broadcast()
		h.ackMu.Unlock()
	}()
	defer h.helloOnce()
	h.parse(r)
}

// checkHello reads a supervisor's Hello and refuses another protocol version.
func checkHello(p []byte) error {
	var hello proto.Hello
	if err := json.Unmarshal(p, &hello); err != nil || hello.Protocol != proto.Version {
		return fmt.Errorf("the image's sandbox supervisor speaks protocol %d, this server %d: rebuild the images (make images)", hello.Protocol, proto.Version)
	}
	return nil
}

// parse acts on the supervisor's frames read from r until it ends, counting
// the bytes taken (so a re-read of the engine's log can continue after them).
func (h *handle) parse(src io.Reader) {
	cr := &countingReader{r: src, n: &h.consumed}
	r := proto.NewReader(cr)
	if h.joinMidStream {
		r = proto.Resync(bufio.NewReader(cr))
	}
	for {
		typ, p, err := r.Next()
		if err != nil {
			return
		}
		switch typ {
		case proto.TypeHello:
			h.helloErr = checkHello(p)
			h.helloOnce()
		case proto.TypeStdout:
			h.out.write(sandbox.Stdout, p)
		case proto.TypeStderr:
			h.out.write(sandbox.Stderr, p)
		case proto.TypeAck:
			if n, err := proto.DecodeAck(p); err == nil {
				h.ackMu.Lock()
				h.acked = max(h.acked, n)
				h.ackCond.Broadcast()
				h.ackMu.Unlock()
			}
		case proto.TypeExit:
			var e proto.Exit
			if json.Unmarshal(p, &e) == nil && h.exit == nil {
				h.exit = &e
				// The last frame: every output frame came before it.
				close(h.exited)
			}
		}
	}
}

// waitForEnd records how the sandbox ended once its supervisor reported (and
// its output is drained) or the engine says it stopped, then removes it.
// Done is closed before the removal: a job's result does not wait for it.
func (h *handle) waitForEnd(wait client.ContainerWaitResult) {
	defer h.cancelWait()
	var waitErr error
	waitCode := int64(-1)
	waited := false
	select {
	case <-h.exited:
		// The supervisor's report: the job and every process of it have
		// ended and all its output has been handed on. The container's own
		// teardown (tens of milliseconds) is not the job's business.
	case <-h.drained:
		// The supervisor's stream ended: with its Exit report, that is the
		// end; without one, the engine has the last word.
	case res := <-wait.Result:
		waitCode, waited = res.StatusCode, true
	case err := <-wait.Error:
		waitErr, waited = err, true
	}
	if waited {
		// The process tree is gone once the main process ends, so the stream
		// closes promptly; the bound guards against an engine that never closes it.
		select {
		case <-h.drained:
		case <-time.After(drainTimeout):
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if h.exit == nil && h.followsLog {
		if !waited {
			select {
			case res := <-wait.Result:
				waitCode, waited = res.StatusCode, true
			case err := <-wait.Error:
				waitErr, waited = err, true
			case <-time.After(drainTimeout):
			}
		}
		h.rereadLog(ctx)
	}
	if e := h.exit; e != nil {
		h.status = sandbox.ExitStatus{ExitCode: e.ExitCode, OOMKilled: e.OOMKilled, TimedOut: e.TimedOut,
			Usage: sandbox.Usage{CPUMS: e.Usage.CPUMS, PeakMemoryBytes: e.Usage.PeakMemoryBytes, WallMS: e.Usage.WallMS}}
		if e.Error != "" {
			h.status.StartErr = errors.New(e.Error)
		}
	} else if !h.shared() {
		if !waited {
			select {
			case res := <-wait.Result:
				waitCode = res.StatusCode
			case err := <-wait.Error:
				waitErr = err
			case <-time.After(drainTimeout):
			}
		}
		h.status = h.verdict(ctx, waitErr)
		if h.status.Err != nil && waitErr == nil && waitCode >= 0 {
			// Inspect failed, but the wait already told how the process ended.
			h.status = sandbox.ExitStatus{ExitCode: int(waitCode)}
		}
		if h.status.Err == nil && !h.status.Gone && !h.wasDestroyed() {
			if d := h.diag.String(); d != "" && h.status.ExitCode != 0 {
				h.status.StartErr = fmt.Errorf("the sandbox supervisor ended without a report: %s", d)
			}
		}
	}
	if h.conn != nil {
		h.conn.Close()
	}
	if h.shared() {
		// A job in a workspace: the container is the workspace's, never removed here.
		if h.exit == nil && h.ws != nil {
			h.status = h.wsVerdict(ctx)
		} else if h.exit == nil {
			h.status = h.execVerdict(ctx)
		}
		close(h.done)
		return
	}
	if h.exit != nil {
		h.rt.removeLater(h.id) // counted before Done, so Flush after Done waits for it
		close(h.done)
		return
	}
	// No report: an end that was not the job's own. Remove it now, and
	// learn whether someone else did first.
	gone, err := h.rt.remove(ctx, h.id)
	if err != nil {
		h.status.CleanupErr = fmt.Errorf("remove container %.12s: %w", h.id, err)
	}
	if gone && !h.wasDestroyed() && h.status.Err == nil {
		h.status.Gone = true
	}
	close(h.done)
}

// verdict reads how the container ended from the engine: exit code (the
// supervisor exits with the job's) and the OOM flag.
func (h *handle) verdict(ctx context.Context, waitErr error) sandbox.ExitStatus {
	info, err := h.rt.cli.ContainerInspect(ctx, h.id, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return sandbox.ExitStatus{ExitCode: -1, Gone: !h.wasDestroyed()}
		}
		if waitErr == nil {
			waitErr = err
		}
		return sandbox.ExitStatus{ExitCode: -1, Err: h.rt.engineErr(waitErr)}
	}
	st := info.Container.State
	if st == nil {
		return sandbox.ExitStatus{ExitCode: -1, Err: errors.New("engine returned no container state")}
	}
	if st.Status == container.StateRunning && waitErr != nil {
		return sandbox.ExitStatus{ExitCode: -1, Err: h.rt.engineErr(waitErr)}
	}
	return sandbox.ExitStatus{
		ExitCode:   st.ExitCode,
		OOMKilled:  st.OOMKilled,
		StartedAt:  parseTime(st.StartedAt),
		FinishedAt: parseTime(st.FinishedAt),
	}
}

type countingReader struct {
	r io.Reader
	n *int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// rereadLog parses what the engine's log holds past the frames already read:
// a followed log can end when the container stops, a moment before the
// engine has written the last of its output (the supervisor's report).
func (h *handle) rereadLog(ctx context.Context) {
	logs, err := h.rt.cli.ContainerLogs(ctx, h.id, client.ContainerLogsOptions{ShowStdout: true})
	if err != nil {
		return
	}
	defer logs.Close()
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, logs)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	if _, err := io.CopyN(io.Discard, pr, h.consumed); err != nil {
		return
	}
	h.parse(pr)
}

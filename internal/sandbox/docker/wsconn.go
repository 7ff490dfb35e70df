package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/uuid"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// A workspace container's main process is the supervisor's daemon (see the
// "Workspace daemon" section of internal/supervisor/proto). This server keeps
// one stream to it per running workspace, an exec of `sandboxer-supervisor
// connect` made on first use, and every job of the workspace is a channel of
// that stream: a job costs a few frames, no exec. A job outlives the stream
// (and this server): the next server re-attaches it by its key, which is part
// of the job's ContainerID ("<container id>/<key>").

// forgetDelay is how long after a job's end the daemon is told to drop what it
// kept of it: the job's record is stored by then, and a server that died in
// between finds the end still there.
const forgetDelay = 10 * time.Second

// wsConnWrite bounds one write on a daemon stream: the daemon always reads,
// so a write that takes this long means the stream is broken.
const wsConnWrite = time.Minute

// daemonCmd is a workspace container's command: the supervisor's daemon.
var daemonCmd = []string{supervisorPath, proto.DaemonCommand}

// wsConn is this server's stream to one workspace container's daemon.
type wsConn struct {
	rt     *Runtime
	id     string // the container's
	conn   net.Conn
	wmu    sync.Mutex
	diag   tailBuffer
	hello  chan struct{}
	ended  chan struct{} // the stream ended
	helloE error

	mu      sync.Mutex
	chans   map[string]*channel  // by key
	attachs map[string]chan bool // Attach answers awaited: known or not
}

// channel is one job's side of the stream: its frames go to w, as a
// single-job stream for the job's handle; seen counts the output it got, by
// stream, from the job's start (what a re-attach asks the daemon to skip).
type channel struct {
	key  string
	w    *io.PipeWriter
	mu   sync.Mutex
	conn *wsConn // the stream it is on
	seen [3]int64
}

func (ch *channel) count(s sandbox.Stream, n int) {
	ch.mu.Lock()
	ch.seen[s] += int64(n)
	ch.mu.Unlock()
}

func (ch *channel) stream() *wsConn {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.conn
}

// jobKey splits a workspace job's ContainerID (see sandbox.WorkspaceJob)
// into the container's id and the job's key on the daemon's stream; ok is
// false for any other container id.
func jobKey(id string) (containerID, key string, ok bool) {
	return strings.Cut(id, "/")
}

// engineID is the engine's id of a ContainerID (a workspace job's is its container's).
func engineID(id string) string {
	c, _, _ := jobKey(id)
	return c
}

// usesDaemon says whether a workspace container runs the daemon (workspaces
// made before it run jobs as one exec each). The answer is kept per container.
func (r *Runtime) usesDaemon(ctx context.Context, containerID string) (bool, error) {
	r.execMu.Lock()
	v, ok := r.daemonMode[containerID]
	r.execMu.Unlock()
	if ok {
		return v, nil
	}
	info, err := r.cli.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, fmt.Errorf("workspace container %.12s: %w", containerID, sandbox.ErrNotFound)
		}
		return false, r.engineErr(err)
	}
	cmd := []string(nil)
	if info.Container.Config != nil {
		cmd = info.Container.Config.Cmd
	}
	v = len(cmd) == 2 && cmd[0] == daemonCmd[0] && cmd[1] == daemonCmd[1]
	r.execMu.Lock()
	if r.daemonMode == nil {
		r.daemonMode = map[string]bool{}
	}
	r.daemonMode[containerID] = v
	r.execMu.Unlock()
	return v, nil
}

// liveConn is the container's stream if it is up.
func (r *Runtime) liveConn(containerID string) *wsConn {
	r.execMu.Lock()
	defer r.execMu.Unlock()
	c := r.conns[containerID]
	if c == nil || c.closed() {
		return nil
	}
	return c
}

// dropConn forgets a container's stream (it stops or goes): jobs started
// after it get a new one. The old one ends with the container.
func (r *Runtime) dropConn(containerID string) {
	r.execMu.Lock()
	delete(r.conns, containerID)
	r.execMu.Unlock()
}

// daemonConn returns the container's stream, making it if needed.
func (r *Runtime) daemonConn(ctx context.Context, containerID string) (*wsConn, error) {
	if c := r.liveConn(containerID); c != nil {
		return c, nil
	}
	r.dialMu.Lock()
	defer r.dialMu.Unlock()
	if c := r.liveConn(containerID); c != nil {
		return c, nil
	}
	c, err := r.dialDaemon(ctx, containerID)
	if err != nil {
		return nil, err
	}
	r.execMu.Lock()
	if r.conns == nil {
		r.conns = map[string]*wsConn{}
	}
	r.conns[containerID] = c
	r.execMu.Unlock()
	return c, nil
}

func (r *Runtime) dialDaemon(ctx context.Context, containerID string) (*wsConn, error) {
	// As root (with no capability, like every exec here): the jobs, uid
	// 1000, cannot signal it, so none can cut the server off its workspace.
	ex, err := r.cli.ExecCreate(ctx, containerID, client.ExecCreateOptions{
		User: "0:0", AttachStdin: true, AttachStdout: true, AttachStderr: true,
		WorkingDir: defaultWorkDir, Cmd: []string{supervisorPath, proto.ConnectCommand},
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
			return nil, fmt.Errorf("workspace container %.12s is not running: %w", containerID, sandbox.ErrNotFound)
		}
		return nil, r.engineErr(fmt.Errorf("create exec: %w", err))
	}
	attach, err := r.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, r.engineErr(fmt.Errorf("start exec: %w", err))
	}
	c := &wsConn{rt: r, id: containerID, conn: attach.Conn, hello: make(chan struct{}), ended: make(chan struct{}),
		chans: map[string]*channel{}, attachs: map[string]chan bool{}}
	go c.read(attach.Reader, attach.Close)
	select {
	case <-c.hello:
		if c.helloE != nil {
			c.conn.Close()
			return nil, c.helloE
		}
		return c, nil
	case <-ctx.Done():
		c.conn.Close()
		return nil, ctx.Err()
	}
}

func (c *wsConn) closed() bool {
	select {
	case <-c.ended:
		return true
	default:
		return false
	}
}

// read dispatches the daemon's frames to the jobs' channels until the stream ends.
func (c *wsConn) read(src io.Reader, closeSrc func()) {
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, &c.diag, src)
		pw.CloseWithError(err)
	}()
	defer func() {
		pr.Close()
		closeSrc()
		c.mu.Lock()
		chans, attachs := c.chans, c.attachs
		c.chans, c.attachs = map[string]*channel{}, map[string]chan bool{}
		c.mu.Unlock()
		for _, a := range attachs {
			close(a)
		}
		select {
		case <-c.hello:
		default:
			c.helloE = fmt.Errorf("the workspace's supervisor daemon did not answer: %s", c.diag.String())
			close(c.hello)
		}
		close(c.ended)
		c.rt.resume(c, chans)
	}()
	fr := proto.NewReader(pr)
	for {
		typ, p, err := fr.Next()
		if err != nil {
			return
		}
		switch typ {
		case proto.TypeHello:
			c.helloE = checkHello(p)
			select {
			case <-c.hello:
			default:
				close(c.hello)
			}
		case proto.TypeMux:
			key, t, payload, err := proto.DecodeMux(p)
			if err != nil {
				return
			}
			c.deliver(key, t, payload)
		case proto.TypeAttach, proto.TypeUnknown:
			c.mu.Lock()
			a := c.attachs[string(p)]
			delete(c.attachs, string(p))
			c.mu.Unlock()
			if a != nil {
				a <- typ == proto.TypeAttach
			}
		}
	}
}

// resume moves the channels of a stream that broke while its workspace
// runs (its exec was killed) to a new stream, re-attaching each job past the
// output it already got. A stream this runtime dropped (the workspace stops
// or goes, the runtime closes) is not resumed: its jobs end here.
func (r *Runtime) resume(old *wsConn, chans map[string]*channel) {
	r.execMu.Lock()
	current := r.conns[old.id] == old
	if current {
		delete(r.conns, old.id)
	}
	r.execMu.Unlock()
	if len(chans) == 0 {
		return
	}
	end := func(chs map[string]*channel) {
		for _, ch := range chs {
			ch.w.Close()
		}
	}
	if !current {
		end(chans)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if running, err := r.WorkspaceRunning(ctx, old.id); err != nil || !running {
			end(chans)
			return
		}
		c, err := r.daemonConn(ctx, old.id)
		if err != nil {
			end(chans)
			return
		}
		for _, ch := range chans {
			if known, err := c.attach(ctx, ch); err != nil || !known {
				ch.w.Close()
			}
		}
	}()
}

// attach puts a channel on this stream and asks the daemon for the job's
// output past what the channel already got: known is false when the daemon
// does not know the job.
func (c *wsConn) attach(ctx context.Context, ch *channel) (known bool, err error) {
	answer := make(chan bool, 1)
	ch.mu.Lock()
	ch.conn = c
	a := proto.Attach{Key: ch.key, Stdout: ch.seen[sandbox.Stdout], Stderr: ch.seen[sandbox.Stderr]}
	ch.mu.Unlock()
	c.mu.Lock()
	if c.closed() {
		c.mu.Unlock()
		return false, fmt.Errorf("the stream to workspace container %.12s ended", c.id)
	}
	c.chans[ch.key] = ch
	c.attachs[ch.key] = answer
	c.mu.Unlock()
	if err := c.send(proto.TypeAttach, proto.EncodeAttach(a)); err != nil {
		c.close(ch.key)
		return false, c.rt.engineErr(fmt.Errorf("re-attach the job: %w", err))
	}
	select {
	case known, ok := <-answer:
		if !ok {
			return false, fmt.Errorf("the stream to workspace container %.12s ended", c.id)
		}
		if !known {
			c.close(ch.key)
		}
		return known, nil
	case <-ctx.Done():
		c.close(ch.key)
		return false, ctx.Err()
	}
}

// deliver hands one frame to its job's parser; the Exit frame is its last.
func (c *wsConn) deliver(key string, typ byte, p []byte) {
	c.mu.Lock()
	ch := c.chans[key]
	if typ == proto.TypeExit {
		delete(c.chans, key)
	}
	c.mu.Unlock()
	if ch == nil {
		return
	}
	switch typ {
	case proto.TypeStdout:
		ch.count(sandbox.Stdout, len(p))
	case proto.TypeStderr:
		ch.count(sandbox.Stderr, len(p))
	}
	if f, err := proto.AppendFrame(nil, typ, p); err == nil {
		_, _ = ch.w.Write(f)
	}
	if typ == proto.TypeExit {
		ch.w.Close()
		time.AfterFunc(forgetDelay, func() { _ = c.send(proto.TypeForget, []byte(key)) })
	}
}

// send writes one frame of the stream; a write that fails breaks the stream.
func (c *wsConn) send(typ byte, p []byte) error {
	f, err := proto.AppendFrame(nil, typ, p)
	if err != nil {
		return err
	}
	return c.write(f)
}

func (c *wsConn) write(f []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(wsConnWrite))
	if _, err := c.conn.Write(f); err != nil {
		c.conn.Close() // a partial frame: nothing after it could be read
		return err
	}
	return nil
}

// open makes a job's channel and the handle reading it.
func (c *wsConn) open(key string) (*handle, *channel, error) {
	pr, pw := io.Pipe()
	ch := &channel{key: key, w: pw, conn: c}
	c.mu.Lock()
	if c.closed() {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("the stream to workspace container %.12s ended", c.id)
	}
	if _, dup := c.chans[key]; dup {
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("job %s already runs in workspace container %.12s", key, c.id)
	}
	c.chans[key] = ch
	c.mu.Unlock()
	h := newHandle(c.rt, c.id, func() {})
	h.ws, h.key = c, key
	h.conn = &muxConn{ch: ch}
	go h.readParsed(pr, func() { pr.Close() })
	go h.waitForEnd(client.ContainerWaitResult{})
	return h, ch, nil
}

// close ends a job's channel here (the job itself is not touched).
func (c *wsConn) close(key string) {
	c.mu.Lock()
	ch := c.chans[key]
	delete(c.chans, key)
	c.mu.Unlock()
	if ch != nil {
		ch.w.Close()
	}
}

// startDaemonJob runs spec on a new channel of the workspace's stream.
func (r *Runtime) startDaemonJob(ctx context.Context, containerID string, spec sandbox.Spec, out sandbox.Output) (sandbox.Handle, error) {
	c, err := r.daemonConn(ctx, containerID)
	if err != nil {
		return nil, err
	}
	key := spec.JobID
	if key == "" || len(key) > proto.MaxKey || strings.Contains(key, "/") {
		key = uuid.NewString()
	}
	h, _, err := c.open(key)
	if err != nil {
		return nil, err
	}
	hh, err := h.launch(ctx, spec, out, false)
	if err != nil {
		c.close(key)
		return nil, err
	}
	return hh, nil
}

// adoptDaemonJob re-attaches a job a previous server started in a
// workspace: the daemon replays its output past what was captured.
func (r *Runtime) adoptDaemonJob(ctx context.Context, containerID, key string, skipStdout, skipStderr int64, out sandbox.Output) (sandbox.Handle, error) {
	if ok, err := r.usesDaemon(ctx, containerID); err != nil {
		return nil, err
	} else if !ok {
		return nil, sandbox.ErrNotFound
	}
	c, err := r.daemonConn(ctx, containerID)
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, sandbox.ErrNotFound // the workspace stopped: its jobs with it
		}
		return nil, err
	}
	pr, pw := io.Pipe()
	ch := &channel{key: key, w: pw, seen: [3]int64{sandbox.Stdout: skipStdout, sandbox.Stderr: skipStderr}}
	h := newHandle(r, containerID, func() {})
	h.ws, h.key = c, key
	h.conn = &muxConn{ch: ch}
	close(h.launched)
	h.out.set(out, 0, 0) // the daemon sends only what was not captured
	// Reading first: the replay comes before the daemon's answer.
	go h.readParsed(pr, func() { pr.Close() })
	known, err := c.attach(ctx, ch)
	if err != nil || !known {
		pw.Close()
		if err == nil {
			err = sandbox.ErrNotFound
		}
		return nil, err
	}
	go h.waitForEnd(client.ContainerWaitResult{})
	return h, nil
}

// wsVerdict is how a daemon job ended without its report: its workspace
// stopped or went under it, or the stream to the daemon broke.
func (h *handle) wsVerdict(ctx context.Context) sandbox.ExitStatus {
	running, err := h.rt.WorkspaceRunning(ctx, h.id)
	if errors.Is(err, sandbox.ErrNotFound) || err == nil && !running {
		return sandbox.ExitStatus{ExitCode: -1, Gone: true}
	}
	if err != nil {
		return sandbox.ExitStatus{ExitCode: -1, Err: err}
	}
	msg := "the stream to the workspace's supervisor broke"
	if d := h.ws.diag.String(); d != "" {
		msg += ": " + d
	}
	return sandbox.ExitStatus{ExitCode: -1, Err: errors.New(msg)}
}

// muxConn is a job's side of the shared stream: each frame the handle writes
// goes out wrapped in a Mux frame with the job's key.
type muxConn struct {
	ch       *channel
	mu       sync.Mutex
	deadline time.Time
}

func (m *muxConn) Write(frame []byte) (int, error) {
	m.mu.Lock()
	d := m.deadline
	m.mu.Unlock()
	if !d.IsZero() && time.Now().After(d) {
		return 0, os.ErrDeadlineExceeded
	}
	if len(frame) < proto.HeaderSize {
		return 0, errors.New("short frame")
	}
	f, err := proto.AppendMux(nil, m.ch.key, frame[0], frame[proto.HeaderSize:])
	if err != nil {
		return 0, err
	}
	if err := m.ch.stream().write(f); err != nil {
		return 0, err
	}
	return len(frame), nil
}

func (m *muxConn) SetWriteDeadline(t time.Time) error {
	m.mu.Lock()
	m.deadline = t
	m.mu.Unlock()
	return nil
}

func (m *muxConn) SetDeadline(t time.Time) error   { return m.SetWriteDeadline(t) }
func (m *muxConn) SetReadDeadline(time.Time) error { return nil }
func (m *muxConn) Read([]byte) (int, error)        { return 0, io.EOF }
func (m *muxConn) Close() error                    { m.ch.stream().close(m.ch.key); return nil }
func (m *muxConn) LocalAddr() net.Addr             { return nil }
func (m *muxConn) RemoteAddr() net.Addr            { return nil }

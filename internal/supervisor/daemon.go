package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// A workspace's main process is the supervisor's daemon (see the "Workspace
// daemon" section of internal/supervisor/proto). The server keeps one stream
// to it per running workspace, made on first use by the runtime's Dial (an
// exec or pods/exec of `sandboxer-supervisor connect`), and every job of the
// workspace is a channel of that stream: a job costs a few frames. A job
// outlives the stream (and the server): the next server re-attaches it by
// its key, part of the job's ContainerID ("<container id>/<key>").

// forgetDelay is how long after a job's end the daemon is told to drop what
// it kept of it: the job's record is stored by then, and a server that died
// in between finds the end still there.
const forgetDelay = 10 * time.Second

// writeBound bounds one write on a daemon stream: the daemon always reads,
// so a write that takes this long means the stream is broken.
const writeBound = time.Minute

// resumeTimeout bounds moving a broken stream's jobs to a new one.
const resumeTimeout = 30 * time.Second

// Stream is a byte stream to a workspace's supervisor daemon.
type Stream struct {
	// Conn takes frames to the daemon; closing it ends the stream.
	Conn interface {
		DeadlineWriter
		io.Closer
	}
	// R is the daemon's output (frames only: its stderr goes to the diag
	// writer Dial is given).
	R io.Reader
	// CloseR releases R's source once the stream ended.
	CloseR func()
}

// Daemons are the streams to the workspace daemons of one runtime, by
// container id (a pod's name on Kubernetes).
type Daemons struct {
	// Dial makes a stream to the daemon of a running workspace; the
	// daemon's stderr goes to diag. A workspace that is not running is
	// sandbox.ErrNotFound.
	Dial func(ctx context.Context, id string, diag io.Writer) (Stream, error)
	// Running says whether a workspace runs (ErrNotFound when gone); a
	// stream that broke while it runs is made again and its jobs moved.
	Running func(ctx context.Context, id string) (bool, error)
	// EngineErr types an error of the engine (for the runtime's metrics).
	EngineErr func(error) error

	mu     sync.Mutex
	conns  map[string]*Daemon
	dialMu sync.Mutex // one stream made at a time
	// held are the jobs of checkpointed workspaces, by id: nil entries
	// mark a workspace whose stream is being cut for a checkpoint.
	held map[string]map[string]*Channel
}

// Hold cuts workspace id's stream for a checkpoint, keeping its jobs: they
// wait, attached to nothing, until Resume re-attaches them to the restored
// daemon (which kept them in its memory) or Release ends them.
func (ds *Daemons) Hold(id string) {
	ds.mu.Lock()
	if ds.held == nil {
		ds.held = map[string]map[string]*Channel{}
	}
	if ds.held[id] == nil {
		ds.held[id] = map[string]*Channel{}
	}
	c := ds.conns[id]
	ds.mu.Unlock()
	if c == nil {
		return
	}
	c.conn.Close()
	// resume (the read loop's end) moves the channels into held.
	select {
	case <-c.ended:
	case <-time.After(resumeTimeout):
	}
}

// Resume re-attaches the jobs Hold kept to a new stream of the restored
// workspace; a job its daemon does not know ends.
func (ds *Daemons) Resume(ctx context.Context, id string) error {
	ds.mu.Lock()
	chans := ds.held[id]
	delete(ds.held, id)
	ds.mu.Unlock()
	if len(chans) == 0 {
		return nil
	}
	c, err := ds.Conn(ctx, id)
	if err != nil {
		for _, ch := range chans {
			ch.w.Close()
		}
		return err
	}
	for _, ch := range chans {
		if known, err := c.Attach(ctx, ch); err != nil || !known {
			ch.w.Close()
		}
	}
	return nil
}

// Release ends the jobs Hold kept (the workspace starts afresh or goes).
func (ds *Daemons) Release(id string) {
	ds.mu.Lock()
	chans := ds.held[id]
	delete(ds.held, id)
	ds.mu.Unlock()
	for _, ch := range chans {
		ch.w.Close()
	}
}

// Live is the workspace's stream if it is up.
func (ds *Daemons) Live(id string) *Daemon {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	c := ds.conns[id]
	if c == nil || c.closed() {
		return nil
	}
	return c
}

// Drop forgets a workspace's stream (it stops or goes): jobs started after
// it get a new one. The old one ends with the workspace.
func (ds *Daemons) Drop(id string) {
	ds.mu.Lock()
	delete(ds.conns, id)
	ds.mu.Unlock()
	ds.Release(id)
}

// Close closes every stream; the daemons keep the jobs for the next server.
func (ds *Daemons) Close() {
	ds.mu.Lock()
	for id, c := range ds.conns {
		c.conn.Close()
		delete(ds.conns, id)
	}
	ds.mu.Unlock()
}

// Conn returns the workspace's stream, making it if needed.
func (ds *Daemons) Conn(ctx context.Context, id string) (*Daemon, error) {
	if c := ds.Live(id); c != nil {
		return c, nil
	}
	ds.dialMu.Lock()
	defer ds.dialMu.Unlock()
	if c := ds.Live(id); c != nil {
		return c, nil
	}
	c, err := ds.dial(ctx, id)
	if err != nil {
		return nil, err
	}
	ds.mu.Lock()
	if ds.conns == nil {
		ds.conns = map[string]*Daemon{}
	}
	ds.conns[id] = c
	ds.mu.Unlock()
	return c, nil
}

func (ds *Daemons) dial(ctx context.Context, id string) (*Daemon, error) {
	c := &Daemon{ds: ds, id: id, hello: make(chan struct{}), ended: make(chan struct{}),
		chans: map[string]*Channel{}, attachs: map[string]chan bool{}}
	s, err := ds.Dial(ctx, id, &c.Diag)
	if err != nil {
		return nil, err
	}
	c.conn = s.Conn
	go c.read(s.R, s.CloseR)
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

func (ds *Daemons) engineErr(err error) error {
	if ds.EngineErr != nil {
		return ds.EngineErr(err)
	}
	return err
}

// Daemon is the server's stream to one workspace's daemon.
type Daemon struct {
	ds   *Daemons
	id   string
	conn interface {
		DeadlineWriter
		io.Closer
	}
	wmu    sync.Mutex
	Diag   TailBuffer // the daemon connection's stderr
	hello  chan struct{}
	ended  chan struct{} // the stream ended
	helloE error

	mu      sync.Mutex
	chans   map[string]*Channel  // by key
	attachs map[string]chan bool // Attach answers awaited: known or not
}

// Channel is one job's side of the stream: the daemon's frames for the job
// go to its pipe, as a single-job stream for the job's Client; frames the
// Client writes go out wrapped in Mux frames with the job's key. seen counts
// the output it got, by stream, from the job's start (what a re-attach asks
// the daemon to skip).
type Channel struct {
	key      string
	w        *io.PipeWriter
	mu       sync.Mutex
	conn     *Daemon // the stream it is on
	seen     [3]int64
	deadline time.Time
}

func (ch *Channel) count(s sandbox.Stream, n int) {
	ch.mu.Lock()
	ch.seen[s] += int64(n)
	ch.mu.Unlock()
}

func (ch *Channel) stream() *Daemon {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.conn
}

// Key is the job's key on the stream.
func (ch *Channel) Key() string { return ch.key }

// Stream is the daemon stream the channel is on now.
func (ch *Channel) Stream() *Daemon { return ch.stream() }

// Write sends one whole frame of the job's, wrapped in a Mux frame.
func (ch *Channel) Write(frame []byte) (int, error) {
	ch.mu.Lock()
	d := ch.deadline
	ch.mu.Unlock()
	if !d.IsZero() && time.Now().After(d) {
		return 0, os.ErrDeadlineExceeded
	}
	if len(frame) < proto.HeaderSize {
		return 0, errors.New("short frame")
	}
	f, err := proto.AppendMux(nil, ch.key, frame[0], frame[proto.HeaderSize:])
	if err != nil {
		return 0, err
	}
	if err := ch.stream().write(f); err != nil {
		return 0, err
	}
	return len(frame), nil
}

// SetWriteDeadline makes writes after t fail.
func (ch *Channel) SetWriteDeadline(t time.Time) error {
	ch.mu.Lock()
	ch.deadline = t
	ch.mu.Unlock()
	return nil
}

// Close ends the job's channel here (the job itself is not touched).
func (ch *Channel) Close() error {
	if c := ch.stream(); c != nil {
		c.close(ch.key)
	}
	return nil
}

// ID is the workspace's container id (pod name).
func (c *Daemon) ID() string { return c.id }

func (c *Daemon) closed() bool {
	select {
	case <-c.ended:
		return true
	default:
		return false
	}
}

// read dispatches the daemon's frames to the jobs' channels until the stream ends.
func (c *Daemon) read(src io.Reader, closeSrc func()) {
	defer func() {
		if closeSrc != nil {
			closeSrc()
		}
		c.mu.Lock()
		chans, attachs := c.chans, c.attachs
		c.chans, c.attachs = map[string]*Channel{}, map[string]chan bool{}
		c.mu.Unlock()
		for _, a := range attachs {
			close(a)
		}
		select {
		case <-c.hello:
		default:
			c.helloE = fmt.Errorf("the workspace's supervisor daemon did not answer: %s", c.Diag.String())
			close(c.hello)
		}
		close(c.ended)
		c.ds.resume(c, chans)
	}()
	fr := proto.NewReader(src)
	for {
		typ, p, err := fr.Next()
		if err != nil {
			return
		}
		switch typ {
		case proto.TypeHello:
			c.helloE = CheckHello(p)
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
// output it already got. A stream the runtime dropped (the workspace stops
// or goes, the runtime closes) is not resumed: its jobs end here.
func (ds *Daemons) resume(old *Daemon, chans map[string]*Channel) {
	ds.mu.Lock()
	current := ds.conns[old.id] == old
	if current {
		delete(ds.conns, old.id)
	}
	if held, ok := ds.held[old.id]; ok && current {
		for k, ch := range chans {
			held[k] = ch
		}
		ds.mu.Unlock()
		return
	}
	ds.mu.Unlock()
	if len(chans) == 0 {
		return
	}
	end := func(chs map[string]*Channel) {
		for _, ch := range chs {
			ch.w.Close()
		}
	}
	if !current {
		end(chans)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), resumeTimeout)
		defer cancel()
		if running, err := ds.Running(ctx, old.id); err != nil || !running {
			end(chans)
			return
		}
		c, err := ds.Conn(ctx, old.id)
		if err != nil {
			end(chans)
			return
		}
		for _, ch := range chans {
			if known, err := c.Attach(ctx, ch); err != nil || !known {
				ch.w.Close()
			}
		}
	}()
}

// Attach puts a channel on this stream and asks the daemon for the job's
// output past what the channel already got: known is false when the daemon
// does not know the job.
func (c *Daemon) Attach(ctx context.Context, ch *Channel) (known bool, err error) {
	answer := make(chan bool, 1)
	ch.mu.Lock()
	ch.conn = c
	a := proto.Attach{Key: ch.key, Stdout: ch.seen[sandbox.Stdout], Stderr: ch.seen[sandbox.Stderr]}
	ch.mu.Unlock()
	c.mu.Lock()
	if c.closed() {
		c.mu.Unlock()
		return false, fmt.Errorf("the stream to workspace %.12s ended", c.id)
	}
	c.chans[ch.key] = ch
	c.attachs[ch.key] = answer
	c.mu.Unlock()
	if err := c.send(proto.TypeAttach, proto.EncodeAttach(a)); err != nil {
		c.close(ch.key)
		return false, c.ds.engineErr(fmt.Errorf("re-attach the job: %w", err))
	}
	select {
	case known, ok := <-answer:
		if !ok {
			return false, fmt.Errorf("the stream to workspace %.12s ended", c.id)
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
func (c *Daemon) deliver(key string, typ byte, p []byte) {
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
func (c *Daemon) send(typ byte, p []byte) error {
	f, err := proto.AppendFrame(nil, typ, p)
	if err != nil {
		return err
	}
	return c.write(f)
}

func (c *Daemon) write(f []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(writeBound))
	if _, err := c.conn.Write(f); err != nil {
		c.conn.Close() // a partial frame: nothing after it could be read
		return err
	}
	return nil
}

// Open makes a job's channel on this stream; r gives the job's frames (for
// its Client's ReadUntilEnd).
func (c *Daemon) Open(key string) (ch *Channel, r *io.PipeReader, err error) {
	pr, pw := io.Pipe()
	ch = &Channel{key: key, w: pw, conn: c}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed() {
		return nil, nil, fmt.Errorf("the stream to workspace %.12s ended", c.id)
	}
	if _, dup := c.chans[key]; dup {
		return nil, nil, fmt.Errorf("job %s already runs in workspace %.12s", key, c.id)
	}
	c.chans[key] = ch
	return ch, pr, nil
}

// NewChannel makes a channel for re-attaching a job a previous server
// started (Attach puts it on a stream): the daemon sends only the output
// past skipStdout and skipStderr.
func NewChannel(key string, skipStdout, skipStderr int64) (*Channel, *io.PipeReader) {
	pr, pw := io.Pipe()
	return &Channel{key: key, w: pw, seen: [3]int64{sandbox.Stdout: skipStdout, sandbox.Stderr: skipStderr}}, pr
}

// EndChannel ends a channel that never got on a stream.
func (ch *Channel) EndChannel() { ch.w.Close() }

// close ends a job's channel here (the job itself is not touched).
func (c *Daemon) close(key string) {
	c.mu.Lock()
	ch := c.chans[key]
	delete(c.chans, key)
	c.mu.Unlock()
	if ch != nil {
		ch.w.Close()
	}
}

// OpenJob opens a channel for a new job on the stream to workspace id's
// daemon (made first when there is none): its key is the job's id when that
// fits, else a fresh one. The channel's Stream and Key name both.
func (ds *Daemons) OpenJob(ctx context.Context, id, jobID string) (*Channel, *io.PipeReader, error) {
	c, err := ds.Conn(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	key := jobID
	if key == "" || len(key) > proto.MaxKey || strings.Contains(key, "/") {
		key = uuid.NewString()
	}
	return c.Open(key)
}

// Verdict is how a daemon job ended without its report: its workspace
// stopped or went under it (Gone), or the stream to the daemon broke.
func (ds *Daemons) Verdict(ctx context.Context, id string, c *Daemon) sandbox.ExitStatus {
	running, err := ds.Running(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) || err == nil && !running {
		return sandbox.ExitStatus{ExitCode: -1, Gone: true}
	}
	if err != nil {
		return sandbox.ExitStatus{ExitCode: -1, Err: err}
	}
	msg := "the stream to the workspace's supervisor broke"
	if c != nil {
		if d := c.Diag.String(); d != "" {
			msg += ": " + d
		}
	}
	return sandbox.ExitStatus{ExitCode: -1, Err: errors.New(msg)}
}

// PipeConn makes a pipe into a streaming call's input (pods/exec) a Stream
// Conn: a write still blocked at its deadline closes the pipe, which ends
// the stream as a broken connection would.
func PipeConn(w *io.PipeWriter) interface {
	DeadlineWriter
	io.Closer
} {
	return &pipeConn{w: w}
}

type pipeConn struct {
	w        *io.PipeWriter
	mu       sync.Mutex
	deadline time.Time
}

func (p *pipeConn) Write(b []byte) (int, error) {
	p.mu.Lock()
	d := p.deadline
	p.mu.Unlock()
	if !d.IsZero() {
		wait := time.Until(d)
		if wait <= 0 {
			return 0, os.ErrDeadlineExceeded
		}
		t := time.AfterFunc(wait, func() { p.w.CloseWithError(os.ErrDeadlineExceeded) })
		defer t.Stop()
	}
	return p.w.Write(b)
}

func (p *pipeConn) SetWriteDeadline(t time.Time) error {
	p.mu.Lock()
	p.deadline = t
	p.mu.Unlock()
	return nil
}

func (p *pipeConn) Close() error { return p.w.Close() }

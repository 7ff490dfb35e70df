// Package supervisor is the server's side of the sandbox supervisor: its
// frame protocol (internal/supervisor/proto) spoken the same on every
// runtime, and the job spec it takes. The program itself is
// internal/supervisor/program (cmd/sandboxer-supervisor is its main). A Client
// for one supervisor's stream (a job's frames: input with flow control,
// signals, output, acks, the exit report) and a Daemon for the long-lived
// stream to a workspace's supervisor daemon, on which each job is a channel.
// Neither knows the engine: a runtime hands them a byte stream (a container
// attach, an exec, a pod attach) and reads the result.
package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

const (
	// InputWindow is how much input may be on its way to a job (sent, not
	// yet taken by its stdin): the supervisor never has to drop any, and a
	// job that does not read holds a writer back instead.
	InputWindow = 256 << 10
	// inputChunk is the largest Data frame sent.
	inputChunk = 64 << 10
	// diagBytes is how much of the supervisor's own stderr is kept for errors.
	diagBytes = 4 << 10
)

// FrameWriter writes one whole frame to a supervisor, giving up when ctx ends.
type FrameWriter interface {
	WriteFrame(ctx context.Context, frame []byte) error
}

// DeadlineWriter is a connection whose writes can be given a deadline (a
// hijacked engine connection, a daemon channel).
type DeadlineWriter interface {
	io.Writer
	SetWriteDeadline(t time.Time) error
}

// ConnWriter writes frames to a connection with write deadlines: one frame
// at a time, and a write cut short by ctx fails with ctx's error.
func ConnWriter(c DeadlineWriter) FrameWriter { return &connWriter{c: c} }

type connWriter struct {
	mu sync.Mutex
	c  DeadlineWriter
}

func (w *connWriter) WriteFrame(ctx context.Context, frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	deadline, _ := ctx.Deadline()
	_ = w.c.SetWriteDeadline(deadline)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		_ = w.c.SetWriteDeadline(time.Unix(1, 0))
	})
	_, err := w.c.Write(frame)
	if !stop() {
		<-fired
	}
	_ = w.c.SetWriteDeadline(time.Time{})
	if err != nil && (ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return context.DeadlineExceeded
	}
	return err
}

// PipeWriter writes frames to a writer that has no deadlines (the input of
// a streaming API call): one frame at a time; when ctx ends first the
// write goes on in the background, still holding the turn, so frames never
// interleave, and ctx's error is returned.
func PipeWriter(w io.Writer) FrameWriter { return &pipeWriter{w: w} }

type pipeWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *pipeWriter) WriteFrame(ctx context.Context, frame []byte) error {
	w.mu.Lock()
	errc := make(chan error, 1)
	go func() {
		_, err := w.w.Write(frame)
		w.mu.Unlock()
		errc <- err
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Client is the server's side of one supervisor's stream: it writes frames
// through W and acts on the frames read by ReadUntilEnd (or Parse).
type Client struct {
	// W takes frames to the supervisor; nil when there is no way to it (a
	// job adopted from its log): input, signals and resizes then fail.
	W FrameWriter
	// HasStdin: the job reads frames' Data (stdin "pipe"). TTY: it runs on
	// a terminal (Resize works). Set before the spec frame goes.
	HasStdin, TTY bool
	// Kept: adopted with its stdin and terminal (a workspace daemon's
	// job); the job's manager knows whether it has either.
	Kept bool
	// JoinMidStream: the stream was joined while running, so frames are
	// found by proto.Resync. Set before ReadUntilEnd.
	JoinMidStream bool
	// Out is where job output goes, past what an earlier server captured.
	Out OutputSwitch
	// Diag keeps the tail of the supervisor's own stderr, for errors.
	Diag TailBuffer
	// AckExit answers the Exit frame with TypeExitAck (the spec asked the
	// supervisor to wait for it: proto.Spec.AwaitExitAck). Set before
	// ReadUntilEnd.
	AckExit bool

	turn chan struct{} // one stdin writer (or closer) at a time

	ackMu   sync.Mutex
	ackCond *sync.Cond
	sent    uint64 // Data bytes sent
	acked   uint64 // Data bytes the job's stdin took
	eofSent bool

	hello     chan struct{} // closed once Hello arrived (or the stream ended)
	helloOnce func()
	helloErr  error
	exit      *proto.Exit   // the supervisor's report, once it came
	files     returnedFiles // assembled from File frames, handed over in exit
	exited    chan struct{} // closed when the report came
	consumed  int64         // bytes of the supervisor's stdout parsed so far
	drained   chan struct{} // closed when the stream ended
}

// New makes a Client with no writer.
func New() *Client {
	c := &Client{
		turn:    make(chan struct{}, 1),
		hello:   make(chan struct{}),
		exited:  make(chan struct{}),
		drained: make(chan struct{}),
	}
	c.ackCond = sync.NewCond(&c.ackMu)
	c.helloOnce = sync.OnceFunc(func() { close(c.hello) })
	return c
}

// Hello is closed once the supervisor's Hello arrived or the stream ended;
// HelloErr then says whether it speaks another protocol version.
func (c *Client) Hello() <-chan struct{} { return c.hello }

// HelloErr is valid once Hello is closed.
func (c *Client) HelloErr() error { return c.helloErr }

// Exited is closed when the supervisor's Exit report came: every output
// frame came before it.
func (c *Client) Exited() <-chan struct{} { return c.exited }

// Drained is closed when the stream from the supervisor ended.
func (c *Client) Drained() <-chan struct{} { return c.drained }

// Exit is the supervisor's report, or nil; valid once Exited or Drained is closed.
func (c *Client) Exit() *proto.Exit { return c.exit }

// Consumed is how many bytes of the supervisor's stdout were parsed (valid
// once Drained is closed): a re-read of a log continues after them.
func (c *Client) Consumed() int64 { return c.consumed }

// Ended says whether the stream is over (or the job reported): no input
// can reach the job.
func (c *Client) Ended() bool {
	select {
	case <-c.drained:
		return true
	case <-c.exited:
		return true
	default:
		return false
	}
}

// WriteFrame writes one frame to the supervisor, giving up when ctx ends.
func (c *Client) WriteFrame(ctx context.Context, typ byte, payload []byte) error {
	if c.W == nil {
		return sandbox.ErrNoStdin
	}
	frame, err := proto.AppendFrame(nil, typ, payload)
	if err != nil {
		return err
	}
	return c.W.WriteFrame(ctx, frame)
}

// WriteStdin sends p as Data frames, never more than InputWindow ahead of
// what the job has read: it returns how much was sent when ctx ends first.
func (c *Client) WriteStdin(ctx context.Context, p []byte) (int, error) {
	if !c.HasStdin || c.W == nil {
		return 0, sandbox.ErrNoStdin
	}
	select {
	case c.turn <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-c.turn }()
	if c.eofSent {
		return 0, sandbox.ErrNoStdin
	}
	written := 0
	for len(p) > 0 {
		n := min(len(p), inputChunk)
		if err := c.waitWindow(ctx, n); err != nil {
			return written, err
		}
		if err := c.WriteFrame(ctx, proto.TypeData, p[:n]); err != nil {
			return written, err
		}
		c.ackMu.Lock()
		c.sent += uint64(n)
		c.ackMu.Unlock()
		written += n
		p = p[n:]
	}
	return written, nil
}

// waitWindow waits until n more bytes fit in the input window.
func (c *Client) waitWindow(ctx context.Context, n int) error {
	stop := context.AfterFunc(ctx, c.wake)
	defer stop()
	c.ackMu.Lock()
	defer c.ackMu.Unlock()
	for c.sent-c.acked+uint64(n) > InputWindow {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if c.Ended() {
			return io.ErrClosedPipe
		}
		c.ackCond.Wait()
	}
	return nil
}

func (c *Client) wake() {
	c.ackMu.Lock()
	c.ackCond.Broadcast()
	c.ackMu.Unlock()
}

// CloseStdin sends end-of-file to the job, after writes in progress,
// waiting at most timeout for the frame to go.
func (c *Client) CloseStdin(timeout time.Duration) error {
	if !c.HasStdin || c.W == nil {
		return nil
	}
	c.turn <- struct{}{}
	defer func() { <-c.turn }()
	if c.eofSent || c.Ended() {
		return nil
	}
	c.eofSent = true
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.WriteFrame(ctx, proto.TypeEOF, nil)
}

// Resize changes a TTY job's terminal size.
func (c *Client) Resize(ctx context.Context, rows, cols uint16) error {
	if !c.TTY {
		return sandbox.ErrNoTTY
	}
	payload, _ := json.Marshal(proto.TTYSpec{Rows: rows, Cols: cols})
	return c.WriteFrame(ctx, proto.TypeResize, payload)
}

// ReadUntilEnd acts on the supervisor's frames from r until it ends, then
// calls closeSrc and closes Drained.
func (c *Client) ReadUntilEnd(r io.Reader, closeSrc func()) {
	defer close(c.drained)
	defer closeSrc()
	defer c.wake() // writers waiting for window space see the end
	defer c.helloOnce()
	c.Parse(r)
}

// CheckHello reads a supervisor's Hello and refuses another protocol version.
func CheckHello(p []byte) error {
	var hello proto.Hello
	if err := json.Unmarshal(p, &hello); err != nil || hello.Protocol != proto.Version {
		return fmt.Errorf("the image's sandbox supervisor speaks protocol %d, this server %d: rebuild the images (make images)", hello.Protocol, proto.Version)
	}
	return nil
}

// Parse acts on the supervisor's frames read from src until it ends,
// counting the bytes taken (so a re-read of a log can continue after them).
// Only one Parse runs at a time.
func (c *Client) Parse(src io.Reader) {
	cr := &countingReader{r: src, n: &c.consumed}
	r := proto.NewReader(cr)
	if c.JoinMidStream {
		r = proto.Resync(bufio.NewReader(cr))
	}
	for {
		typ, p, err := r.Next()
		if err != nil {
			return
		}
		switch typ {
		case proto.TypeHello:
			c.helloErr = CheckHello(p)
			c.helloOnce()
		case proto.TypeStdout:
			c.Out.write(sandbox.Stdout, p)
		case proto.TypeStderr:
			c.Out.write(sandbox.Stderr, p)
		case proto.TypeAck:
			if n, err := proto.DecodeAck(p); err == nil {
				c.ackMu.Lock()
				c.acked = max(c.acked, n)
				// Adopted (Kept): the count includes input an earlier
				// server sent, which this one never counted.
				c.sent = max(c.sent, c.acked)
				c.ackCond.Broadcast()
				c.ackMu.Unlock()
			}
		case proto.TypeFile:
			if f, ok := c.files.add(p); ok && f.Kind == proto.KindFigure {
				c.Out.file(f)
			}
		case proto.TypeExit:
			var e proto.Exit
			if json.Unmarshal(p, &e) == nil && c.exit == nil {
				e.Files = c.files.whole()
				c.exit = &e
				// The last frame: every output frame came before it.
				close(c.exited)
				if c.AckExit {
					go c.ackExit()
				}
			}
		}
	}
}

// ackExit tells the supervisor its Exit frame arrived, so it may end.
func (c *Client) ackExit() {
	ctx, cancel := context.WithTimeout(context.Background(), proto.ExitAckWait)
	defer cancel()
	_ = c.WriteFrame(ctx, proto.TypeExitAck, nil) // gone already: it ends on its own
}

// ExitStatus is the job's end as the supervisor reported it.
func ExitStatus(e *proto.Exit) sandbox.ExitStatus {
	st := sandbox.ExitStatus{ExitCode: e.ExitCode, OOMKilled: e.OOMKilled, TimedOut: e.TimedOut,
		Usage:    sandbox.Usage{CPUMS: e.Usage.CPUMS, PeakMemoryBytes: e.Usage.PeakMemoryBytes, WallMS: e.Usage.WallMS},
		GoBuilds: e.GoBuilds, Files: e.Files, Stamps: e.Stamps}
	if e.Error != "" {
		st.StartErr = errors.New(e.Error)
	}
	return st
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

// OutputSwitch is where job output goes: nowhere until Set.
type OutputSwitch struct {
	mu  sync.Mutex
	out sandbox.Output
	// skip counts bytes of each stream to pass over (already captured by an
	// earlier server process, when adopting).
	skip [3]int64
}

// Set sends output to out from now on, past skipStdout and skipStderr bytes.
func (s *OutputSwitch) Set(out sandbox.Output, skipStdout, skipStderr int64) {
	s.mu.Lock()
	s.out = out
	s.skip[sandbox.Stdout], s.skip[sandbox.Stderr] = skipStdout, skipStderr
	s.mu.Unlock()
}

// file hands a whole returned figure to an Output that takes them live.
func (s *OutputSwitch) file(f proto.ReturnedFile) {
	s.mu.Lock()
	out, _ := s.out.(sandbox.FileOutput)
	s.mu.Unlock()
	if out != nil {
		out.File(f)
	}
}

func (s *OutputSwitch) write(stream sandbox.Stream, p []byte) {
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

// TailBuffer keeps the last 4 KiB written to it.
type TailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *TailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > diagBytes {
		t.b = t.b[len(t.b)-diagBytes:]
	}
	return len(p), nil
}

func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}

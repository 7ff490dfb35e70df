package tunnel

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Mux is one side of a tunnel stream: the tunnel's (NewTunnel: it opens
// channels) or the server's (NewServer: it accepts them, as a net.Listener).
type Mux struct {
	server bool
	r      io.Reader

	openMu sync.Mutex // Open frames leave in the order of their ids
	wmu    sync.Mutex
	w      io.Writer
	wbuf   []byte
	werr   error

	mu       sync.Mutex
	chans    map[uint32]*Conn
	last     uint32 // the highest channel id opened
	live     int    // server: channels opened and not yet closed by both sides
	queue    []*Conn
	ready    chan struct{} // a channel was queued
	listenOK bool          // server: Accept still answers
	done     chan struct{} // the stream ended
	err      error
	code     int
	ended    bool
	slots    chan struct{} // tunnel: one per open channel
	stdin    *Conn         // channel 0
	hello    chan struct{} // server: closed when the tunnel's Hello came
}

// ErrProtocol is wrapped by every error about a frame the other side should
// not have sent.
var ErrProtocol = errors.New("tunnel protocol violation")

func newMux(r io.Reader, w io.Writer, server bool) *Mux {
	m := &Mux{server: server, r: r, w: w, chans: map[uint32]*Conn{}, ready: make(chan struct{}, 1),
		done: make(chan struct{}), listenOK: true, slots: make(chan struct{}, MaxChannels), hello: make(chan struct{})}
	m.stdin = m.newConn(0)
	m.chans[0] = m.stdin
	return m
}

// NewTunnel is the tunnel's side: it writes Hello to w at once.
func NewTunnel(r io.Reader, w io.Writer) (*Mux, error) {
	m := newMux(r, w, false)
	return m, m.send(Frame{Type: TypeHello, Payload: []byte(Magic)})
}

// NewServer is the server's side, reading the tunnel's stdout from r and
// writing its stdin to w; it is a net.Listener of the tunnel's channels.
func NewServer(r io.Reader, w io.Writer) *Mux { return newMux(r, w, true) }

func (m *Mux) send(f Frame) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if m.werr != nil {
		return m.werr
	}
	m.wbuf = AppendFrame(m.wbuf[:0], f)
	if _, err := m.w.Write(m.wbuf); err != nil {
		m.werr = fmt.Errorf("tunnel: writing a frame: %w", err)
	}
	return m.werr
}

// Stdin is channel 0, CMD's stdin: the server writes it, the tunnel reads it.
func (m *Mux) Stdin() *Conn { return m.stdin }

// Hello is closed when the tunnel's Hello came (server side): a tunnel
// writes it once it listens.
func (m *Mux) Hello() <-chan struct{} { return m.hello }

// Done is closed when the stream has ended.
func (m *Mux) Done() <-chan struct{} { return m.done }

// ExitCode is CMD's exit code from the End frame, if one came.
func (m *Mux) ExitCode() (int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.code, m.ended
}

// Run reads frames until the stream ends: nil after End (server) or when
// the other side closed the stream cleanly (tunnel), else the error (it
// wraps ErrProtocol for a frame that breaks the rules). Every channel then
// reads EOF after what it holds, and writes fail.
func (m *Mux) Run() error {
	buf := make([]byte, MaxData)
	err := m.loop(buf)
	if errors.Is(err, io.EOF) && !m.server {
		err = nil
	}
	m.mu.Lock()
	m.err = err
	if m.err == nil {
		m.err = net.ErrClosed
	}
	chans := m.chans
	m.chans = map[uint32]*Conn{}
	m.mu.Unlock()
	for _, c := range chans {
		c.mu.Lock()
		c.peerClosed, c.rEOF, c.sentClose, c.closeDone = true, true, true, true
		c.cond.Broadcast()
		c.mu.Unlock()
	}
	close(m.done)
	return err
}

func (m *Mux) loop(buf []byte) error {
	first := true
	for {
		f, err := ReadFrame(m.r, buf)
		if err != nil {
			if errors.Is(err, io.EOF) && m.server {
				return errors.New("tunnel: the stream ended without an End frame")
			}
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: %w", ErrProtocol, err)
			}
			return err
		}
		if m.server && first != (f.Type == TypeHello) {
			return fmt.Errorf("%w: the first frame must be Hello, and only the first", ErrProtocol)
		}
		first = false
		if err := m.frame(f); err != nil {
			if errors.Is(err, errEnd) {
				return nil
			}
			return fmt.Errorf("%w: %s", ErrProtocol, err)
		}
	}
}

var errEnd = errors.New("end")

// frame handles one frame; it never blocks on a channel and never writes
// to the stream itself.
func (m *Mux) frame(f Frame) error {
	switch f.Type {
	case TypeHello:
		if string(f.Payload) != Magic {
			return fmt.Errorf("Hello %q, not %q", f.Payload, Magic)
		}
		if m.server {
			close(m.hello) // only the first frame is a Hello (loop)
		}
		return nil
	case TypeEnd:
		if !m.server {
			return errors.New("an End frame from the server")
		}
		m.mu.Lock()
		m.code, m.ended = int(int32(u32(f.Payload))), true
		m.mu.Unlock()
		return errEnd
	case TypeOpen:
		return m.opened(f.Channel)
	}
	m.mu.Lock()
	c := m.chans[f.Channel]
	last := m.last
	m.mu.Unlock()
	if c == nil {
		if f.Channel > last {
			return fmt.Errorf("a %q frame on channel %d, never opened", f.Type, f.Channel)
		}
		return nil // a channel that is gone
	}
	switch f.Type {
	case TypeData:
		return c.data(f.Payload)
	case TypeCredit:
		return c.addCredit(u32(f.Payload))
	case TypeEOF:
		c.mu.Lock()
		c.rEOF = true
		c.cond.Broadcast()
		c.mu.Unlock()
	case TypeClose:
		m.peerClose(c)
	}
	return nil
}

func (m *Mux) opened(id uint32) error {
	if !m.server {
		return errors.New("an Open frame from the server")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if id <= m.last {
		return fmt.Errorf("Open of channel %d after channel %d", id, m.last)
	}
	if m.live >= MaxChannels || len(m.queue) >= MaxChannels {
		return fmt.Errorf("Open of channel %d past %d open channels", id, MaxChannels)
	}
	m.last = id
	m.live++
	c := m.newConn(id)
	m.chans[id] = c
	m.queue = append(m.queue, c)
	select {
	case m.ready <- struct{}{}:
	default:
	}
	return nil
}

// peerClose handles the other side's Close: what the channel holds stays
// readable, then EOF; the channel is dropped once both sides have sent
// Close.
func (m *Mux) peerClose(c *Conn) {
	c.mu.Lock()
	if c.peerClosed {
		c.mu.Unlock()
		return
	}
	c.peerClosed, c.rEOF = true, true
	both := c.closeDone || m.server && c.sentClose
	// The tunnel answers at once (its slot comes back when the server's
	// Close arrives); the server answers when its user closes the channel,
	// so the tunnel cannot open another while the server still holds it.
	answer := !c.sentClose && !m.server
	if answer {
		c.sentClose = true
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	if both {
		m.drop(c.id)
		return
	}
	if !answer {
		return
	}
	go func() { // the frame reader never writes
		_ = m.send(Frame{Type: TypeClose, Channel: c.id})
		m.drop(c.id)
	}()
}

func (m *Mux) drop(id uint32) {
	m.mu.Lock()
	_, ok := m.chans[id]
	delete(m.chans, id)
	if ok && m.server && id != 0 {
		m.live--
	}
	m.mu.Unlock()
	if ok && !m.server && id != 0 {
		<-m.slots
	}
}

// Open is a new channel (tunnel side); it waits while MaxChannels are open.
func (m *Mux) Open() (*Conn, error) {
	select {
	case m.slots <- struct{}{}:
	case <-m.done:
		return nil, net.ErrClosed
	}
	m.openMu.Lock()
	defer m.openMu.Unlock()
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		<-m.slots
		return nil, m.err
	}
	m.last++
	c := m.newConn(m.last)
	m.chans[c.id] = c
	m.mu.Unlock()
	// Frames leave in the order they are sent: Open before the channel's Data.
	if err := m.send(Frame{Type: TypeOpen, Channel: c.id}); err != nil {
		return nil, err
	}
	return c, nil
}

// Accept is the next channel the tunnel opened (server side).
func (m *Mux) Accept() (net.Conn, error) {
	for {
		m.mu.Lock()
		if !m.listenOK {
			m.mu.Unlock()
			return nil, net.ErrClosed
		}
		if len(m.queue) > 0 {
			c := m.queue[0]
			m.queue = m.queue[1:]
			m.mu.Unlock()
			return c, nil
		}
		m.mu.Unlock()
		select {
		case <-m.ready:
		case <-m.done:
			m.mu.Lock()
			n := len(m.queue)
			m.mu.Unlock()
			if n == 0 {
				return nil, net.ErrClosed
			}
		}
	}
}

// Close stops Accept (the listener's Close); channels carry on.
func (m *Mux) Close() error {
	m.mu.Lock()
	m.listenOK = false
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
	return nil
}

// Addr names the tunnel.
func (m *Mux) Addr() net.Addr { return addr{} }

// End closes every channel and sends End with CMD's exit code (tunnel side).
func (m *Mux) End(code int) error {
	m.mu.Lock()
	var cs []*Conn
	for _, c := range m.chans {
		cs = append(cs, c)
	}
	m.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
	return m.send(Frame{Type: TypeEnd, Payload: be32(uint32(int32(code)))})
}

type addr struct{}

func (addr) Network() string { return "tunnel" }
func (addr) String() string  { return "sandboxer-tunnel" }

// Conn is one channel, a net.Conn with CloseWrite.
type Conn struct {
	m    *Mux
	id   uint32
	wmu  sync.Mutex // serialises Write and CloseWrite
	mu   sync.Mutex
	cond *sync.Cond

	buf        []byte // received, unread
	consumed   int    // read, not yet credited
	rEOF       bool   // the other side sends no more
	credit     int    // bytes this side may still send
	wEOF       bool   // this side sent EOF
	closed     bool   // Close was called
	peerClosed bool   // the other side sent Close, or the stream ended
	sentClose  bool   // this side's Close is decided
	closeDone  bool   // and written to the stream
	rdl, wdl   time.Time
	rt, wt     *time.Timer
}

func (m *Mux) newConn(id uint32) *Conn {
	c := &Conn{m: m, id: id, credit: Window}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *Conn) data(p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rEOF {
		return fmt.Errorf("Data on channel %d after its EOF", c.id)
	}
	if len(c.buf)+c.consumed+len(p) > Window {
		return fmt.Errorf("Data on channel %d beyond its credit of %d bytes", c.id, Window)
	}
	if c.closed {
		return nil
	}
	c.buf = append(c.buf, p...)
	c.cond.Broadcast()
	return nil
}

func (c *Conn) addCredit(n uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n == 0 || int64(c.credit)+int64(n) > Window {
		return fmt.Errorf("Credit of %d on channel %d, past its window of %d bytes", n, c.id, Window)
	}
	c.credit += int(n)
	c.cond.Broadcast()
	return nil
}

func (c *Conn) expired(dl time.Time) bool { return !dl.IsZero() && !time.Now().Before(dl) }

// Read reads what the other side sent.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	for {
		switch {
		case c.closed:
			c.mu.Unlock()
			return 0, net.ErrClosed
		case len(c.buf) > 0:
			n := copy(p, c.buf)
			c.buf = c.buf[n:]
			if len(c.buf) == 0 {
				c.buf = nil
			}
			c.consumed += n
			credit := 0
			if c.consumed >= Window/4 && !c.rEOF {
				credit, c.consumed = c.consumed, 0
			}
			c.mu.Unlock()
			if credit > 0 {
				_ = c.m.send(Frame{Type: TypeCredit, Channel: c.id, Payload: be32(uint32(credit))})
			}
			return n, nil
		case c.rEOF:
			c.mu.Unlock()
			return 0, io.EOF
		case c.expired(c.rdl):
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case len(p) == 0:
			c.mu.Unlock()
			return 0, nil
		}
		c.cond.Wait()
	}
}

// errPeerClosed is a write to a channel the other side closed.
var errPeerClosed = errors.New("tunnel: the channel was closed by the other side")

// Write sends p within the channel's credit, waiting for more as needed.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		c.mu.Lock()
		for c.credit == 0 && !c.closed && !c.peerClosed && !c.wEOF && !c.expired(c.wdl) {
			c.cond.Wait()
		}
		var err error
		switch {
		case c.closed:
			err = net.ErrClosed
		case c.peerClosed:
			err = errPeerClosed
		case c.wEOF:
			err = errors.New("tunnel: write after CloseWrite")
		case c.credit == 0:
			err = os.ErrDeadlineExceeded
		}
		if err != nil {
			c.mu.Unlock()
			return n, err
		}
		k := min(len(p), c.credit, MaxData)
		c.credit -= k
		c.mu.Unlock()
		if err := c.m.send(Frame{Type: TypeData, Channel: c.id, Payload: p[:k]}); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// CloseWrite sends EOF: the other side reads EOF after what was written.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.closed || c.peerClosed || c.wEOF {
		c.mu.Unlock()
		return nil
	}
	c.wEOF = true
	c.cond.Broadcast()
	c.mu.Unlock()
	return c.m.send(Frame{Type: TypeEOF, Channel: c.id})
}

// Close ends the channel both ways.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.closed = true
	c.buf = nil
	send := !c.sentClose
	c.sentClose = true
	for _, t := range []*time.Timer{c.rt, c.wt} {
		if t != nil {
			t.Stop()
		}
	}
	// The server drops a channel before its Close leaves (the tunnel
	// opens no other before it arrives); the tunnel only after, so that
	// an Open its slot allows follows this Close on the stream.
	dropFirst := send && c.m.server && c.peerClosed
	c.cond.Broadcast()
	c.mu.Unlock()
	if !send {
		return nil
	}
	if dropFirst {
		c.m.drop(c.id)
	}
	_ = c.m.send(Frame{Type: TypeClose, Channel: c.id})
	c.mu.Lock()
	c.closeDone = true
	both := c.peerClosed
	c.mu.Unlock()
	if both {
		c.m.drop(c.id)
	}
	return nil
}

func (c *Conn) LocalAddr() net.Addr  { return addr{} }
func (c *Conn) RemoteAddr() net.Addr { return addr{} }

func (c *Conn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl = t
	c.rt = c.wake(c.rt, t)
	return nil
}

func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wdl = t
	c.wt = c.wake(c.wt, t)
	return nil
}

// wake arranges for waiters to look at a deadline again when it passes.
func (c *Conn) wake(old *time.Timer, t time.Time) *time.Timer {
	if old != nil {
		old.Stop()
	}
	c.cond.Broadcast()
	if t.IsZero() {
		return nil
	}
	return time.AfterFunc(time.Until(t), func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
}

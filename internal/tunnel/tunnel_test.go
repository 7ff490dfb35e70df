package tunnel

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// pair is a tunnel side and a server side joined by pipes, both running.
func pair(t *testing.T) (tun, srv *Mux, srvErr <-chan error) {
	t.Helper()
	toSrvR, toSrvW := io.Pipe()
	toTunR, toTunW := io.Pipe()
	srv = NewServer(toSrvR, toTunW)
	errc := make(chan error, 1)
	go func() { errc <- srv.Run() }()
	tun, err := NewTunnel(toTunR, toSrvW)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = tun.Run() }()
	t.Cleanup(func() {
		toSrvW.Close()
		toTunW.Close()
	})
	return tun, srv, errc
}

func TestFrameRoundTrip(t *testing.T) {
	for _, f := range []Frame{
		{Type: TypeHello, Payload: []byte(Magic)},
		{Type: TypeOpen, Channel: 7},
		{Type: TypeData, Channel: 1, Payload: bytes.Repeat([]byte("x"), MaxData)},
		{Type: TypeCredit, Channel: 3, Payload: be32(100)},
		{Type: TypeEOF, Channel: 3},
		{Type: TypeClose, Channel: 3},
		{Type: TypeEnd, Payload: be32(uint32(0xffffffff))},
	} {
		got, err := ReadFrame(bytes.NewReader(AppendFrame(nil, f)), make([]byte, MaxData))
		if err != nil || got.Type != f.Type || got.Channel != f.Channel || !bytes.Equal(got.Payload, f.Payload) {
			t.Errorf("%q: got %+v, %v", f.Type, got.Type, err)
		}
	}
}

func TestReadFrameRefusesMalformed(t *testing.T) {
	for name, b := range map[string][]byte{
		"unknown type":     AppendFrame(nil, Frame{Type: 'q'}),
		"empty data":       AppendFrame(nil, Frame{Type: TypeData, Channel: 1}),
		"oversized data":   {TypeData, 0, 0, 0, 1, 0, 0, 0x80, 1},
		"credit too long":  AppendFrame(nil, Frame{Type: TypeCredit, Payload: make([]byte, 5)}),
		"open with bytes":  AppendFrame(nil, Frame{Type: TypeOpen, Payload: []byte{1}}),
		"cut short":        AppendFrame(nil, Frame{Type: TypeData, Channel: 1, Payload: []byte("abc")})[:11],
		"bad hello length": AppendFrame(nil, Frame{Type: TypeHello, Payload: []byte("x")}),
	} {
		if _, err := ReadFrame(bytes.NewReader(b), make([]byte, MaxData)); err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, Frame{Type: TypeData, Channel: 1, Payload: []byte("hi")}))
	f.Add(AppendFrame(nil, Frame{Type: TypeCredit, Channel: 1, Payload: be32(9)}))
	f.Add([]byte{TypeData, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		buf := make([]byte, MaxData)
		r := bytes.NewReader(b)
		for {
			fr, err := ReadFrame(r, buf)
			if err != nil {
				return
			}
			if len(fr.Payload) > MaxData {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
		}
	})
}

// FuzzServer feeds the server side arbitrary streams: it never panics and
// never reads past a protocol error.
func FuzzServer(f *testing.F) {
	var ok []byte
	ok = AppendFrame(ok, Frame{Type: TypeHello, Payload: []byte(Magic)})
	ok = AppendFrame(ok, Frame{Type: TypeOpen, Channel: 1})
	ok = AppendFrame(ok, Frame{Type: TypeData, Channel: 1, Payload: []byte("GET")})
	ok = AppendFrame(ok, Frame{Type: TypeClose, Channel: 1})
	f.Add(append(ok, AppendFrame(nil, Frame{Type: TypeEnd, Payload: be32(3)})...))
	f.Add(append(ok, AppendFrame(nil, Frame{Type: TypeOpen, Channel: 1})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := NewServer(bytes.NewReader(b), io.Discard)
		go func() {
			for {
				c, err := m.Accept()
				if err != nil {
					return
				}
				go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
			}
		}()
		_ = m.Run()
		m.Close()
	})
}

// Bytes cross both ways intact, with half closes.
func TestChannelCarriesBothWays(t *testing.T) {
	tun, srv, _ := pair(t)
	go func() { // the server echoes a hash of what it reads
		c, err := srv.Accept()
		if err != nil {
			return
		}
		h := sha256.New()
		_, _ = io.Copy(h, c)
		_, _ = c.Write(h.Sum(nil))
		_ = c.(*Conn).CloseWrite()
		c.Close()
	}()
	c, err := tun.Open()
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3*Window+123)
	_, _ = rand.Read(data)
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	got, err := io.ReadAll(c)
	want := sha256.Sum256(data)
	if err != nil || !bytes.Equal(got, want[:]) {
		t.Fatalf("got %x, %v; want %x", got, err, want)
	}
}

// A channel nobody reads stops at its window; the others carry on, and the
// stalled one still delivers everything once read.
func TestStalledChannelStallsNoOther(t *testing.T) {
	tun, srv, _ := pair(t)
	stalled, err := tun.Open()
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan int, 1)
	go func() {
		n, _ := stalled.Write(make([]byte, 4*Window))
		wrote <- n
	}()
	first, err := srv.Accept()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tun.Open()
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = c.Write(make([]byte, 2*Window))
			c.CloseWrite()
		}()
	}
	for range 5 {
		c, err := srv.Accept()
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, c)
		if err != nil || n != 2*Window {
			t.Fatalf("a free channel got %d bytes, %v", n, err)
		}
	}
	wg.Wait()
	select {
	case n := <-wrote:
		t.Fatalf("the stalled channel's writer finished (%d bytes) with nobody reading", n)
	default:
	}
	n, err := io.ReadFull(first, make([]byte, 4*Window))
	if err != nil || n != 4*Window || <-wrote != 4*Window {
		t.Fatalf("the stalled channel delivered %d bytes, %v", n, err)
	}
}

// The tunnel never has more than MaxChannels open, counting those the
// server still holds: the next Open waits for a Close by both sides.
func TestOpenWaitsPastMaxChannels(t *testing.T) {
	tun, srv, errc := pair(t)
	var cs []*Conn
	for range MaxChannels {
		c, err := tun.Open()
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	opened := make(chan *Conn, 1)
	go func() {
		c, _ := tun.Open()
		opened <- c
	}()
	var scs []net.Conn
	for range MaxChannels {
		sc, err := srv.Accept()
		if err != nil {
			t.Fatal(err)
		}
		scs = append(scs, sc)
	}
	select {
	case <-opened:
		t.Fatal("a channel past MaxChannels opened")
	default:
	}
	// The tunnel's Close alone frees no slot: the server still holds the
	// channel (and what it buffered) until its user closes it too.
	cs[0].Close()
	cs[1].Close()
	scs[1].Close()
	c := <-opened
	if c == nil {
		t.Fatal("no channel after a Close")
	}
	if _, err := srv.Accept(); err != nil {
		t.Fatal(err, <-errc)
	}
}

// A tunnel that sends past its credit, opens out of order or past the
// limit, or uses a channel never opened ends the stream with ErrProtocol.
func TestServerRefusesBrokenRules(t *testing.T) {
	hello := AppendFrame(nil, Frame{Type: TypeHello, Payload: []byte(Magic)})
	open1 := AppendFrame(nil, Frame{Type: TypeOpen, Channel: 1})
	var flood, over []byte
	for i := range Window/MaxData + 1 {
		_ = i
		flood = AppendFrame(flood, Frame{Type: TypeData, Channel: 1, Payload: make([]byte, MaxData)})
	}
	for i := range MaxChannels + 1 {
		over = AppendFrame(over, Frame{Type: TypeOpen, Channel: uint32(i + 1)})
	}
	for name, b := range map[string][]byte{
		"past credit":   append(append(hello, open1...), flood...),
		"out of order":  append(append(hello, open1...), open1...),
		"past the max":  append(hello, over...),
		"never opened":  append(hello, AppendFrame(nil, Frame{Type: TypeData, Channel: 9, Payload: []byte("x")})...),
		"no hello":      open1,
		"wrong magic":   AppendFrame(nil, Frame{Type: TypeHello, Payload: []byte("sbxtun/9")}),
		"over credit":   append(append(hello, open1...), AppendFrame(nil, Frame{Type: TypeCredit, Channel: 1, Payload: be32(1)})...),
		"data past eof": append(append(append(hello, open1...), AppendFrame(nil, Frame{Type: TypeEOF, Channel: 1})...), AppendFrame(nil, Frame{Type: TypeData, Channel: 1, Payload: []byte("x")})...),
	} {
		err := NewServer(bytes.NewReader(b), io.Discard).Run()
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v", name, err)
		}
	}
	var end []byte
	end = AppendFrame(append(hello, open1...), Frame{Type: TypeEnd, Payload: be32(uint32(0xfffffffe))})
	m := NewServer(bytes.NewReader(end), io.Discard)
	if err := m.Run(); err != nil {
		t.Fatal(err)
	}
	if code, ok := m.ExitCode(); !ok || code != -2 {
		t.Fatalf("exit code %d, %v", code, ok)
	}
	// A tunnel refuses what only a tunnel may send.
	tm, _ := NewTunnel(bytes.NewReader(open1), io.Discard)
	if err := tm.Run(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("tunnel given an Open: %v", err)
	}
}

// End closes the channels and carries the code; Accept then ends.
func TestEndClosesEverything(t *testing.T) {
	tun, srv, errc := pair(t)
	c, err := tun.Open()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := srv.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if err := tun.End(42); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if code, ok := srv.ExitCode(); !ok || code != 42 {
		t.Fatalf("code %d, %v", code, ok)
	}
	if _, err := sc.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("server channel after End: %v", err)
	}
	if _, err := sc.Write([]byte("x")); err == nil {
		t.Fatal("a write after End succeeded")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("tunnel channel after End: %v", err)
	}
	if _, err := srv.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after End: %v", err)
	}
}

// Channels opened at once reach the server in the order of their ids.
func TestConcurrentOpensStayInOrder(t *testing.T) {
	tun, srv, errc := pair(t)
	var wg sync.WaitGroup
	for range MaxChannels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := tun.Open(); err == nil {
				c.Close()
			}
		}()
	}
	wg.Wait()
	for range MaxChannels {
		sc, err := srv.Accept()
		if err != nil {
			t.Fatal(err)
		}
		sc.Close()
	}
	if _, err := tun.Open(); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Accept(); err != nil {
		t.Fatalf("the server's stream ended: %v, %v", err, <-errc)
	}
}

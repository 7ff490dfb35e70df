package program

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/tunnel"
)

// A malformed frame from the server ends the tunnel: CMD is killed, the
// reason is on stderr, the code is 125.
func TestTunnelEndsOnMalformedFrame(t *testing.T) {
	var stdout, stderr bytes.Buffer
	in := strings.NewReader("D\x00\x00\x00\x01\xff\xff\xff\xffgarbage")
	code := tunnelMain([]string{"--", "sleep", "600"}, in, &stdout, &stderr)
	if code != codeBadSpec || !strings.Contains(stderr.String(), "tunnel protocol violation") {
		t.Fatalf("code %d, stderr %q", code, stderr.String())
	}
}

// Without a command the subcommand says how to call it.
func TestTunnelUsage(t *testing.T) {
	var stderr bytes.Buffer
	if code := tunnelMain([]string{"--"}, strings.NewReader(""), io.Discard, &stderr); code != codeBadSpec || !strings.Contains(stderr.String(), "usage") {
		t.Fatalf("code %d, %q", code, stderr.String())
	}
}

// CMD's exit code comes back in End and as the subcommand's, after Hello;
// its output goes to stderr.
func TestTunnelExitCode(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	var stdout, stderr bytes.Buffer
	code := tunnelMain([]string{"sh", "-c", "echo out; echo err >&2; exit 9"}, pr, &stdout, &stderr)
	if code != 9 || stderr.String() != "out\nerr\n" {
		t.Fatalf("code %d, stderr %q", code, stderr.String())
	}
	m := tunnel.NewServer(&stdout, io.Discard)
	if err := m.Run(); err != nil {
		t.Fatal(err)
	}
	if c, ok := m.ExitCode(); !ok || c != 9 {
		t.Fatalf("End carried %d, %v", c, ok)
	}
}

// With --listen and no command the tunnel only forwards: it listens on the
// address before its Hello, carries a connection there as a channel to the
// server, and exits 0 when its stdin ends.
func TestTunnelListenOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	inR, inW := io.Pipe()   // the server's frames to the tunnel
	outR, outW := io.Pipe() // the tunnel's frames to the server
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- tunnelMain([]string{tunnel.ListenFlag, addr}, inR, outW, &stderr)
		outW.Close()
	}()
	m := tunnel.NewServer(outR, inW)
	go func() { _ = m.Run() }()
	<-m.Hello()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial the tunnel after its Hello: %v", err)
	}
	ch, err := m.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(ch, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("the server read %q, %v", buf, err)
	}
	if _, err := ch.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("the sandbox read %q, %v", buf, err)
	}
	c.Close()
	inW.Close() // the server's stream ends: so does the tunnel
	if got := <-code; got != 0 {
		t.Fatalf("code %d, stderr %q", got, stderr.String())
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("the tunnel still listens after it ended")
	}
}

// --listen takes only a loopback address: nothing else in the sandbox
// could reach it, nor anything outside.
func TestTunnelListenRefusesOtherAddresses(t *testing.T) {
	for _, args := range [][]string{{tunnel.ListenFlag, "0.0.0.0:3128"}, {tunnel.ListenFlag, "localhost"}, {tunnel.ListenFlag}} {
		var stderr bytes.Buffer
		if code := tunnelMain(args, strings.NewReader(""), io.Discard, &stderr); code != codeBadSpec || !strings.Contains(stderr.String(), tunnel.ListenFlag) {
			t.Errorf("%q: code %d, %q", args, code, stderr.String())
		}
	}
}

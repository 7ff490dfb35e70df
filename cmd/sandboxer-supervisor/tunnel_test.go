package main

import (
	"bytes"
	"io"
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

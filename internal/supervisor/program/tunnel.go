package program

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sandboxer/sandboxer/internal/tunnel"
	"golang.org/x/sys/unix"
)

// tunnelMain is `sandboxer-supervisor tunnel [--listen ADDR] [--] CMD ARGS...`:
// network for CMD in a sandbox that has none, through the server (see
// internal/tunnel). It listens on 127.0.0.1 (the sandbox's own loopback;
// ADDR, a loopback address, chooses the port), runs CMD with the proxy
// variables pointing there, and carries every connection as a channel of
// frames on stdout/stdin. CMD's stdout and stderr go to stderr, CMD's stdin
// is channel 0. It exits with CMD's code after an End frame; 125 when the
// stream from the server breaks or ends first (CMD is killed then). With
// --listen and no CMD it only forwards, until the stream from the server
// ends (0) or breaks (125): the egress of the sandbox's jobs.
func tunnelMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	say := func(format string, a ...any) { fmt.Fprintf(stderr, "sandboxer-supervisor tunnel: "+format+"\n", a...) }
	listen, only := "127.0.0.1:0", false
	if len(args) > 1 && args[0] == tunnel.ListenFlag {
		listen, args, only = args[1], args[2:], true
		if ap, err := netip.ParseAddrPort(listen); err != nil || !ap.Addr().IsLoopback() {
			say("%s %q: want a loopback address and port, such as 127.0.0.1:3128", tunnel.ListenFlag, listen)
			return codeBadSpec
		}
	} else if len(args) > 0 && args[0] == tunnel.ListenFlag {
		say("%s needs an address: usage: sandboxer-supervisor tunnel [%s ADDR] [--] CMD ARGS...", tunnel.ListenFlag, tunnel.ListenFlag)
		return codeBadSpec
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 && !only {
		say("no command: usage: sandboxer-supervisor tunnel [%s ADDR] [--] CMD ARGS...", tunnel.ListenFlag)
		return codeBadSpec
	}
	// EPIPE instead of death when the server is gone.
	signal.Notify(make(chan os.Signal, 1), unix.SIGPIPE)

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		say("listening on %s: %v", listen, err)
		return codeBadSpec
	}
	defer ln.Close()
	m, err := tunnel.NewTunnel(bufio.NewReaderSize(stdin, 64<<10), stdout)
	if err != nil {
		say("%v", err)
		return codeBadSpec
	}
	go acceptTunnel(ln, m)
	if len(args) == 0 {
		if err := m.Run(); err != nil {
			say("%v", err)
			return codeBadSpec
		}
		return 0
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = tunnelEnv(os.Environ(), "http://"+ln.Addr().String())
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		code := codeCannotExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = codeNotFound
		}
		say("starting %s: %v", args[0], err)
		_ = m.End(code)
		return code
	}
	// Whatever CMD leaves behind goes with it: nothing outlives the tunnel.
	defer func() { _ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }()
	go func() {
		_, _ = io.Copy(in, m.Stdin())
		_ = in.Close()
	}()
	stream := make(chan error, 1)
	go func() { stream <- m.Run() }()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	select {
	case err := <-waited:
		code := exitCode(cmd, err)
		_ = ln.Close()
		if err := m.End(code); err != nil {
			say("%v", err)
		}
		return code
	case err := <-stream:
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		<-waited // CMD's output is all written before this says why
		if err != nil {
			say("%v; %s was killed", err, args[0])
		} else {
			say("the server closed the tunnel before %s ended; it was killed", args[0])
		}
		return codeBadSpec
	}
}

// acceptTunnel carries each connection to ln on a channel of its own, until ln closes.
func acceptTunnel(ln net.Listener, m *tunnel.Mux) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go tunnelConn(m, c.(*net.TCPConn))
	}
}

// tunnelConn carries one accepted connection on a channel of its own.
func tunnelConn(m *tunnel.Mux, c *net.TCPConn) {
	defer c.Close()
	ch, err := m.Open() // waits while tunnel.MaxChannels are open
	if err != nil {
		return
	}
	defer ch.Close()
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(ch, c)
		if err == nil {
			err = ch.CloseWrite()
		}
		done <- err
	}()
	go func() {
		_, err := io.Copy(c, ch)
		if err == nil {
			err = c.CloseWrite()
		}
		done <- err
	}()
	for range 2 {
		if err := <-done; err != nil {
			return // one way broke: both go
		}
	}
}

// tunnelEnv is env with the proxy variables (both spellings) set to url;
// NO_PROXY names loopback.
func tunnelEnv(env []string, url string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "HTTP_PROXY="+url, "HTTPS_PROXY="+url, "http_proxy="+url, "https_proxy="+url,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
}

// exitCode is CMD's exit code, 128+n for a signal.
func exitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState != nil {
		if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			return 128 + int(st.Signal())
		}
		return cmd.ProcessState.ExitCode()
	}
	if err != nil {
		return codeCannotExec
	}
	return 0
}

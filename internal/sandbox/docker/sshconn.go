package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/supervisor"
)

// ssh:// engines, as Docker's connhelper reaches them: every connection is an
// `ssh host docker system dial-stdio` process whose stdin and stdout carry the
// engine's socket. Reimplemented (docker/cli is a large, unversioned module)
// with two differences: ssh never prompts (BatchMode; the server's terminal is
// its MCP client) and SANDBOXER_SSH_CONFIG can name the ssh_config to use.

// sshConnectTimeout bounds ssh's own connection setup, as the CLI's does.
const sshConnectTimeout = 30

// sshDialer returns a dialer for u (ssh://[user@]host[:port][/socket/path]).
func sshDialer(u *url.URL, configFile string) (func(ctx context.Context, network, addr string) (net.Conn, error), error) {
	args, err := sshArgs(u, configFile)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialCommand(ctx, "ssh", args...)
	}, nil
}

// sshArgs is ssh's command line for u, ending in the remote dial-stdio command.
func sshArgs(u *url.URL, configFile string) ([]string, error) {
	if _, ok := u.User.Password(); ok {
		return nil, errors.New("ssh:// with a password is not supported: use a key (ssh-agent or IdentityFile)")
	}
	if u.Hostname() == "" {
		return nil, errors.New("ssh:// needs a host")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("ssh:// takes no query or fragment")
	}
	args := []string{"-o", "BatchMode=yes", "-o", fmt.Sprintf("ConnectTimeout=%d", sshConnectTimeout), "-T"}
	if configFile != "" {
		args = append(args, "-F", configFile)
	}
	if name := u.User.Username(); name != "" {
		args = append(args, "-l", name)
	}
	if p := u.Port(); p != "" {
		args = append(args, "-p", p)
	}
	args = append(args, "--", u.Hostname(), "docker")
	if u.Path != "" && u.Path != "/" {
		args = append(args, "--host", "unix://"+u.Path)
	}
	return append(args, "system", "dial-stdio"), nil
}

// commandConn is a net.Conn over a process's stdin and stdout.
type commandConn struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *supervisor.TailBuffer
	exited chan struct{}
	err    error // the process's exit, valid once exited is closed

	closeOnce sync.Once
}

// dialCommand starts name with args; ctx bounds only the start.
func dialCommand(ctx context.Context, name string, args ...string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	c := &commandConn{cmd: cmd, stderr: &supervisor.TailBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	// Our own pipes, not StdinPipe/StdoutPipe: Wait closes those when the
	// process exits, which could drop the last bytes it wrote before we read them.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	c.stdin, c.stdout = inW, outR
	err = cmd.Start()
	inR.Close() // the child's ends
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// Read reads the engine's bytes; at their end, an ssh failure is the error.
func (c *commandConn) Read(p []byte) (int, error) {
	n, err := c.stdout.Read(p)
	if err == io.EOF {
		select {
		case <-c.exited:
		case <-time.After(time.Second): // stdout closed first: give the exit a moment
		}
		if ee := c.exitErr(); ee != nil {
			return n, ee
		}
	}
	return n, err
}

func (c *commandConn) exitErr() error {
	select {
	case <-c.exited:
	default:
		return nil
	}
	if c.err == nil {
		return nil
	}
	msg := strings.TrimSpace(c.stderr.String())
	if msg == "" {
		return fmt.Errorf("%s: %w", c.cmd.Path, c.err)
	}
	return fmt.Errorf("%s: %w: %s", c.cmd.Path, c.err, msg)
}

func (c *commandConn) Write(p []byte) (int, error) {
	n, err := c.stdin.Write(p)
	if err != nil {
		if ee := c.exitErr(); ee != nil {
			return n, ee
		}
	}
	return n, err
}

// CloseWrite ends the stream towards the engine (a hijacked attach's stdin end).
func (c *commandConn) CloseWrite() error { return c.stdin.Close() }

// CloseRead stops reading from the engine.
func (c *commandConn) CloseRead() error { return c.stdout.Close() }

// Close ends the process: its input first, then, if it lingers, a kill.
func (c *commandConn) Close() error {
	c.closeOnce.Do(func() {
		_ = c.stdin.Close()
		_ = c.stdout.Close()
		go func() {
			select {
			case <-c.exited:
			case <-time.After(2 * time.Second):
				_ = c.cmd.Process.Kill()
			}
		}()
	})
	return nil
}

func (c *commandConn) LocalAddr() net.Addr  { return commandAddr{} }
func (c *commandConn) RemoteAddr() net.Addr { return commandAddr{} }

// Deadlines are not supported by pipes to a process; the HTTP client cancels by closing.
func (c *commandConn) SetDeadline(time.Time) error      { return nil }
func (c *commandConn) SetReadDeadline(time.Time) error  { return nil }
func (c *commandConn) SetWriteDeadline(time.Time) error { return nil }

type commandAddr struct{}

func (commandAddr) Network() string { return "command" }
func (commandAddr) String() string  { return "command" }

package workspace

// expose_port: a URL on the server host's loopback whose connections are
// carried, one exec of the supervisor's relay each, to a port on the
// workspace container's own loopback. The workspace gains no network: its
// jobs still see only lo, and nothing in it can reach out.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/sandbox"
	"github.com/sandboxer/sandboxer/internal/supervisor/proto"
)

// PortInfo is one open port of a workspace.
type PortInfo struct {
	Port     int    `json:"port"`
	URL      string `json:"url"`
	OpenedAt string `json:"opened_at"`
}

type exposure struct {
	info   PortInfo
	ln     net.Listener
	ctx    context.Context // ends when the port is closed
	cancel context.CancelFunc
	conns  sync.WaitGroup
}

// probeTimeout bounds the check that something listens.
const probeTimeout = 15 * time.Second

// ExposePort opens a loopback URL relayed to port inside workspace name
// (an open port is returned as it is). listening says whether something
// accepted a connection there just now.
func (m *Manager) ExposePort(ctx context.Context, name string, port int) (info PortInfo, listening bool, err error) {
	w, err := m.Get(ctx, name)
	if err != nil {
		return PortInfo{}, false, err
	}
	m.mu.Lock()
	open := m.ports[w.ID]
	e := open[port]
	if e == nil && len(open) >= m.pol.Workspaces.MaxPorts {
		m.mu.Unlock()
		return PortInfo{}, false, fmt.Errorf("port: workspace %q has %d open ports, the most allowed (policy workspaces.max_ports); close one with expose_port close: true", name, len(open))
	}
	if e == nil {
		ln, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			m.mu.Unlock()
			return PortInfo{}, false, fmt.Errorf("listen on loopback: %w", lerr)
		}
		rctx, cancel := context.WithCancel(ownerCtx(context.Background(), w))
		e = &exposure{ln: ln, ctx: rctx, cancel: cancel, info: PortInfo{Port: port,
			URL: "http://" + ln.Addr().String() + "/", OpenedAt: time.Now().UTC().Format(time.RFC3339)}}
		if open == nil {
			open = map[int]*exposure{}
			m.ports[w.ID] = open
		}
		open[port] = e
		go m.accept(rctx, w.Name, e)
		m.log.Info().Str("workspace", name).Int("port", port).Str("url", e.info.URL).Msg("port exposed")
	}
	m.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	code, err := m.Exec(pctx, name, sandbox.ExecOptions{Cmd: append(relayCmd(port), "probe")})
	return e.info, err == nil && code == 0, nil
}

// ErrPortNotOpen is a port expose_port has not opened.
var ErrPortNotOpen = errors.New("port not open")

// DialPort connects to an open port of workspace name through the same
// relay as the port's URL (the HTTP listener's /preview uses it). The
// caller's ctx must carry its tenant: another tenant's workspace is unknown.
func (m *Manager) DialPort(ctx context.Context, name string, port int) (net.Conn, error) {
	w, err := m.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	e := m.ports[w.ID][port]
	m.mu.Unlock()
	if e == nil {
		return nil, fmt.Errorf("%w: %d of workspace %q (expose_port opens it)", ErrPortNotOpen, port, name)
	}
	client, inside := net.Pipe()
	e.conns.Add(1)
	go func() {
		defer e.conns.Done()
		defer inside.Close()
		stop := context.AfterFunc(e.ctx, func() { inside.Close() })
		defer stop()
		_, _ = m.Exec(e.ctx, w.Name, sandbox.ExecOptions{Cmd: relayCmd(port), Stdin: inside, Stdout: inside})
	}()
	return client, nil
}

// relayCmd carries one connection to port on the container's loopback.
func relayCmd(port int) []string {
	return []string{supervisorPath, proto.RelayCommand, strconv.Itoa(port)}
}

// ClosePort closes an open port; false when it was not open.
func (m *Manager) ClosePort(ctx context.Context, name string, port int) (bool, error) {
	w, err := m.Get(ctx, name)
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	e := m.ports[w.ID][port]
	delete(m.ports[w.ID], port)
	m.mu.Unlock()
	if e == nil {
		return false, nil
	}
	e.stop()
	m.log.Info().Str("workspace", name).Int("port", port).Msg("port closed")
	return true, nil
}

// Ports lists the open ports of workspace id (its record's ID), by port.
func (m *Manager) Ports(id string) []PortInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []PortInfo
	for _, e := range m.ports[id] {
		out = append(out, e.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

// closePorts closes every port of workspace id (it is being deleted).
func (m *Manager) closePorts(id string) {
	m.mu.Lock()
	open := m.ports[id]
	delete(m.ports, id)
	m.mu.Unlock()
	for port, e := range open {
		e.stop()
		m.log.Info().Str("workspace_id", id).Int("port", port).Msg("port closed with its workspace")
	}
}

// ClosePortsAll closes every open port (the server is stopping).
func (m *Manager) ClosePortsAll() {
	m.mu.Lock()
	names := make([]string, 0, len(m.ports))
	for n := range m.ports {
		names = append(names, n)
	}
	m.mu.Unlock()
	for _, n := range names {
		m.closePorts(n)
	}
}

func (e *exposure) stop() {
	e.cancel()
	_ = e.ln.Close()
	e.conns.Wait()
}

func (m *Manager) accept(ctx context.Context, name string, e *exposure) {
	for {
		conn, err := e.ln.Accept()
		if err != nil {
			return // closed
		}
		e.conns.Add(1)
		go func() {
			defer e.conns.Done()
			m.relay(ctx, name, e.info.Port, conn.(*net.TCPConn))
		}()
	}
}

// relay carries one connection through an exec of the supervisor's relay.
// When nothing listens in the workspace the relay exits at once and the
// client's connection is reset: an error at once, never a hang.
func (m *Manager) relay(ctx context.Context, name string, port int, conn *net.TCPConn) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetLinger(0); _ = conn.Close() })
	defer stop()
	var errb capped
	errb.max = 1024
	code, err := m.Exec(ctx, name, sandbox.ExecOptions{Cmd: relayCmd(port), Stdin: conn, Stdout: conn, Stderr: &errb})
	if err != nil || code != 0 {
		_ = conn.SetLinger(0) // a reset, so the client sees the failure
		msg := strings.TrimSpace(errb.buf.String())
		if err != nil {
			msg = err.Error()
		}
		m.log.Debug().Str("workspace", name).Int("port", port).Int("exit", code).Str("why", msg).Msg("relay ended")
	}
}

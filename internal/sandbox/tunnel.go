package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandboxer/sandboxer/internal/tunnel"
)

// TunnelCommand is the command that ExecThroughTunnel puts before Cmd.
var TunnelCommand = []string{"/usr/local/bin/sandboxer-supervisor", tunnel.Command, "--"}

// ExecThroughTunnel runs o.Cmd inside `sandboxer-supervisor tunnel --` with
// exec, a runtime's plain exec (it must not look at Proxy), and serves the
// tunnel's connections to o.Proxy, as http.Server connections (CONNECT
// hijacking works). It needs nothing of the engine but the exec's stdin,
// stdout and stderr: any runtime's Exec calls it when o.Proxy is set. It
// returns Cmd's exit code from the tunnel's End frame; without one (the
// supervisor could not start, or the exec was cut), the exec's code and
// error. A tunnel that breaks the frame protocol ends the exec.
func ExecThroughTunnel(ctx context.Context, o ExecOptions, exec func(context.Context, ExecOptions) (int, error)) (int, error) {
	if o.Proxy == nil {
		return -1, errors.New("exec through the tunnel: no proxy handler")
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inR, inW := io.Pipe()   // to the tunnel's stdin
	outR, outW := io.Pipe() // from the tunnel's stdout
	m := tunnel.NewServer(outR, inW)
	srv := &http.Server{Handler: o.Proxy, ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(m) }()
	defer srv.Close()
	go func() {
		stdin := m.Stdin()
		if o.Stdin != nil {
			_, _ = io.Copy(stdin, o.Stdin)
		}
		_ = stdin.CloseWrite()
	}()
	inner := o
	inner.Proxy = nil
	inner.Cmd = append(append([]string(nil), TunnelCommand...), o.Cmd...)
	inner.Stdin, inner.Stdout = inR, outW
	if inner.Stderr == nil {
		inner.Stderr = o.Stdout
	}
	type result struct {
		code int
		err  error
	}
	ran := make(chan result, 1)
	go func() {
		code, err := exec(ctx, inner)
		_ = outW.Close()
		ran <- result{code, err}
	}()
	runErr := m.Run()
	if runErr != nil && errors.Is(runErr, tunnel.ErrProtocol) {
		cancel() // a tunnel that breaks the rules is not listened to further
	}
	_ = inW.Close() // the tunnel takes no more input: its stdin ends
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	_ = srv.Close()
	r := <-ran
	_ = inR.Close()
	_ = outR.Close()
	if code, ok := m.ExitCode(); ok && r.err == nil {
		return code, nil
	}
	if errors.Is(runErr, tunnel.ErrProtocol) && parent.Err() == nil {
		return -1, fmt.Errorf("the sandbox's tunnel: %w", runErr)
	}
	return r.code, r.err
}

// Tunnel is a tunnel-only exec in a sandbox (`sandboxer-supervisor tunnel
// --listen ADDR`): connections to ADDR inside the sandbox reach the proxy
// it was opened with, until Close or the end of the exec.
type Tunnel struct {
	stdin  *io.PipeWriter
	cancel context.CancelFunc
	done   chan struct{}
	diag   strings.Builder // the tunnel's stderr (bounded)
	err    error           // why it ended, once done
}

// OpenTunnel runs the tunnel-only supervisor listening on addr with exec
// (a runtime's plain exec) and serves its connections to proxy; it returns
// once the tunnel listens (its Hello came). ctx bounds the opening only.
func OpenTunnel(ctx context.Context, addr string, proxy http.Handler, exec func(context.Context, ExecOptions) (int, error)) (*Tunnel, error) {
	tctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()   // to the tunnel's stdin
	outR, outW := io.Pipe() // from the tunnel's stdout
	t := &Tunnel{stdin: inW, cancel: cancel, done: make(chan struct{})}
	m := tunnel.NewServer(outR, inW)
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(m) }()
	ran := make(chan error, 1)
	go func() {
		code, err := exec(tctx, ExecOptions{Cmd: []string{TunnelCommand[0], tunnel.Command, tunnel.ListenFlag, addr},
			Stdin: inR, Stdout: outW, Stderr: &LimitWriter{W: &t.diag, N: 4 << 10}})
		if err == nil && code != 0 {
			err = fmt.Errorf("it exited %d", code)
		}
		_ = outW.Close()
		ran <- err
	}()
	go func() {
		runErr := m.Run()
		if errors.Is(runErr, tunnel.ErrProtocol) {
			cancel() // a tunnel that breaks the rules is not listened to further
		}
		_ = inW.Close()
		go func() { _, _ = io.Copy(io.Discard, outR) }()
		_ = srv.Close()
		err := <-ran
		cancel()
		_ = inR.Close()
		_ = outR.Close()
		if err == nil && errors.Is(runErr, tunnel.ErrProtocol) {
			err = runErr
		}
		t.err = err
		close(t.done)
	}()
	select {
	case <-m.Hello():
		return t, nil
	case <-t.done:
		return nil, fmt.Errorf("the egress tunnel ended before it listened: %v %s", t.err, strings.TrimSpace(t.diag.String()))
	case <-ctx.Done():
		t.Close()
		return nil, fmt.Errorf("the egress tunnel did not listen: %w", ctx.Err())
	}
}

// Done is closed when the tunnel has ended.
func (t *Tunnel) Done() <-chan struct{} { return t.done }

// Close ends the tunnel: its stdin ends, so does the exec. It does not wait.
func (t *Tunnel) Close() {
	_ = t.stdin.Close()
	go func() {
		select {
		case <-t.done:
		case <-time.After(10 * time.Second):
			t.cancel() // an exec that did not end with its stdin
		}
	}()
}

// WorkspaceTunnels keeps the egress tunnels of long-lived sandboxes (the
// workspaces of an engine whose egress is the tunnel): one per sandbox
// that needs one, opened when a job finds none live. The zero value is
// ready to use.
type WorkspaceTunnels struct {
	mu    sync.Mutex
	open  map[string]*Tunnel
	needs map[string]bool // asked once per sandbox (its label)
}

// Ensure makes sure sandbox id has a live tunnel if it needs one. needs
// says whether it does (ErrNotFound: the sandbox is gone, and nothing is
// kept); open opens its tunnel.
func (ts *WorkspaceTunnels) Ensure(ctx context.Context, id string, needs func(context.Context) (bool, error), open func(context.Context) (*Tunnel, error)) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	need, known := ts.needs[id]
	if !known {
		var err error
		if need, err = needs(ctx); errors.Is(err, ErrNotFound) {
			return nil // not running: the job's start says so
		} else if err != nil {
			return err
		}
		if ts.needs == nil {
			ts.needs = map[string]bool{}
		}
		ts.needs[id] = need
	}
	if !need {
		return nil
	}
	if t := ts.open[id]; t != nil {
		select {
		case <-t.Done():
		default:
			return nil
		}
	}
	t, err := open(ctx)
	if err != nil {
		return err
	}
	if ts.open == nil {
		ts.open = map[string]*Tunnel{}
	}
	ts.open[id] = t
	return nil
}

// Drop closes sandbox id's tunnel and forgets what it needs (it stops or goes).
func (ts *WorkspaceTunnels) Drop(id string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t := ts.open[id]; t != nil {
		t.Close()
	}
	delete(ts.open, id)
	delete(ts.needs, id)
}

// CloseAll closes every tunnel (the server stops).
func (ts *WorkspaceTunnels) CloseAll() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for id, t := range ts.open {
		t.Close()
		delete(ts.open, id)
	}
}

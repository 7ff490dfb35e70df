package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"syscall"

	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// The egress path on containerd is Kubernetes' (sandbox.EgressTunneler):
// sandboxes have loopback only, and one on network egress reaches the
// server's proxy through a tunnel-only supervisor exec'd beside its job,
// listening on 127.0.0.1:3128 in the sandbox, whose connections travel over
// the exec's stdin and stdout. No CNI, no bridge, no iptables on the host.

// TunnelEgress makes the runtime serve every egress tunnel with proxy.
func (r *Runtime) TunnelEgress(proxy http.Handler) string {
	r.egressProxy = proxy
	return sandbox.EgressTunnelAddr
}

// openTunnel opens the egress tunnel into the sandbox of h, for a job on
// network egress: its grant (the spec's HTTP_PROXY token) passes there.
func (h *handle) openTunnel(ctx context.Context, spec sandbox.Spec) error {
	if spec.Network != sandbox.NetworkEgress || h.tunnel != nil {
		return nil
	}
	if h.rt.egressProxy == nil {
		return errors.New("network egress: this server runs no egress proxy (policy key egress.allow is empty)")
	}
	t, err := sandbox.OpenTunnel(ctx, sandbox.EgressTunnelAddr, h.rt.egressProxy, func(ctx context.Context, o sandbox.ExecOptions) (int, error) {
		return h.rt.exec(ctx, h.id, o)
	})
	if err != nil {
		return fmt.Errorf("egress tunnel into container %.12s: %w", h.id, err)
	}
	h.tunnel = t
	return nil
}

// exec runs o.Cmd in the running sandbox id as the sandbox user, with the
// sandbox's environment, and returns its exit code once it ended and its
// output was copied. ctx's end kills it.
func (r *Runtime) exec(ctx context.Context, id string, o sandbox.ExecOptions) (int, error) {
	if o.User != "" {
		return -1, fmt.Errorf("exec as %q: backend containerd runs execs as the sandbox user only", o.User)
	}
	c, err := r.cli.LoadContainer(ctx, id)
	if err != nil {
		return -1, r.engineErr(fmt.Errorf("load container: %w", err))
	}
	s, err := c.Spec(ctx)
	if err != nil {
		return -1, r.engineErr(fmt.Errorf("read the container's spec: %w", err))
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return -1, r.engineErr(fmt.Errorf("load task: %w", err))
	}
	ps := *s.Process
	ps.Args, ps.Terminal, ps.Cwd = o.Cmd, false, "/"
	ps.Env = append(append([]string(nil), ps.Env...), o.Env...)
	stdin := o.Stdin
	if stdin == nil {
		stdin = eofReader{}
	}
	stdout, stderr := o.Stdout, o.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	p, err := task.Exec(ctx, "x"+newID()[:20], &ps, cio.NewCreator(cio.WithStreams(stdin, stdout, stderr)))
	if err != nil {
		return -1, r.engineErr(fmt.Errorf("exec: %w", err))
	}
	defer func() {
		dctx, cancel := waitCtx()
		defer cancel()
		_, _ = p.Delete(dctx)
	}()
	exited, err := p.Wait(context.Background())
	if err != nil {
		return -1, r.engineErr(fmt.Errorf("wait for exec: %w", err))
	}
	if err := p.Start(ctx); err != nil {
		return -1, r.engineErr(fmt.Errorf("start exec: %w", err))
	}
	select {
	case st := <-exited:
		p.IO().Wait()
		code, _, err := st.Result()
		if err != nil {
			return -1, r.engineErr(err)
		}
		return int(code), nil
	case <-ctx.Done():
		kctx, cancel := waitCtx()
		defer cancel()
		if err := p.Kill(kctx, syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
			return -1, errors.Join(ctx.Err(), err)
		}
		<-exited
		p.IO().Cancel()
		return -1, ctx.Err()
	}
}

// eofReader is an input that ends at once.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

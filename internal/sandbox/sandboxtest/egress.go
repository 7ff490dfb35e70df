package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/sandboxer/sandboxer/internal/sandbox"
)

// runEgressNetwork: the egress network is made once (a second call gives
// the same gateway and interface), and a sandbox on it reaches the gateway
// (a listener there answers, or the host's fence, which a server puts up
// around its proxy's port, refuses at once). That nothing else is reached
// is the server's fence's part with the network's: the e2e egress tests
// check it.
func runEgressNetwork(t *testing.T, e sandbox.Engine, image string) {
	eg := e.Capabilities().EgressNetwork
	ctx := context.Background()
	gw, iface, err := eg.EgressGateway(ctx)
	if err != nil || !gw.Is4() || iface == "" {
		t.Fatalf("EgressGateway: %v %q %v", gw, iface, err)
	}
	gw2, iface2, err := eg.EgressGateway(ctx)
	if err != nil || gw2 != gw || iface2 != iface {
		t.Fatalf("a second EgressGateway: %v %q %v, want %v %q", gw2, iface2, err, gw, iface)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(gw.String(), "0"))
	if err != nil {
		t.Fatalf("listen on the gateway: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("from-the-gateway\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	spec := Spec(image, fmt.Sprintf(`if out=$(timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%d && head -n1 <&3' 2>&1); then echo "$out"
elif [[ $out == *"Connection refused"* ]]; then echo from-the-gateway; else echo "gateway: $out"; fi`, gw, port))
	spec.Network = sandbox.NetworkEgress
	out := newBuffer()
	h := start(t, e, spec, out)
	st := waitDone(t, h, "a sandbox on the egress network")
	if got := out.Stdout(); st.ExitCode != 0 || got != "from-the-gateway\n" {
		t.Fatalf("on the egress network: %s, stdout %q, stderr %q; want the gateway's line", describe(st), got, strings.TrimSpace(out.Stderr()))
	}
}

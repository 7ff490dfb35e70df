package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// dnsListener counts the UDP datagrams that reach addr:53 carrying label.
type dnsListener struct {
	mu   sync.Mutex
	seen int
}

func listenDNS(t *testing.T, addr, label string) *dnsListener {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(addr, "53"))
	if err != nil {
		t.Logf("no listener on %s:53 (%v): that address is not checked", addr, err)
		return nil
	}
	t.Cleanup(func() { pc.Close() })
	l := &dnsListener{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if bytes.Contains(buf[:n], []byte(label)) {
				l.mu.Lock()
				l.seen++
				l.mu.Unlock()
			}
		}
	}()
	return l
}

// TestEgressJobsHaveNoResolver (THREATS 127): a job on network egress
// sends a query for a name outside the allowlist to every nameserver it can
// find (the engine's embedded resolver, what its resolv.conf names, the
// gateway, loopback, the unspecified address) and looks the name up; no
// resolver answers, no query reaches a listener the test owns on the
// gateway's port 53 or on the host's loopback, and the engine's record of
// the container names no resolver but the unspecified address, to which
// the embedded resolver forwards inside the sandbox's own namespace.
func TestEgressJobsHaveNoResolver(t *testing.T) {
	t.Parallel()
	gw := egressGateway(t)
	label := fmt.Sprintf("leak%d", time.Now().UnixNano()%1_000_000_000)
	listeners := map[string]*dnsListener{gw: listenDNS(t, gw, label), "127.0.0.1": listenDNS(t, "127.0.0.1", label)}
	s := startServer(t, policyEnv(t, "egress:\n  allow: [\"allowed.sbx.test:443\"]\n"))
	script := fmt.Sprintf(`q=%s.example.com
pkt() { printf '\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00'; for l in ${q//./ }; do printf "\\x$(printf %%02x ${#l})%%s" "$l"; done; printf '\x00\x00\x01\x00\x01'; }
servers="127.0.0.11 %s 127.0.0.1 0.0.0.0 $(awk '/^nameserver/{print $2}' /etc/resolv.conf)"
for i in 1 2 3; do for ns in $servers; do pkt > /dev/udp/$ns/53 2>/dev/null; done; done
getent hosts $q >/dev/null; echo "lookup=$?"
getent hosts $(hostname) >/dev/null; echo "own=$?"
echo "servers=$(awk '/^nameserver/{print $2}' /etc/resolv.conf | paste -sd,)"
sleep 2`, label, gw)
	r := s.ok("run_command", map[string]any{"command": script, "egress": []any{"allowed.sbx.test:443"}, "background": true, "timeout_s": 60})
	id := str(r, "job_id")
	var cid string
	for deadline := time.Now().Add(30 * time.Second); cid == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, c := range s.containers() {
			if c.JobID == id {
				cid = c.ID
			}
		}
	}
	if cid != "" {
		if out, err := exec.Command("docker", "inspect", "-f", "{{.HostConfig.NetworkMode}} {{json .HostConfig.Dns}}", cid).Output(); err == nil {
			if got := strings.TrimSpace(string(out)); got != `sandboxer-egress ["0.0.0.0"]` {
				t.Errorf("the engine's record of the job's container: %s, want the egress network and resolver 0.0.0.0 only", got)
			}
		}
	}
	g := s.waitJob(id, "", 90*time.Second)
	out, _ := s.readAll(id)
	f := fFields(out)
	if str(g, "status") != "completed" || f["lookup"] == "0" || f["own"] != "0" || f["servers"] != "127.0.0.11" {
		t.Fatalf("the job: %v\n%s", g, out)
	}
	time.Sleep(time.Second) // a forwarded query would have arrived by now
	for addr, l := range listeners {
		if l == nil {
			continue
		}
		l.mu.Lock()
		n := l.seen
		l.mu.Unlock()
		if n > 0 {
			t.Errorf("%d queries for %s reached the listener on %s:53", n, label, addr)
		}
	}
}

package egress

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// The egress network's gateway is the host's own address, so without a
// fence a job there could connect to any host service listening on all
// addresses. The fence is a chain of the host's INPUT for the network's
// bridge: established traffic and the proxies' ports pass, anything else
// from the bridge to the host is rejected. Each server adds its proxy's port
// and takes it out when it stops; the chain and its jump stay (they let
// nothing through by themselves).
//
// The fence also keeps the network's sandboxes apart: an internal bridge
// network still forwards between its containers, so a job (or a workspace,
// which may stay on the network for days) could connect to a service
// another tenant's sandbox listens on. Traffic from the bridge to the same
// bridge is rejected in DOCKER-USER (the chain the engine evaluates before
// its own and keeps across its restarts), or in FORWARD where the engine
// has no such chain: the proxy is the sandboxes' only peer.
const fenceChain = "SANDBOXER-EGRESS"

// fence lets the bridge reach the host on port only; undo takes the port's
// rule out again.
func fence(bridge string, port int) (undo func(), err error) {
	if bridge == "" || strings.ContainsAny(bridge, " \t\n") {
		return nil, fmt.Errorf("the egress network's host interface is unknown (%q)", bridge)
	}
	ipt := func(args ...string) error {
		out, err := exec.Command("iptables", append([]string{"-w"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	ensure := func(check []string, add ...string) error {
		if ipt(append([]string{"-C"}, check...)...) == nil {
			return nil
		}
		return ipt(add...)
	}
	if ipt("-S", fenceChain) != nil {
		if err := ipt("-N", fenceChain); err != nil && ipt("-S", fenceChain) != nil {
			return nil, err
		}
	}
	estab := []string{fenceChain, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"}
	drop := []string{fenceChain, "-j", "REJECT"} // refused at once, as with no network
	jump := []string{"INPUT", "-i", bridge, "-j", fenceChain}
	p := strconv.Itoa(port)
	allow := []string{fenceChain, "-p", "tcp", "--dport", p, "-j", "RETURN"}
	for _, step := range []struct{ check, add []string }{
		{estab, append([]string{"-A"}, estab...)},
		{drop, append([]string{"-A"}, drop...)},
		{allow, append([]string{"-I"}, allow...)}, // before the drop
		{jump, append([]string{"-I"}, jump...)},
	} {
		if err := ensure(step.check, step.add...); err != nil {
			return nil, fmt.Errorf("fence the egress network from the host's services: %w", err)
		}
	}
	forward := "DOCKER-USER"
	if ipt("-S", forward) != nil {
		forward = "FORWARD"
	}
	peers := []string{forward, "-i", bridge, "-o", bridge, "-j", "REJECT"}
	if err := ensure(peers, append([]string{"-I"}, peers...)...); err != nil {
		return nil, fmt.Errorf("fence the egress network's sandboxes from each other: %w", err)
	}
	return func() { _ = ipt(append([]string{"-D"}, allow...)...) }, nil
}

package e2b

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// allTraffic is E2B's selector of every address (the SDK's ALL_TRAFFIC).
const allTraffic = "0.0.0.0/0"

// network is create's network (E2B's SandboxNetworkConfig). sandboxer's
// egress is by host name through its proxy, within the policy's allowlist:
// what cannot be served so is refused, naming it, never ignored.
type network struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	Rules              json.RawMessage `json:"rules"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
	MaskRequestHost    json.RawMessage `json:"maskRequestHost"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts"`
}

// egressOf is create_workspace's egress for a sandbox: nil for the
// policy's allowlist as it is, empty for no network, or the hosts to
// narrow it to (create_workspace refuses any the policy does not allow);
// or a sentence saying what cannot be served.
func egressOf(allowInternet *bool, n *network) ([]string, string) {
	denyAll := allowInternet != nil && !*allowInternet
	if n == nil {
		if denyAll {
			return []string{}, ""
		}
		return nil, ""
	}
	for name, raw := range map[string]json.RawMessage{"rules": n.Rules, "egressProxy": n.EgressProxy,
		"maskRequestHost": n.MaskRequestHost, "httpsPorts": n.HTTPSPorts} {
		if len(raw) > 0 && string(raw) != "null" {
			return nil, fmt.Sprintf("network.%s is not served by sandboxer: its egress proxy passes the policy's allowlist (and secrets) as the operator set them", name)
		}
	}
	if n.AllowPublicTraffic != nil && *n.AllowPublicTraffic {
		return nil, "network.allowPublicTraffic: sandboxer serves no public URL of a sandbox (the operator exposes ports with expose_port)"
	}
	for _, d := range n.DenyOut {
		if d != allTraffic {
			return nil, fmt.Sprintf("network.denyOut %q: only all traffic (%s) can be denied here: name what stays reachable with allowOut", truncate(d, 64), allTraffic)
		}
	}
	denyAll = denyAll || len(n.DenyOut) > 0
	hosts := slices.DeleteFunc(slices.Clone(n.AllowOut), func(h string) bool { return h == allTraffic })
	switch {
	case slices.Contains(n.AllowOut, allTraffic): // allowed over any denial, as E2B reads it
		return nil, ""
	case len(hosts) > 0 && !denyAll:
		return nil, fmt.Sprintf("network.allowOut %s without denyOut: every host the policy allows is reachable already, and sandboxer grants none beyond it; to reach only these, deny all traffic too (denyOut: [%q])",
			strings.Join(hosts, ", "), allTraffic)
	case len(hosts) > 0:
		return hosts, ""
	case denyAll:
		return []string{}, ""
	}
	return nil, ""
}

// Package egress is the allowlist proxy: jobs that may reach a few named
// hosts get them only through it. Each grant (a tenant's job and its
// allowlist) has a token the job presents as its proxy credentials; the
// proxy resolves an allowed name itself, refuses private and loopback
// addresses unless the list names the host exactly, dials the address it
// checked (never resolving twice, so a name cannot rebind between the check
// and the connection), and reports every decision with its bytes.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one allowlist entry: a host name, "*." and a domain (its
// subdomains, not the domain itself), or an IP address; with a port, or
// none for 80 and 443.
type Rule struct {
	Host     string // lowercase, no trailing dot; for a wildcard the domain after "*."
	Wildcard bool
	Port     int // 0 = 80 and 443
	// Narrowed is set on a job's own rule (see Narrow) that the policy
	// allows only through a wildcard: it leads to a private or loopback
	// address no more than that wildcard does.
	Narrowed bool
}

// Exact says whether the rule names one host (a name or an address) and the
// operator did too: only such a rule may lead to a private or loopback
// address.
func (r Rule) Exact() bool { return !r.Wildcard && !r.Narrowed }

func (r Rule) String() string {
	if r.Wildcard && r.Host == "" {
		return "any public host"
	}
	h := r.Host
	if r.Wildcard {
		h = "*." + h
	}
	if r.Port != 0 {
		return h + ":" + strconv.Itoa(r.Port)
	}
	return h
}

// List is an allowlist.
type List []Rule

// ParseList reads allowlist entries ("*.example.com", "pkg.internal:443",
// "172.17.0.1:8080"); the error names the first bad one.
func ParseList(entries []string) (List, error) {
	var l List
	for _, e := range entries {
		r, err := parseRule(e)
		if err != nil {
			return nil, err
		}
		l = append(l, r)
	}
	return l, nil
}

func parseRule(e string) (Rule, error) {
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("allowlist entry %q: %s", e, why)
	}
	host, port := strings.ToLower(strings.TrimSpace(e)), 0
	if h, p, ok := strings.Cut(host, ":"); ok && !strings.Contains(p, ":") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return bad("the port must be 1 to 65535")
		}
		host, port = h, n
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	r := Rule{Port: port}
	if d, ok := strings.CutPrefix(host, "*."); ok {
		r.Wildcard, host = true, d
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if r.Wildcard {
			return bad("a wildcard cannot precede an address")
		}
		r.Host = a.Unmap().String()
		return r, nil
	}
	if !validName(host) {
		return bad("it must be a host name, *. and a domain, or an IP address, with an optional :port")
	}
	r.Host = host
	return r, nil
}

// validName is a DNS name of letters, digits, '-' and '_' labels, with at
// least one dot for a wildcard's domain to be more than a top-level one.
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Match is the first rule that allows host:port, if any. host is a name or
// an address; an address matches only a rule that names it.
func (l List) Match(host string, port int) (Rule, bool) {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	a, err := netip.ParseAddr(host)
	isAddr := err == nil
	if isAddr {
		host = a.Unmap().String()
	}
	for _, r := range l {
		if r.Port == 0 && port != 80 && port != 443 || r.Port != 0 && r.Port != port {
			continue
		}
		if !r.Wildcard && host == r.Host || r.Wildcard && !isAddr && (r.Host == "" || strings.HasSuffix(host, "."+r.Host)) {
			return r, true
		}
	}
	return Rule{}, false
}

// MaxNarrow is how many entries a job's or workspace's own list may hold.
const MaxNarrow = 64

// Narrow reads a job's or workspace's own allowlist, which must lie within
// the policy's (ceiling): each entry's host is one a rule of the ceiling
// matches (a wildcard only under an equal or broader wildcard of it), on
// ports it allows. An entry the ceiling allows only through a wildcard
// keeps the wildcard's refusal of private addresses. The error names the
// first entry that is not within, and what the ceiling allows.
func Narrow(ceiling List, entries []string) (List, error) {
	if len(ceiling) == 0 {
		return nil, errors.New("the policy allows no host (its egress.allow is empty)")
	}
	if len(entries) > MaxNarrow {
		return nil, fmt.Errorf("%d entries; at most %d", len(entries), MaxNarrow)
	}
	l, err := ParseList(entries)
	if err != nil {
		return nil, err
	}
	for i, r := range l {
		narrowed, ok := ceiling.covers(r)
		if !ok {
			return nil, fmt.Errorf("%q is not within the policy's egress.allow (%s)", entries[i], ceiling)
		}
		l[i].Narrowed = narrowed
	}
	return l, nil
}

// covers says whether every host and port r allows is one l allows, and
// whether it does so only through a wildcard for some of them.
func (l List) covers(r Rule) (narrowed, ok bool) {
	_, err := netip.ParseAddr(r.Host)
	addr := err == nil // an address is within only a rule that names it
	ports := []int{r.Port}
	if r.Port == 0 {
		ports = []int{80, 443}
	}
	for _, port := range ports {
		found, exact := false, false
		for _, c := range l {
			if c.Port == 0 && port != 80 && port != 443 || c.Port != 0 && c.Port != port {
				continue
			}
			switch {
			case !c.Wildcard && !r.Wildcard && c.Host == r.Host:
				found, exact = true, true
			case c.Wildcard && !addr && (r.Host == c.Host && r.Wildcard || strings.HasSuffix(r.Host, "."+c.Host)):
				found = true
			}
		}
		if !found {
			return false, false
		}
		narrowed = narrowed || !exact && !r.Wildcard
	}
	return narrowed, true
}

// String is the list as the policy writes it.
func (l List) String() string { return strings.Join(l.Strings(), ", ") }

// Strings are the list's entries as the policy writes them.
func (l List) Strings() []string {
	s := make([]string, len(l))
	for i, r := range l {
		s[i] = r.String()
	}
	return s
}

// cgnat is the shared address space (RFC 6598), private in practice.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// Private says whether an address is one a wildcard must never lead to:
// private, loopback, link-local, unspecified, multicast or shared.
func Private(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || cgnat.Contains(a)
}

// Hosts are names the proxy resolves without DNS.
type Hosts map[string]netip.Addr

// ParseHosts reads name -> address entries; the error names the first bad one.
func ParseHosts(m map[string]string) (Hosts, error) {
	h := Hosts{}
	for name, addr := range m {
		n := strings.TrimSuffix(strings.ToLower(name), ".")
		if !validName(n) {
			return nil, fmt.Errorf("host %q: not a host name", name)
		}
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return nil, fmt.Errorf("host %q: %q is not an IP address", name, addr)
		}
		h[n] = a.Unmap()
	}
	return h, nil
}

// resolver answers the names h holds, and asks next for the rest.
func (h Hosts) resolver(next Resolver) Resolver { return hostsResolver{h, next} }

type hostsResolver struct {
	hosts Hosts
	next  Resolver
}

func (r hostsResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := r.hosts[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		return []netip.Addr{a}, nil
	}
	return r.next.LookupNetIP(ctx, network, host)
}

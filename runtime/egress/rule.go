package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ErrBadRule is wrapped by every error of ParseRule. Its text starts those
// errors' messages, which read: allow entry "ENTRY": PROBLEM.
var ErrBadRule = errors.New("allow entry")

// Rule is one entry of an allowlist: a host (a DNS name, a *.name pattern,
// an IP address or a CIDR network) and a port or any port. Make one with
// ParseRule; the zero Rule matches nothing.
type Rule struct {
	// name is a lower-case DNS name, or "*." and the suffix a pattern
	// matches; "" for an address rule.
	name string
	// net is the address (a /32 or /128) or network of an address rule;
	// not valid for a name rule.
	net netip.Prefix
	// port is the one port allowed, or 0 for any port.
	port uint16
}

// ParseRule parses one allow entry, HOST:PORT. HOST is a DNS name
// (example.com), a pattern matching the names below one (*.example.com,
// not example.com itself), an IPv4 address, a bracketed IPv6 address
// ([::1]), or a CIDR network (10.0.0.0/8, [fd00::/8]). PORT is 1 to 65535,
// or * for any port.
//
// A name reaches only Public addresses that are not the host's own;
// private, shared and host addresses need an address or network rule.
// Loopback and unspecified addresses need a rule within their own network
// (127.0.0.1, 127.0.0.0/8, [::1]): 0.0.0.0/0 does not include them.
func ParseRule(s string) (Rule, error) {
	bad := func(format string, args ...any) (Rule, error) {
		return Rule{}, fmt.Errorf("%w %q: %s", ErrBadRule, s, fmt.Sprintf(format, args...))
	}
	if s == "" {
		return bad("empty; write HOST:PORT, as in example.com:443")
	}

	var host, port string
	var bracketed, hasPort bool
	if rest, ok := strings.CutPrefix(s, "["); ok {
		i := strings.IndexByte(rest, ']')
		if i < 0 {
			return bad(`missing "]" after the IPv6 address`)
		}
		host, rest, bracketed = rest[:i], rest[i+1:], true
		if rest != "" && rest[0] != ':' {
			return bad(`unexpected %q after "]"; write [ADDRESS]:PORT`, rest)
		}
		port, hasPort = strings.CutPrefix(rest, ":")
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port, hasPort = s[:i], s[i+1:], true
		if strings.Contains(host, ":") {
			return bad("too many colons; an IPv6 address goes in brackets, as in [2001:db8::1]:443")
		}
	} else {
		host = s
	}
	if !hasPort {
		return bad(`missing ":PORT" (write %s:443, or %s:* for any port)`, s, s)
	}
	if host == "" {
		return bad(`empty host before ":PORT"`)
	}

	var r Rule
	switch n, err := strconv.ParseUint(port, 10, 16); {
	case port == "*":
	case port == "":
		return bad(`empty port after ":" (write %s:443, or %s:* for any port)`, s[:len(s)-1], s[:len(s)-1])
	case err != nil || n == 0:
		return bad("bad port %q: want a number from 1 to 65535, or * for any port", port)
	default:
		r.port = uint16(n)
	}

	switch {
	case strings.Contains(host, "/"):
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return bad("bad CIDR network %q: %v", host, err)
		}
		if p.Addr().Is6() != bracketed {
			if bracketed {
				return bad("brackets are only for IPv6; write %s:%s", host, port)
			}
			return bad("an IPv6 network goes in brackets, as in [%s]:%s", host, port)
		}
		if p.Addr().Is4In6() {
			return bad("write the IPv4 network %s without ::ffff:", host)
		}
		if p != p.Masked() {
			return bad("%s has bits set past the /%d; write %s", host, p.Bits(), p.Masked())
		}
		r.net = p
	case bracketed:
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return bad("%q is not an IPv6 address; brackets are only for IPv6", host)
		}
		if a.Zone() != "" {
			return bad("an address with a zone (%%%s) cannot be allowed", a.Zone())
		}
		a = a.Unmap()
		r.net = netip.PrefixFrom(a, a.BitLen())
	default:
		if a, err := netip.ParseAddr(host); err == nil {
			r.net = netip.PrefixFrom(a, a.BitLen())
			break
		}
		name := strings.TrimSuffix(strings.ToLower(host), ".")
		if name == "*" {
			return bad("a bare * would allow every host; list the hosts the sandbox needs")
		}
		suffix, _ := strings.CutPrefix(name, "*.")
		if strings.Contains(suffix, "*") {
			return bad(`"*" may only be the whole first label, as in *.example.com`)
		}
		if err := checkName(suffix); err != nil {
			return bad("%v", err)
		}
		r.name = name
	}
	return r, nil
}

// checkName checks that name (lower case, no trailing dot) is a DNS name.
func checkName(name string) error {
	if len(name) > 253 {
		return fmt.Errorf("the name is longer than 253 characters")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" {
			return fmt.Errorf("%q has an empty label", name)
		}
		if len(l) > 63 {
			return fmt.Errorf("%q has a label longer than 63 characters", name)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%q has a label that starts or ends with '-'", name)
		}
		for _, c := range l {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not a DNS name: it has %q", name, c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return fmt.Errorf("%q is neither a DNS name nor an IP address", name)
	}
	return nil
}

// String returns the rule in its canonical form, which ParseRule reads
// back: names in lower case, IPv6 in brackets, * for any port.
func (r Rule) String() string {
	port := "*"
	if r.port != 0 {
		port = strconv.Itoa(int(r.port))
	}
	host := r.name
	if r.net.IsValid() {
		host = r.net.String()
		if r.net.IsSingleIP() {
			host = r.net.Addr().String()
		}
		if r.net.Addr().Is6() {
			host = "[" + host + "]"
		}
	}
	return host + ":" + port
}

// byName reports whether r was written as a name or pattern rather than as
// an address or network: only such a rule can be reached through DNS.
func (r Rule) byName() bool { return r.name != "" }

func (r Rule) matchesPort(port int) bool { return r.port == 0 || int(r.port) == port }

func (r Rule) matchesName(name string) bool {
	if suffix, ok := strings.CutPrefix(r.name, "*"); ok {
		return len(name) > len(suffix) && strings.HasSuffix(name, suffix)
	}
	return r.name != "" && name == r.name
}

// Allowlist is the set of places a sandbox may connect to.
type Allowlist []Rule

// ParseAllowlist parses the allow entries of a sandbox's network policy.
// It reports every bad entry, not only the first.
func ParseAllowlist(entries []string) (Allowlist, error) {
	var list Allowlist
	var errs []error
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		list = append(list, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return list, nil
}

// Match reports whether the list allows a connection to host:port, and
// the first rule that does. host is a DNS name (in any case, a trailing
// dot ignored) or an IP address, bracketed or not. A name is matched only
// by name rules and an address only by address and network rules: what a
// name resolves to is the proxy's concern, not the list's.
func (a Allowlist) Match(host string, port int) (Rule, bool) {
	addr, name, ok := parseHost(host)
	if !ok {
		return Rule{}, false
	}
	if name == "" {
		return a.matchAddr(addr, port)
	}
	for _, r := range a {
		if r.matchesName(name) && r.matchesPort(port) {
			return r, true
		}
	}
	return Rule{}, false
}

// matchAddr returns the first address or network rule allowing addr:port.
// A loopback or unspecified address is allowed only by a rule that names
// it or a part of its own network (127.0.0.1, 127.0.0.0/8, [::1]): a wide
// network such as 0.0.0.0/0 means the world, not the host itself.
func (a Allowlist) matchAddr(addr netip.Addr, port int) (Rule, bool) {
	own, named := namedOnly(addr)
	for _, r := range a {
		if !r.net.IsValid() || !r.net.Contains(addr) || !r.matchesPort(port) {
			continue
		}
		if named && (r.net.Bits() < own.Bits() || !own.Contains(r.net.Addr())) {
			continue
		}
		return r, true
	}
	return Rule{}, false
}

// The networks whose addresses only a rule within them allows.
var namedNets = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("::/128"),
}

func namedOnly(addr netip.Addr) (netip.Prefix, bool) {
	for _, n := range namedNets {
		if n.Contains(addr) {
			return n, true
		}
	}
	return netip.Prefix{}, false
}

// notPublic are the networks, besides loopback, link-local, multicast
// and unspecified, that a name rule never reaches: private (RFC 1918),
// shared (CGNAT, RFC 6598), unique local (fc00::/7), "this network"
// (0.0.0.0/8), IETF protocol assignments (192.0.0.0/24), benchmarking
// (198.18.0.0/15), reserved (240.0.0.0/4, with the broadcast address)
// and discard-only (100::/64); and the IPv6 prefixes that carry an IPv4
// address to a translator or tunnel, which may lead to any IPv4 address,
// a private one too: NAT64 (64:ff9b::/96, 64:ff9b:1::/48), 6to4
// (2002::/16), Teredo (2001::/32) and the deprecated IPv4-compatible
// addresses (::/96, which sit tunnels take).
var notPublic = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("::/96"),
}

// Public reports whether addr is an address of the Internet at large,
// which a name rule may reach: not loopback, link-local, multicast,
// unspecified, private, shared (CGNAT), unique local, reserved or a
// translator's (notPublic lists them). (The host's own
// addresses are the proxy's to exclude: they depend on the host.)
func Public(addr netip.Addr) bool {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsLoopback() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() ||
		addr.IsInterfaceLocalMulticast() || addr.IsMulticast() || addr.IsUnspecified() || addr.IsPrivate() {
		return false
	}
	for _, n := range notPublic {
		if n.Contains(addr) {
			return false
		}
	}
	return true
}

// parseHost reads host, the host of a request, as an address or else as a
// DNS name (lower-cased, without a trailing dot). ok is false when it is
// neither, or is an address with a zone, which no rule can allow.
func parseHost(host string) (addr netip.Addr, name string, ok bool) {
	if inner, ok := strings.CutPrefix(host, "["); ok {
		if inner, ok = strings.CutSuffix(inner, "]"); !ok {
			return netip.Addr{}, "", false
		}
		host = inner
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), "", a.Zone() == ""
	}
	name = strings.TrimSuffix(strings.ToLower(host), ".")
	if checkName(name) != nil {
		return netip.Addr{}, "", false
	}
	return netip.Addr{}, name, true
}

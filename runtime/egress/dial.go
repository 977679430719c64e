package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"

	"github.com/sandboxd/sandboxd/internal/connbound"
)

// open decides whether the sandbox may reach host:port and, if so,
// connects there. When it cannot it replies to c and returns nil.
func (p *Proxy) open(ctx context.Context, c net.Conn, method, host, portText string) net.Conn {
	target := net.JoinHostPort(host, portText)
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		p.refuse(c, http.StatusBadRequest, method, target, "bad port %q", portText)
		return nil
	}
	attrs := []any{"SANDBOX_ID", p.Sandbox, "target", target, "ACTION", "connect", "method", method}

	rule, ok := p.Allow.Match(host, port)
	if !ok {
		p.refuse(c, http.StatusForbidden, method, target, "%s is not in this sandbox's allowlist", target)
		return nil
	}
	addrs, err := p.addresses(ctx, rule, host, port)
	if err != nil {
		p.log().Warn("egress failed", append(attrs, "rule", rule.String(), "error", err)...)
		reply(c, http.StatusBadGateway, fmt.Sprintf("cannot reach %s: %v", target, err))
		return nil
	}
	if len(addrs) == 0 {
		p.refuse(c, http.StatusForbidden, method, target, "%s resolves only to private, loopback, link-local, multicast or the host's own addresses, which a name in the allowlist does not allow (only an IP or CIDR entry naming them does)", host)
		return nil
	}
	p.log().Info("egress allowed", append(attrs, "rule", rule.String())...)

	var errs []error
	for _, a := range addrs {
		up, err := p.dialer().DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			// The origin's queues pinned small too: a fast origin fills
			// them and waits, while the sandbox does not read (a Dialer
			// that pins before connecting sizes TCP's window as well).
			if err = connbound.Pin(up); err == nil {
				return up
			}
			up.Close()
		}
		errs = append(errs, err)
	}
	err = errors.Join(errs...)
	p.log().Warn("egress failed", append(attrs, "rule", rule.String(), "error", err)...)
	reply(c, http.StatusBadGateway, fmt.Sprintf("cannot connect to %s: %v", target, err))
	return nil
}

// addresses returns the addresses rule lets the sandbox reach host at: the
// address itself for an address rule; for a name rule, those the name
// resolves to, less the special ones no address rule allows.
func (p *Proxy) addresses(ctx context.Context, rule Rule, host string, port int) ([]netip.Addr, error) {
	addr, name, _ := parseHost(host)
	if !rule.byName() {
		return []netip.Addr{addr}, nil
	}
	resolved, err := p.resolver().LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", name, err)
	}
	own, err := p.hostAddrs()
	if err != nil {
		return nil, fmt.Errorf("reading the host's own addresses: %w", err)
	}
	var addrs []netip.Addr
	for _, a := range resolved {
		a = a.Unmap()
		if _, ok := p.Allow.matchAddr(a, port); !Public(a) || slices.Contains(own, a) {
			if !ok {
				continue
			}
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

func (p *Proxy) hostAddrs() ([]netip.Addr, error) {
	if p.HostAddrs != nil {
		return p.HostAddrs()
	}
	return InterfaceAddrs()
}

// InterfaceAddrs lists the addresses of the interfaces of the calling
// process's network namespace: the daemon's, the host's own.
func InterfaceAddrs() ([]netip.Addr, error) {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, ia := range ifaddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out, nil
}

func (p *Proxy) resolver() Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

func (p *Proxy) dialer() Dialer {
	if p.Dialer != nil {
		return p.Dialer
	}
	return &net.Dialer{Timeout: dialTimeout}
}

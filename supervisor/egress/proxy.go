package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// headerTimeout bounds how long a client may take to send its request
	// line and header, so an idle one cannot hold a goroutine forever.
	headerTimeout = 10 * time.Second
	// maxHeaderBytes bounds the request line and header.
	maxHeaderBytes = 64 << 10
	// dialTimeout bounds each attempt to connect to an allowed address.
	dialTimeout = 10 * time.Second
	// replyTimeout bounds writing an error reply to a client that does
	// not read it.
	replyTimeout = 10 * time.Second
	// lingerTimeout bounds waiting, after an error reply, for the client
	// to close.
	lingerTimeout = 500 * time.Millisecond
)

// Resolver looks up the addresses of a name; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens connections to the addresses the proxy allowed; *net.Dialer
// is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Proxy is a sandbox's egress proxy: it serves HTTP proxy requests, CONNECT
// tunnels and plain http:// requests, for the targets Allow lets through.
//
// The decision is made on the name the sandbox asked for; the proxy then
// resolves it (the sandbox has no DNS) and dials exactly the addresses it
// checked. A name must not be a way to reach the host's own loopback, so a
// name rule never lets through a loopback, link-local, unspecified or
// multicast address: only an address or network rule covering it does.
type Proxy struct {
	Allow Allowlist
	// Log receives one line for each connection allowed or refused;
	// slog.Default() if nil.
	Log *slog.Logger
	// Sandbox is the id of the sandbox served, logged as SANDBOX_ID.
	Sandbox string
	// Resolver resolves the names asked for; net.DefaultResolver if nil.
	Resolver Resolver
	// Dialer connects to allowed addresses; a net.Dialer with a 10 s
	// timeout if nil.
	Dialer Dialer
}

// Serve accepts connections on ln and serves each in its own goroutine,
// until ctx ends or ln is closed; it returns nil then, other accept errors
// otherwise. It closes ln, and the connections in flight, before it
// returns.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	context.AfterFunc(ctx, func() { ln.Close() })

	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if !isTemporary(err) {
				return fmt.Errorf("accepting connections on %s: %w", ln.Addr(), err)
			}
			// Out of descriptors or memory, perhaps because the sandbox
			// opened too many connections: wait for some to end.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log().Warn("egress proxy cannot accept a connection", "SANDBOX_ID", p.Sandbox, "error", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		wg.Go(func() { p.serveConn(ctx, c) })
	}
}

func isTemporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (p *Proxy) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.Default()
}

// serveConn serves one request from c: a CONNECT tunnel, or one plain HTTP
// request, after which c is closed.
func (p *Proxy) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	c.SetReadDeadline(time.Now().Add(headerTimeout))
	lr := &io.LimitedReader{R: c, N: maxHeaderBytes}
	br := bufio.NewReader(lr)
	req, err := http.ReadRequest(br)
	if err != nil {
		var ne net.Error
		switch {
		case lr.N <= 0:
			p.refuse(c, http.StatusRequestHeaderFieldsTooLarge, "", "", "request header larger than %d bytes", maxHeaderBytes)
		case errors.Is(err, io.EOF), errors.As(err, &ne) && ne.Timeout(), ctx.Err() != nil:
			// Gone, idle, or stopping: nothing was asked.
		default:
			p.refuse(c, http.StatusBadRequest, "", "", "bad request: %v", err)
		}
		return
	}
	lr.N = math.MaxInt64
	c.SetReadDeadline(time.Time{})

	if req.Method == http.MethodConnect {
		host, port, err := net.SplitHostPort(req.URL.Host)
		if err != nil {
			p.refuse(c, http.StatusBadRequest, req.Method, "", "CONNECT needs host:port, not %q", req.URL.Host)
			return
		}
		if up := p.open(ctx, c, req.Method, host, port); up != nil {
			defer up.Close()
			tunnel(c, br, up)
		}
		return
	}
	switch {
	case req.URL.Scheme == "http" && req.URL.Host != "":
		port := req.URL.Port()
		if port == "" {
			port = "80"
		}
		if up := p.open(ctx, c, req.Method, req.URL.Hostname(), port); up != nil {
			defer up.Close()
			p.forward(ctx, c, req, net.JoinHostPort(req.URL.Hostname(), port), up)
		}
	case req.URL.Host != "":
		p.refuse(c, http.StatusBadRequest, req.Method, "", "only http:// URLs can be proxied as plain requests; use CONNECT for %s", req.URL.Scheme)
	default:
		p.refuse(c, http.StatusBadRequest, req.Method, "", "this is a proxy: ask it for CONNECT host:port or for an absolute http:// URL, not %q", req.RequestURI)
	}
}

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
		p.refuse(c, http.StatusForbidden, method, target, "%s resolves only to loopback, link-local, unspecified or multicast addresses, which a name in the allowlist does not allow (only an IP or CIDR entry does)", host)
		return nil
	}
	p.log().Info("egress allowed", append(attrs, "rule", rule.String())...)

	var errs []error
	for _, a := range addrs {
		up, err := p.dialer().DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return up
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
	var addrs []netip.Addr
	for _, a := range resolved {
		a = a.Unmap()
		special := a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified() || a.IsMulticast()
		if _, ok := p.Allow.matchAddr(a, port); special && !ok {
			continue
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
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

// refuse logs a refusal of a request and replies to c with code and the
// reason. method and target are "" when the request is too bad to have
// them.
func (p *Proxy) refuse(c net.Conn, code int, method, target, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	attrs := []any{"SANDBOX_ID", p.Sandbox, "ACTION", "connect", "reason", reason}
	if target != "" {
		attrs = append(attrs, "target", target)
	}
	if method != "" {
		attrs = append(attrs, "method", method)
	}
	p.log().Info("egress refused", attrs...)
	msg := reason
	if target != "" {
		msg = fmt.Sprintf("refused %s: %s", target, reason)
	}
	reply(c, code, msg)
}

// reply writes a short text response to c, which is closed after it.
func reply(c net.Conn, code int, msg string) {
	body := "sandboxd egress proxy: " + msg + "\n"
	c.SetWriteDeadline(time.Now().Add(replyTimeout))
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
	// Closing c with bytes from the client still unread (what it sent
	// after its request) would reset the connection, which can lose the
	// reply: end the reply, and read until the client closes too.
	if cw, ok := c.(interface{ CloseWrite() error }); ok && err == nil && cw.CloseWrite() == nil {
		c.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.CopyN(io.Discard, c, maxHeaderBytes)
	}
}

// tunnel tells the client its CONNECT succeeded, then copies bytes both
// ways between it (reading through br, which may hold bytes it sent early)
// and up until both directions end.
func tunnel(c net.Conn, br *bufio.Reader, up net.Conn) {
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { copyHalf(up, br, c) })
	wg.Go(func() { copyHalf(c, up, up) })
	wg.Wait()
}

// copyHalf copies src, read from the connection from, to dst. At the end
// of src it shuts dst's writing side, passing the end on while the other
// direction goes on; on an error it closes both connections, ending the
// other direction too.
func copyHalf(dst net.Conn, src io.Reader, from net.Conn) {
	_, err := io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
	from.Close()
}

// forward sends req, a plain HTTP request, over up, the connection open
// to target, and streams the response back to c.
func (p *Proxy) forward(ctx context.Context, c net.Conn, req *http.Request, target string, up net.Conn) {
	conns := make(chan net.Conn, 1)
	conns <- up
	tr := &http.Transport{
		Proxy: nil,
		// Only the connection made to the address checked: never a
		// second one, and no lookup of the URL's host.
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			select {
			case c := <-conns:
				return c, nil
			default:
				return nil, errors.New("the connection to the origin was lost")
			}
		},
		DisableKeepAlives:  true,
		DisableCompression: true,
	}
	defer tr.CloseIdleConnections()

	out := req.Clone(ctx)
	out.RequestURI = ""
	removeHopHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // send none rather than Go's
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		p.log().Warn("egress failed", "SANDBOX_ID", p.Sandbox, "target", target, "ACTION", "connect", "method", req.Method, "error", err)
		reply(c, http.StatusBadGateway, fmt.Sprintf("forwarding to %s: %v", target, err))
		return
	}
	defer resp.Body.Close()
	removeHopHeaders(resp.Header)
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	resp.Close = true
	resp.Write(c)
}

// hopHeaders concern one connection, not the request: a proxy drops them.
var hopHeaders = []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	for name := range h {
		if strings.HasPrefix(name, "Proxy-") {
			delete(h, name)
		}
	}
}

package egress

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

	// DefaultMaxConns is how many connections one sandbox may have open
	// through its proxy at once: each holds two descriptors and a few
	// goroutines of the root daemon.
	DefaultMaxConns = 256
	// DefaultIdleTimeout closes a tunnel or request that moved no byte,
	// either way, for this long.
	DefaultIdleTimeout = 5 * time.Minute
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
// checked. A name must not be a way to reach the host or its private
// networks (a name anyone can point anywhere, as *.nip.io does), so a name
// rule never lets through an address that is not Public, nor one of the
// host's own: only an address or network rule covering it does.
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
	// MaxConns bounds the connections served at once (DefaultMaxConns
	// if 0); one more is answered 503 and closed.
	MaxConns int
	// IdleTimeout closes a connection that moved no byte either way for
	// that long (DefaultIdleTimeout if 0).
	IdleTimeout time.Duration
	// HostAddrs lists the host's own addresses, which a name rule never
	// lets through; the addresses of the daemon's interfaces if nil.
	HostAddrs func() ([]netip.Addr, error)
	// RefusalLogPeriod is the period of the refusals past MaxConns
	// logged one by one (RefusalLogBurst of them) and then counted
	// (RefusalLogPeriod if 0).
	RefusalLogPeriod time.Duration

	busyLines *lineLimiter
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

	maxConns := p.MaxConns
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	slots := make(chan struct{}, maxConns)
	p.busyLines = newLineLimiter(RefusalLogBurst, cmp.Or(p.RefusalLogPeriod, RefusalLogPeriod), func(held int, period time.Duration) {
		p.log().Warn("egress refused more", "SANDBOX_ID", p.Sandbox, "ACTION", "connect", "count", held, "period", period.String(),
			"reason", fmt.Sprintf("too many connections: %d open, the most a sandbox may have; %d more refused, not logged one by one", maxConns, held))
	})
	defer p.busyLines.flush()
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
		select {
		case slots <- struct{}{}:
		default:
			p.refuseBusy(c, maxConns)
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			p.serveConn(ctx, c)
		})
	}
}

// refuseBusy answers a connection past the cap 503 and closes it, without
// waiting on the client: a sandbox that opens connections without end
// must not make the accept loop wait for each.
func (p *Proxy) refuseBusy(c net.Conn, maxConns int) {
	if p.busyLines.allow() {
		p.log().Warn("egress refused", "SANDBOX_ID", p.Sandbox, "ACTION", "connect",
			"reason", fmt.Sprintf("too many connections: %d open, the most a sandbox may have", maxConns))
	}
	body := fmt.Sprintf("sandboxd egress proxy: too many connections: this sandbox has %d open, the most it may have; close some and retry\n", maxConns)
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s", len(body), body)
	c.Close()
}

func (p *Proxy) idleTimeout() time.Duration {
	if p.IdleTimeout > 0 {
		return p.IdleTimeout
	}
	return DefaultIdleTimeout
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
	// The header's bytes are kept: ReadRequest drops the Host header of
	// a request with an absolute URL, which the proxy must compare.
	var head bytes.Buffer
	lr := &io.LimitedReader{R: io.TeeReader(c, &head), N: maxHeaderBytes}
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
	// From here on the connection lives while bytes move, either way;
	// idle, it is closed (and with it the connection to the origin).
	act := newActivity()
	var origin net.Conn
	var originMu sync.Mutex
	stopIdle := act.watch(ctx, p.idleTimeout(), func() {
		p.log().Info("egress closed an idle connection", "SANDBOX_ID", p.Sandbox, "ACTION", "connect", "idle", p.idleTimeout().String())
		c.Close()
		originMu.Lock()
		if origin != nil {
			origin.Close()
		}
		originMu.Unlock()
	})
	defer stopIdle()
	track := func(u net.Conn) net.Conn {
		originMu.Lock()
		defer originMu.Unlock()
		origin = u
		return &activeConn{Conn: u, act: act}
	}
	c = &activeConn{Conn: c, act: act}
	lr.R = c

	if req.Method == http.MethodConnect {
		host, port, err := net.SplitHostPort(req.URL.Host)
		if err != nil {
			p.refuse(c, http.StatusBadRequest, req.Method, "", "CONNECT needs host:port, not %q", req.URL.Host)
			return
		}
		if up := p.open(ctx, c, req.Method, host, port); up != nil {
			defer up.Close()
			tunnel(c, br, track(up))
		}
		return
	}
	switch {
	case req.URL.Scheme == "http" && req.URL.Host != "":
		port := req.URL.Port()
		if port == "" {
			port = "80"
		}
		// The origin serves the Host the request names: a Host other
		// than the URL's would reach a virtual host the allowlist never
		// allowed, at an address it did.
		if h, ok := hostHeader(head.Bytes()); !ok || h != "" && !sameHost(h, req.URL.Host) {
			p.refuse(c, http.StatusBadRequest, req.Method, net.JoinHostPort(req.URL.Hostname(), port),
				"the Host header %q names another host than the URL %q", h, req.URL.Host)
			return
		}
		if up := p.open(ctx, c, req.Method, req.URL.Hostname(), port); up != nil {
			defer up.Close()
			p.forward(ctx, c, req, net.JoinHostPort(req.URL.Hostname(), port), track(up))
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
		p.refuse(c, http.StatusForbidden, method, target, "%s resolves only to private, loopback, link-local, multicast or the host's own addresses, which a name in the allowlist does not allow (only an IP or CIDR entry naming them does)", host)
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
	out.Host = req.URL.Host // the host checked, whatever the client said
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

// hostHeader returns the value of the Host header in head, the raw bytes
// of a request (and perhaps what follows it), "" if there is none; ok is
// false when there are several.
func hostHeader(head []byte) (host string, ok bool) {
	// HTTP/1 parsers also take a bare LF as a line's end.
	text := strings.ReplaceAll(string(head), "\r\n", "\n")
	if end := strings.Index(text, "\n\n"); end >= 0 {
		text = text[:end]
	}
	lines := strings.Split(text, "\n")
	n := 0
	for _, l := range lines[min(1, len(lines)):] {
		name, value, found := strings.Cut(l, ":")
		if found && strings.EqualFold(strings.TrimSpace(name), "Host") {
			host = strings.TrimSpace(value)
			n++
		}
	}
	return host, n <= 1
}

// sameHost reports whether two HOST[:PORT] of plain HTTP name the same
// place: names compared without case and a trailing dot, port 80 the
// default.
func sameHost(a, b string) bool {
	norm := func(h string) string {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = h, ""
		}
		if port == "" {
			port = "80"
		}
		host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
		return net.JoinHostPort(host, port)
	}
	return norm(a) == norm(b)
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

// activity is when bytes last moved on a proxied connection, either way.
type activity struct{ last atomic.Int64 }

func newActivity() *activity {
	a := &activity{}
	a.touch()
	return a
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

// watch calls idle once no byte moved for timeout, unless stop was called
// first.
func (a *activity) watch(ctx context.Context, timeout time.Duration, idle func()) (stop func()) {
	ctx, stop = context.WithCancel(ctx)
	tick := max(timeout/4, 5*time.Millisecond)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if time.Since(time.Unix(0, a.last.Load())) >= timeout {
					idle()
					return
				}
			}
		}
	}()
	return stop
}

// activeConn notes each read and write of its connection.
type activeConn struct {
	net.Conn
	act *activity
}

func (c *activeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.act.touch()
	}
	return n, err
}

func (c *activeConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.act.touch()
	}
	return n, err
}

// CloseWrite passes a half close on, as the proxy does at the end of one
// direction.
func (c *activeConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("the connection cannot be half closed")
}

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
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/connbound"
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
	// Conns, shared by the proxies of all sandboxes, counts their
	// connections by Owner's uid, capped at MaxConnsPerOwner and
	// MaxConnsAll; nil: only MaxConns caps them.
	Conns *connbound.Counter
	// Owner is the uid of the sandbox's owner, for Conns.
	Owner uint32

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
			"reason", fmt.Sprintf("too many connections: past this sandbox's cap (%d open), its owner's (%d through all its sandboxes) or the daemon's (%d); %d more refused, not logged one by one", maxConns, MaxConnsPerOwner, MaxConnsAll, held))
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
			p.refuseBusy(c, fmt.Sprintf("too many connections: %d open, the most a sandbox may have", maxConns),
				fmt.Sprintf("too many connections: this sandbox has %d open, the most it may have", maxConns))
			continue
		}
		release, reason, body := p.admit()
		if release == nil {
			<-slots
			p.refuseBusy(c, reason, body)
			continue
		}
		// The sandbox's queues pinned small: a sandbox that does not read
		// stops the copy instead of growing them (its listener's sockets
		// were pinned before their handshake, when it was made with
		// ListenInNetNSWith and connbound.SetBuffers).
		if err := connbound.Pin(c); err != nil {
			release()
			<-slots
			p.refuseBusy(c, fmt.Sprintf("cannot bound the connection's queues: %v", err), "cannot serve this connection")
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			defer release()
			p.serveConn(ctx, c)
		})
	}
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
	if code == http.StatusForbidden {
		// An agent reads this body (curl shows it for plain HTTP, and
		// sandboxctl's MCP server names the policy): it must not take a
		// policy for a network fault and retry.
		msg += ". This is the sandbox's network policy, not a network fault: retrying will not help; " +
			"only a sandbox whose allowlist names it may reach it"
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

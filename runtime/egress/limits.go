package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/internal/connbound"
)

// refuseBusy answers a connection past a cap 503 and closes it, without
// waiting on the client: a sandbox that opens connections without end
// must not make the accept loop wait for each. reason is logged, body
// told to the sandbox.
func (p *Proxy) refuseBusy(c net.Conn, reason, body string) {
	if p.busyLines.allow() {
		p.log().Warn("egress refused", "SANDBOX_ID", p.Sandbox, "ACTION", "connect", "reason", reason)
	}
	body = "sandboxd egress proxy: " + body + "; close some and retry\n"
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s", len(body), body)
	c.Close()
}

// admit counts a connection in p.Conns, or says why it is refused: past
// its owner's cap or the daemon's (what is logged, and what the sandbox
// is told). release uncounts it.
func (p *Proxy) admit() (release func(), reason, body string) {
	if p.Conns == nil {
		return func() {}, "", ""
	}
	release, n, own, why := p.Conns.Admit(p.Owner, MaxConnsPerOwner, MaxConnsAll)
	switch why {
	case connbound.Admitted:
		return release, "", ""
	case connbound.OwnerFull:
		return nil, fmt.Sprintf("too many connections: %d open through the egress proxies of uid %d's sandboxes, the most an owner may have", own, p.Owner),
			fmt.Sprintf("too many connections: your sandboxes have %d open, the most an owner may have", own)
	case connbound.Reserved:
		return nil, fmt.Sprintf("too many connections: %d open through all egress proxies, %d through uid %d's: the last %d are kept for owners with fewer than %d", n, own, p.Owner, MaxConnsAll/4, connbound.FairShare),
			fmt.Sprintf("too many connections: your sandboxes have %d open, and the daemon keeps the rest for owners with fewer than %d", own, connbound.FairShare)
	default:
		return nil, fmt.Sprintf("too many connections: %d open through all egress proxies, the most the daemon holds", n),
			"too many connections: the daemon holds the most it may for all sandboxes"
	}
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

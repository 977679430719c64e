// Package connbound bounds what the root daemon holds for a connection it
// proxies for a tenant (an exposed port's, an egress proxy's tunnel):
// socket queues pinned small so that a side that does not read stops the
// other's writes (backpressure) instead of growing the kernel's queues, a
// copy of a fixed size each way, and a count of the connections open per
// owner and in all.
package connbound

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// SocketBuffer is the SO_RCVBUF and SO_SNDBUF asked of each socket;
	// the kernel doubles it for its overhead, so a socket's two queues
	// hold at most 4 × SocketBuffer (128 KiB), with no autotuning (up to
	// tcp_rmem's and tcp_wmem's 6 and 4 MiB) and not a unix socket's
	// 208 KiB default.
	SocketBuffer = 32 << 10
	// CopyBuffer is the copy's buffer, each way.
	CopyBuffer = 16 << 10
)

// SetBuffers pins the socket fd's receive and send queues to SocketBuffer.
// Set on a listener or before a connect, the size is known when TCP's
// handshake chooses the window's scale.
func SetBuffers(fd uintptr) error {
	for _, opt := range []int{unix.SO_RCVBUF, unix.SO_SNDBUF} {
		if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, SocketBuffer); err != nil {
			return fmt.Errorf("setting a socket's buffers to %d bytes: %w", SocketBuffer, err)
		}
	}
	return nil
}

// Control is SetBuffers on rc's descriptor.
func Control(rc syscall.RawConn) error {
	var err error
	if cerr := rc.Control(func(fd uintptr) { err = SetBuffers(fd) }); cerr != nil {
		return fmt.Errorf("setting a socket's buffers: %w", cerr)
	}
	return err
}

// ListenControl is Control for net.ListenConfig and net.Dialer: a
// listener's accepted sockets take its buffers.
func ListenControl(_, _ string, rc syscall.RawConn) error { return Control(rc) }

// Pin pins c's queues (SetBuffers).
func Pin(c net.Conn) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("setting a connection's buffers: %T has no descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("setting a connection's buffers: %w", err)
	}
	return Control(rc)
}

// Copy copies src to dst through a buffer of CopyBuffer bytes, reading
// again only once dst took what it read: never through src's WriteTo or
// dst's ReadFrom, which may use larger buffers (io.Copy's 32 KiB, or a
// splice's pipe).
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, CopyBuffer)
	var written int64
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			w, werr := dst.Write(buf[:n])
			written += int64(w)
			if werr != nil {
				return written, werr
			}
			if w != n {
				return written, io.ErrShortWrite
			}
		}
		if errors.Is(rerr, io.EOF) {
			return written, nil
		}
		if rerr != nil {
			return written, rerr
		}
	}
}

// Counter counts the connections open per owner and in all; its zero
// value counts none.
type Counter struct {
	mu    sync.Mutex
	conns map[uint32]int
	total int
}

// FairShare: the last quarter of a Counter's connections in all are kept
// for owners that hold fewer than this many, so that owners at their cap
// (four owners at a cap of a quarter fill the total) cannot leave another
// owner none: it takes three at their cap and sixteen more to fill them.
const FairShare = 16

// Refusal says why Admit refused a connection.
type Refusal int

const (
	Admitted Refusal = iota
	// OwnerFull: the owner has its perOwner open.
	OwnerFull
	// AllFull: everyone has total open.
	AllFull
	// Reserved: the last quarter of total is left, and it is kept for
	// owners with fewer than FairShare open; this one has more.
	Reserved
)

// Admit counts a connection of owner's, unless it is refused (release nil,
// why says the rule; open and ownerOpen say how many are open in all and
// by the owner). release uncounts it, once however often it is called.
func (c *Counter) Admit(owner uint32, perOwner, total int) (release func(), open, ownerOpen int, why Refusal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.conns[owner]
	switch {
	case n >= perOwner:
		return nil, c.total, n, OwnerFull
	case c.total >= total:
		return nil, c.total, n, AllFull
	case c.total >= total-total/4 && n >= FairShare:
		return nil, c.total, n, Reserved
	}
	if c.conns == nil {
		c.conns = map[uint32]int{}
	}
	c.conns[owner]++
	c.total++
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.conns[owner]--; c.conns[owner] <= 0 {
			delete(c.conns, owner)
		}
		c.total--
	}), 0, 0, Admitted
}

// Total is how many connections are counted, in all.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// ListenInNetNS opens a TCP listener at addr inside the network namespace
// at nsPath (such as /proc/1234/ns/net), so that a sandbox can reach it on
// its own lo while the daemon, which stays in its own namespace, serves it.
//
// A socket belongs to the namespace of the thread that creates it, so the
// listener is made on a locked thread that enters the namespace and comes
// back. addr is an IP address and port, such as 127.0.0.1:3128: there is
// no DNS in the namespace. The listener is tcp4 or tcp6 by the address
// (so [::]:3128 is IPv6 only), which also keeps the net package from
// probing the namespace for what IP it supports on the daemon's behalf.
func ListenInNetNS(nsPath, addr string) (net.Listener, error) {
	return ListenInNetNSWith(nsPath, addr, nil)
}

// ListenInNetNSWith is ListenInNetNS with control run on the listener's
// socket before it listens: options its accepted sockets take, such as
// their buffers' sizes, which TCP must know before a handshake.
func ListenInNetNSWith(nsPath, addr string, control func(fd uintptr) error) (net.Listener, error) {
	ln, err := listenInNetNS(nsPath, addr, control)
	if err != nil {
		return nil, fmt.Errorf("listening on %s in the network namespace %s: %w", addr, nsPath, err)
	}
	return ln, nil
}

func listenInNetNS(nsPath, addr string, control func(fd uintptr) error) (net.Listener, error) {
	network, err := tcpNetwork(addr)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	err = inNetNS(nsPath, func() (err error) {
		var lc net.ListenConfig
		lc.Control = rawControl(control)
		ln, err = lc.Listen(context.Background(), network, addr)
		return err
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	return ln, nil
}

// DialInNetNS connects to addr (an IP address and port, such as
// 127.0.0.1:8000) inside the network namespace at nsPath, for the daemon,
// which stays in its own: the socket is made in the namespace (a socket
// keeps the namespace it was made in), so 127.0.0.1 is the namespace's own
// loopback, whatever the namespace's routes. ctx bounds the connect.
func DialInNetNS(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	return dialInNetNS(ctx, nsPath, addr, -1, nil)
}

// DialInNetNSAs is DialInNetNS with a socket of uid's: made while the
// thread's filesystem uid is uid, the socket is uid's in the kernel's
// tables (/proc/net/tcp, sock_diag), so that whatever trusts a peer by
// its socket's owner (an exposed port's own check, on the host's
// loopback when the namespace is the host's) sees uid, never root.
func DialInNetNSAs(ctx context.Context, nsPath, addr string, uid uint32) (net.Conn, error) {
	return dialInNetNS(ctx, nsPath, addr, int(uid), nil)
}

// DialInNetNSAsWith is DialInNetNSAs with control run on the socket
// before it connects: options such as its buffers' sizes, which TCP
// must know before the handshake (the window's scale is chosen there).
func DialInNetNSAsWith(ctx context.Context, nsPath, addr string, uid uint32, control func(fd uintptr) error) (net.Conn, error) {
	return dialInNetNS(ctx, nsPath, addr, int(uid), control)
}

func dialInNetNS(ctx context.Context, nsPath, addr string, fsuid int, control func(fd uintptr) error) (net.Conn, error) {
	network, err := tcpNetwork(addr)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s in the network namespace %s: %w", addr, nsPath, err)
	}
	var c net.Conn
	err = inNetNS(nsPath, func() (err error) {
		if fsuid >= 0 {
			prev, _ := unix.SetfsuidRetUid(fsuid)
			// Root's filesystem uid back (and with it its capabilities
			// over files) before the thread leaves the namespace.
			defer unix.SetfsuidRetUid(prev)
			if now, _ := unix.SetfsuidRetUid(-1); now != fsuid {
				return fmt.Errorf("taking filesystem uid %d: it is %d", fsuid, now)
			}
		}
		// A literal address of one family: the dial makes its socket on
		// this goroutine (no resolver, no second address raced), so on
		// this thread, in the namespace.
		d := net.Dialer{Control: rawControl(control)}
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("connecting to %s in the network namespace %s: %w", addr, nsPath, err)
	}
	return c, nil
}

// tcpNetwork is "tcp4" or "tcp6" by addr's address (so [::]:3128 is IPv6
// only), which also keeps the net package from probing a namespace for
// what IP it supports.
func tcpNetwork(addr string) (string, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return "", fmt.Errorf("want an IP address and port: %w", err)
	}
	if ap.Addr().Unmap().Is4() {
		return "tcp4", nil
	}
	return "tcp6", nil
}

// inNetNS runs fn on a locked thread that entered the network namespace
// at nsPath, and comes back.
func inNetNS(nsPath string, fn func() error) error {
	target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the namespace: %w", err)
	}
	defer unix.Close(target)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		back, err := onThreadInNetNS(target, fn)
		done <- err
		if back {
			runtime.UnlockOSThread()
		}
		// Otherwise the thread is still in the namespace: left locked, it
		// ends with this goroutine and no other code runs on it.
	}()
	return <-done
}

// onThreadInNetNS enters the network namespace target on the calling
// thread, which must be locked, runs fn there, and returns to the
// thread's own namespace; back reports whether it did.
func onThreadInNetNS(target int, fn func() error) (back bool, err error) {
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, fmt.Errorf("opening the daemon's own network namespace: %w", err)
	}
	defer unix.Close(own)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return true, fmt.Errorf("entering the namespace: %w", err)
	}
	err = fn()
	if serr := unix.Setns(own, unix.CLONE_NEWNET); serr != nil {
		return false, fmt.Errorf("returning to the daemon's own network namespace: %w", serr)
	}
	return true, err
}

// rawControl runs control on a socket's descriptor, for net.Dialer and
// net.ListenConfig; nil if control is.
func rawControl(control func(fd uintptr) error) func(_, _ string, rc syscall.RawConn) error {
	if control == nil {
		return nil
	}
	return func(_, _ string, rc syscall.RawConn) error {
		var cerr error
		if err := rc.Control(func(fd uintptr) { cerr = control(fd) }); err != nil {
			return err
		}
		return cerr
	}
}

package egress

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"

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
	ln, err := listenInNetNS(nsPath, addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s in the network namespace %s: %w", addr, nsPath, err)
	}
	return ln, nil
}

func listenInNetNS(nsPath, addr string) (net.Listener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("want an IP address and port: %w", err)
	}
	network := "tcp6"
	if ap.Addr().Unmap().Is4() {
		network = "tcp4"
	}
	target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the namespace: %w", err)
	}
	defer unix.Close(target)

	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ln, back, err := listenOnThread(target, network, addr)
		done <- result{ln, err}
		if back {
			runtime.UnlockOSThread()
		}
		// Otherwise the thread is still in the namespace: left locked, it
		// ends with this goroutine and no other code runs on it.
	}()
	r := <-done
	return r.ln, r.err
}

// listenOnThread enters the network namespace target on the calling
// thread, which must be locked, listens there, and returns to the thread's
// own namespace; back reports whether it did.
func listenOnThread(target int, network, addr string) (ln net.Listener, back bool, err error) {
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, fmt.Errorf("opening the daemon's own network namespace: %w", err)
	}
	defer unix.Close(own)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("entering the namespace: %w", err)
	}
	ln, err = net.Listen(network, addr)
	if serr := unix.Setns(own, unix.CLONE_NEWNET); serr != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, false, fmt.Errorf("returning to the daemon's own network namespace: %w", serr)
	}
	return ln, true, err
}

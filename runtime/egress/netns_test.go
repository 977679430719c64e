package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// nsThread is a goroutine locked to a thread in a network namespace of
// its own, with lo up, running the functions it is given until the test
// ends.
type nsThread struct {
	path string // of the namespace, under /proc
	run  chan func()
}

func newNetNS(t *testing.T) *nsThread {
	t.Helper()
	ns := &nsThread{run: make(chan func())}
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: the thread leaves our namespace, so it must end
		// with this goroutine rather than run anything else.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- fmt.Errorf("unsharing the network namespace: %w", err)
			return
		}
		if err := loUp(); err != nil {
			ready <- err
			return
		}
		ns.path = fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		ready <- nil
		for f := range ns.run {
			f()
		}
	}()
	if err := <-ready; err != nil {
		if errors.Is(err, unix.EPERM) {
			t.Skipf("cannot make a network namespace: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { close(ns.run) })
	return ns
}

// do runs f on the namespace's thread.
func (ns *nsThread) do(f func()) {
	done := make(chan struct{})
	ns.run <- func() {
		defer close(done)
		f()
	}
	<-done
}

// loUp brings lo up in the calling thread's network namespace.
func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("making a socket to configure lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading the flags of lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestListenInNetNS(t *testing.T) {
	ns := newNetNS(t)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own := inode(t, "/proc/thread-self/ns/net")
	if inode(t, ns.path) == own {
		t.Fatal("the test's namespace is the host's")
	}
	ln, err := ListenInNetNS(ns.path, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if now := inode(t, "/proc/thread-self/ns/net"); now != own {
		t.Errorf("after ListenInNetNS the thread is in the namespace %d, not its own %d", now, own)
	}
	addr := ln.Addr().String()

	// On the host's side nothing listens there.
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatalf("dialing %s from the host's namespace succeeded", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dialing %s from the host's namespace: %v, want connection refused", addr, err)
	}

	// Inside the namespace, the listener answers.
	var c net.Conn
	ns.do(func() { c, err = net.DialTimeout("tcp", addr, 5*time.Second) })
	if err != nil {
		t.Fatalf("dialing %s inside the namespace: %v", addr, err)
	}
	defer c.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	s, err := ln.Accept()
	if err != nil {
		t.Fatalf("accepting the connection made inside the namespace: %v", err)
	}
	defer s.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(buf); err != nil || buf[0] != 'x' {
		t.Errorf("reading what was sent inside the namespace: %q, %v", buf, err)
	}
}

func TestListenInNetNSErrors(t *testing.T) {
	ns := newNetNS(t)
	tests := []struct{ ns, addr, want string }{
		{"/nonexistent/ns/net", "127.0.0.1:3128", "no such file"},
		{"/proc/self/ns/uts", "127.0.0.1:3128", "entering the namespace"},
		{ns.path, "localhost:3128", "want an IP address and port"},
		{ns.path, "192.0.2.1:3128", "cannot assign requested address"},
	}
	for _, tc := range tests {
		ln, err := ListenInNetNS(tc.ns, tc.addr)
		if err == nil {
			ln.Close()
			t.Errorf("ListenInNetNS(%q, %q) succeeded", tc.ns, tc.addr)
			continue
		}
		prefix := fmt.Sprintf("listening on %s in the network namespace %s: ", tc.addr, tc.ns)
		if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.want) {
			t.Errorf("ListenInNetNS(%q, %q) = %q, want %q...%s", tc.ns, tc.addr, msg, prefix, tc.want)
		}
	}
}

func TestDialInNetNS(t *testing.T) {
	ns := newNetNS(t)

	// The same address listened on in the namespace and on the host: the
	// dial must reach the namespace's.
	var inner net.Listener
	var err error
	ns.do(func() { inner, err = net.Listen("tcp4", "127.0.0.1:0") })
	if err != nil {
		t.Fatalf("listening inside the namespace: %v", err)
	}
	defer inner.Close()
	addr := inner.Addr().String()
	if host, err := net.Listen("tcp4", addr); err == nil {
		defer host.Close()
		go func() {
			if c, err := host.Accept(); err == nil {
				c.Write([]byte("host"))
				c.Close()
			}
		}()
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own := inode(t, "/proc/thread-self/ns/net")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialInNetNS(ctx, ns.path, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if now := inode(t, "/proc/thread-self/ns/net"); now != own {
		t.Errorf("after DialInNetNS the thread is in the namespace %d, not its own %d", now, own)
	}
	inner.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	s, err := inner.Accept()
	if err != nil {
		t.Fatalf("the namespace's listener got no connection: %v", err)
	}
	defer s.Close()
	if _, err := s.Write([]byte("namespace")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if got := string(buf[:n]); err != nil || got != "namespace" {
		t.Errorf("read %q, %v through the connection; want %q from the namespace's listener", got, err, "namespace")
	}
}

func TestDialInNetNSErrors(t *testing.T) {
	ns := newNetNS(t)
	// Listening on the host: refused all the same inside the namespace.
	host, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	tests := []struct{ ns, addr, want string }{
		{ns.path, host.Addr().String(), "connection refused"},
		{"/nonexistent/ns/net", "127.0.0.1:80", "no such file"},
		{"/proc/self/ns/uts", "127.0.0.1:80", "entering the namespace"},
		{ns.path, "localhost:80", "want an IP address and port"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range tests {
		c, err := DialInNetNS(ctx, tc.ns, tc.addr)
		if err == nil {
			c.Close()
			t.Errorf("DialInNetNS(%q, %q) succeeded", tc.ns, tc.addr)
			continue
		}
		prefix := fmt.Sprintf("connecting to %s in the network namespace %s: ", tc.addr, tc.ns)
		if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.want) {
			t.Errorf("DialInNetNS(%q, %q) = %q, want %q...%s", tc.ns, tc.addr, msg, prefix, tc.want)
		}
	}
}

func TestDialInNetNSAsMakesTheSocketOfTheUID(t *testing.T) {
	ns := newNetNS(t)
	var inner net.Listener
	var err error
	ns.do(func() { inner, err = net.Listen("tcp4", "127.0.0.1:0") })
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialInNetNSAs(ctx, ns.path, inner.Addr().String(), 4321)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The namespace's table lists the dialing socket as uid 4321's.
	local := fmt.Sprintf(":%04X", c.LocalAddr().(*net.TCPAddr).Port)
	var table []byte
	ns.do(func() { table, err = os.ReadFile("/proc/thread-self/net/tcp") })
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(table), "\n") {
		f := strings.Fields(line)
		if len(f) > 7 && strings.HasSuffix(f[1], local) {
			found = true
			if f[7] != "4321" {
				t.Errorf("the dialing socket is uid %s's; want 4321's:\n%s", f[7], line)
			}
		}
	}
	if !found {
		t.Errorf("no socket with local port %s in the namespace's table:\n%s", local, table)
	}
	// The daemon's threads keep root's filesystem uid: a file made now
	// is root's.
	f, err := os.CreateTemp(t.TempDir(), "owner")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
		t.Errorf("a file made after the dial is not the daemon's: %v", err)
	}
}

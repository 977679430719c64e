package ports

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/connbound"
)

// dialAs connects to addr from a socket made with fsuid uid (the uid the
// kernel's TCP tables give a socket), or as the test itself for uid < 0.
func dialAs(t *testing.T, network, addr string, uid int) net.Conn {
	t.Helper()
	if uid < 0 {
		c, err := dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if os.Geteuid() != 0 {
		t.Skip("making a socket of another uid takes root")
	}
	done := make(chan net.Conn, 1)
	go func() {
		// The thread's fsuid changes: it ends with this goroutine.
		runtime.LockOSThread()
		unix.Setfsuid(uid)
		c, err := dial(network, addr)
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	c := <-done
	if c == nil {
		t.FailNow()
	}
	return c
}

// dial connects to addr; "tcp6" from an IPv6 socket to an IPv4-mapped
// address (which the net package will not do).
func dial(network, addr string) (net.Conn, error) {
	if network != "tcp6" {
		return net.DialTimeout(network, addr, 5*time.Second)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "tcp6")
	defer f.Close()
	if err := unix.Connect(fd, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}); err != nil {
		return nil, err
	}
	return net.FileConn(f)
}

func TestTCPPeerUIDNamesTheConnectingSocketsUID(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		network string
		uid     int
		want    uint32
	}{
		{"tcp4", -1, uint32(os.Geteuid())},
		{"tcp4", 4321, 4321},
		// A dual-stack socket: listed in tcp6, as ::ffff:127.0.0.1.
		{"tcp6", 4322, 4322},
	} {
		addr := ln.Addr().String()
		if tc.network == "tcp6" {
			addr = "[::ffff:127.0.0.1]:" + addr[len("127.0.0.1:"):]
		}
		c := dialAs(t, tc.network, addr, tc.uid)
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		uid, err := tcpPeerUID(s)
		if err != nil || uid != tc.want {
			t.Errorf("tcpPeerUID of a %s connection of uid %d: %d, %v; want %d", tc.network, tc.uid, uid, err, tc.want)
		}
		s.Close()
		c.Close()
	}
	// A client of another uid that sent and closed: its socket is in
	// FIN_WAIT2, which the tables list as uid 0's. It is no one's.
	c := dialAs(t, "tcp4", ln.Addr().String(), 4323)
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := c.Write([]byte("HELLO")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	time.Sleep(50 * time.Millisecond)
	if uid, err := tcpPeerUID(s); err == nil {
		t.Errorf("tcpPeerUID of a closed client's connection: uid %d; want no owner", uid)
	}
}

func TestListenOwnedUnixMakesTheOwnersSocketAndFollowsNoLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a socket to another uid takes root")
	}
	runtimeDir := t.TempDir()
	if err := os.Chmod(runtimeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(runtimeDir, "ports")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A link planted where the socket goes, to a file that must stay.
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "s.sock")); err != nil {
		t.Fatal(err)
	}
	ln, ino, err := listenOwnedUnix(runtimeDir, dir, "s.sock", 4321)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var st unix.Stat_t
	for path, want := range map[string]uint32{runtimeDir: 0o711, dir: 0o711} {
		if err := unix.Lstat(path, &st); err != nil || st.Mode&0o7777 != want {
			t.Errorf("%s: mode %o, %v; want %o", path, st.Mode&0o7777, err, want)
		}
	}
	path := filepath.Join(dir, "s.sock")
	if err := unix.Lstat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Mode&0o7777 != 0o600 || st.Uid != 4321 || st.Ino != ino {
		t.Errorf("%s: mode %o, uid %d, inode %d, %v; want a socket of uid 4321, mode 0600, inode %d", path, st.Mode, st.Uid, st.Ino, err, ino)
	}
	if err := unix.Lstat(victim, &st); err != nil || st.Mode&0o7777 != 0o644 || st.Uid != 0 {
		t.Errorf("the link's target changed: mode %o, uid %d, %v", st.Mode&0o7777, st.Uid, err)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("root connecting to the socket: %v", err)
	}
	c.Close()

	// Another socket in its place: not removed as this one's.
	if err := removeSocket(dir, "s.sock", ino+1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("removeSocket of another inode removed the socket: %v", err)
	}
	if err := removeSocket(dir, "s.sock", ino); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket after removeSocket: %v", err)
	}
}

// TestPortConnsCappedPerOwnerAndInAll: an owner's connections stop at
// MaxConnsPerOwner over all its ports, and everyone's at
// MaxConnsAll, whose last quarter only owners with fewer than
// connbound.FairShare take; each release gives its place back once.
func TestPortConnsCappedPerOwnerAndInAll(t *testing.T) {
	var tab portTable
	var releases []func()
	for range MaxConnsPerOwner {
		release, refusal := tab.admit(1000)
		if refusal != "" {
			t.Fatalf("connection %d of uid 1000 refused: %s", len(releases)+1, refusal)
		}
		releases = append(releases, release)
	}
	if _, refusal := tab.admit(1000); refusal == "" {
		t.Fatalf("connection %d of uid 1000 admitted", MaxConnsPerOwner+1)
	}
	releases[0]()
	releases[0]() // once only
	if _, refusal := tab.admit(1000); refusal != "" {
		t.Fatalf("after one release: %s", refusal)
	}
	if _, refusal := tab.admit(1000); refusal == "" {
		t.Fatal("a second release gave a second place back")
	}
	// Up to the reserve, the last owner with its fair share only.
	fill := func(uid uint32, n int) {
		for range n {
			if _, refusal := tab.admit(uid); refusal != "" {
				t.Fatalf("uid %d with %d open in all: %s", uid, tab.conns.Total(), refusal)
			}
		}
	}
	for uid := uint32(1); tab.conns.Total() < MaxConnsAll-(MaxConnsAll/4)-connbound.FairShare; uid++ {
		fill(uid, min(MaxConnsPerOwner, MaxConnsAll-(MaxConnsAll/4)-connbound.FairShare-tab.conns.Total()))
	}
	fill(50, connbound.FairShare)
	// The reserve: an owner with its fair share is refused, one with
	// fewer is not, until all are taken.
	if _, refusal := tab.admit(50); refusal == "" || !strings.Contains(refusal, "kept for owners with fewer") {
		t.Fatalf("uid 50 with %d, %d open in all: %q; want a refusal", connbound.FairShare, tab.conns.Total(), refusal)
	}
	for uid := uint32(100); tab.conns.Total() < MaxConnsAll; uid++ {
		fill(uid, min(connbound.FairShare, MaxConnsAll-tab.conns.Total()))
		if _, refusal := tab.admit(uid); tab.conns.Total() < MaxConnsAll && refusal == "" {
			t.Fatalf("uid %d took more than its fair share (%d) of the reserve", uid, connbound.FairShare)
		}
	}
	if _, refusal := tab.admit(5); refusal == "" || !strings.Contains(refusal, "all exposed ports") {
		t.Fatalf("past %d in all: %q; want a refusal", MaxConnsAll, refusal)
	}
}

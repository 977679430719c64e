package supervisor

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
)

// The sockets of exposed ports (ports.go): the unix socket only its owner
// may connect to, who made a loopback TCP connection, the copy both ways.

// splice copies between a and b both ways; each way's end is passed on
// as a half close. No byte either way for idle, or a failure, closes both.
func splice(a, b net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	one := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			src.SetReadDeadline(time.Now().Add(idle))
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				dst.SetWriteDeadline(time.Now().Add(idle))
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
				last.Store(time.Now().UnixNano())
			}
			switch {
			case err == nil:
				continue
			case errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle:
				continue // the other way is busy
			case errors.Is(err, io.EOF):
				if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
					return
				}
			}
			break
		}
		a.Close()
		b.Close()
	}
	done := make(chan struct{})
	go func() { defer close(done); one(b, a) }()
	one(a, b)
	<-done
}

// lineCount lets through at most 10 lines a minute, and counts the rest
// for the next line let through.
type lineCount struct {
	mu    sync.Mutex
	start time.Time
	lines int
	held  int
}

func (l *lineCount) allow() (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.start) >= time.Minute {
		l.start, l.lines = now, 0
	}
	if l.lines >= 10 {
		l.held++
		return 0, false
	}
	l.lines++
	held, l.held = l.held, 0
	return held, true
}

// tcpPeerUID is the uid of the socket at the far end of c, a connection
// accepted on a loopback listener: the one the kernel's TCP tables list
// with c's remote address as its local one and c's local address as its
// remote one. The tables are read as the calling thread's namespace has
// them, the daemon's (a thread in another one is locked to its goroutine).
func tcpPeerUID(c net.Conn) (uint32, error) {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return 0, errors.New("not a TCP connection")
	}
	peer, us := remote.AddrPort(), local.AddrPort()
	found := false
	var uid uint32
	for _, table := range []string{"/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"} {
		u, ok, err := socketUID(table, peer, us)
		if err != nil {
			return 0, err
		}
		if ok {
			if found && u != uid {
				return 0, fmt.Errorf("two sockets %s → %s of different uids", peer, us)
			}
			found, uid = true, u
		}
	}
	if !found {
		return 0, fmt.Errorf("no socket %s → %s in the TCP tables", peer, us)
	}
	return uid, nil
}

// socketUID finds in table (/proc/net/tcp or tcp6) the live socket from
// local to remote, and returns its uid.
func socketUID(table string, local, remote netip.AddrPort) (uint32, bool, error) {
	v6 := strings.HasSuffix(table, "6")
	f, err := os.Open(table)
	if err != nil {
		return 0, false, fmt.Errorf("reading the TCP table: %w", err)
	}
	defer f.Close()
	want := [2]string{procAddr(local, v6), procAddr(remote, v6)}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local rem st queues tr retrnsmt uid ...
		// Only an established socket with an inode has its owner's uid:
		// one in TIME_WAIT or FIN_WAIT2 (a client that sent and closed)
		// shows uid 0 and inode 0, and is no one's.
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[1] != want[0] || fields[2] != want[1] || fields[3] != "01" || fields[9] == "0" {
			continue
		}
		uid, err := strconv.ParseUint(fields[7], 10, 32)
		if err != nil {
			return 0, false, fmt.Errorf("reading the TCP table: uid %q", fields[7])
		}
		return uint32(uid), true, nil
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("reading the TCP table: %w", err)
	}
	return 0, false, nil
}

// procAddr is ap as /proc/net/tcp (or, v6, tcp6) writes it: each 32-bit
// word of the address in the host's byte order, in hex, then the port.
func procAddr(ap netip.AddrPort, v6 bool) string {
	var b []byte
	if a := ap.Addr(); v6 {
		x := a.As16()
		b = x[:]
	} else {
		x := a.Unmap().As4()
		b = x[:]
	}
	var sb strings.Builder
	for i := 0; i < len(b); i += 4 {
		fmt.Fprintf(&sb, "%08X", binary.NativeEndian.Uint32(b[i:]))
	}
	fmt.Fprintf(&sb, ":%04X", ap.Port())
	return sb.String()
}

// listenOwnedUnix listens on a unix socket at name in dir, owned by owner
// with mode 0600: only owner and root may connect. The directory is
// opened without following a link and the socket bound through that
// descriptor; whatever was at name is removed, never followed. It
// returns the socket's inode.
func listenOwnedUnix(runtimeDir, dir, name string, owner uint32) (_ net.Listener, ino uint64, err error) {
	path := filepath.Join(dir, name)
	dfd, err := portsDir(runtimeDir, dir)
	if err != nil {
		return nil, 0, err
	}
	defer unix.Close(dfd)
	if err := unix.Unlinkat(dfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, 0, fmt.Errorf("removing what is at %s: %w", path, err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("making the socket %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/%s", dfd, name)}); err != nil {
		return nil, 0, fmt.Errorf("binding the socket %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = unix.Unlinkat(dfd, name, 0)
		}
	}()
	// Bound and not listening yet, the socket refuses every connect
	// until its owner and mode are set.
	var st unix.Stat_t
	if err := unix.Fchownat(dfd, name, int(owner), 0, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, 0, fmt.Errorf("giving the socket %s to uid %d: %w", path, owner, err)
	}
	if err := unix.Fchmodat(dfd, name, 0o600, 0); err != nil {
		return nil, 0, fmt.Errorf("setting the mode of the socket %s: %w", path, err)
	}
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, 0, fmt.Errorf("reading the socket %s: %w", path, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		return nil, 0, fmt.Errorf("listening on the socket %s: %w", path, err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, 0, fmt.Errorf("listening on the socket %s: %w", path, err)
	}
	return ln, st.Ino, nil
}

// portsDir opens dir, the sockets' directory, made here (root's, 0711: no
// one lists whose sandboxes expose what)
// if need be. The runtime directory above it gets search permission for
// all (read stays the daemon's), so that owners reach their sockets.
func portsDir(runtimeDir, dir string) (int, error) {
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return -1, fmt.Errorf("making %s: %w", dir, err)
	}
	for _, d := range []string{runtimeDir, dir} {
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("opening %s: %w", d, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		mode := st.Mode&0o7777 | 0o011
		if d == dir {
			mode = 0o711
		}
		switch {
		case err != nil:
			err = fmt.Errorf("reading %s: %w", d, err)
		case st.Uid != uint32(os.Geteuid()):
			err = fmt.Errorf("%s is uid %d's, not the daemon's", d, st.Uid)
		case st.Mode&0o7777 != mode:
			if err = unix.Fchmod(fd, mode); err != nil {
				err = fmt.Errorf("setting the mode of %s: %w", d, err)
			}
		}
		if d == dir && err == nil {
			return fd, nil
		}
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
	}
	panic("unreachable")
}

// removeSocket removes the socket at name in dir, if it is the socket of
// inode ino (0: any socket).
func removeSocket(dir, name string, ino uint64) error {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || (ino != 0 && st.Ino != ino) {
		return nil // not ours (any more)
	}
	return unix.Unlinkat(dfd, name, 0)
}

// unixPeerUID is the uid of the process that connected c, a unix socket
// connection (SO_PEERCRED).
func unixPeerUID(c net.Conn) (uint32, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, fmt.Errorf("not a unix socket connection")
	}
	cred, err := nsinit.PeerCred(uc)
	if err != nil {
		return 0, fmt.Errorf("reading the peer's credentials: %w", err)
	}
	return cred.Uid, nil
}

package ports

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
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
// Each way reads again only once dst took what it read: a side that does
// not read stops the other's writes (the queues between are pinned small,
// connbound.Pin), instead of the daemon's memory taking them.
func splice(a, b net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	one := func(dst, src net.Conn) {
		buf := make([]byte, copyBuffer)
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
	// until its owner and mode are set. Its group stays the daemon's
	// (root's, as before it was named: 0), which mode 0600 gives nothing;
	// a test that is not root can give a socket to itself.
	var st unix.Stat_t
	if err := unix.Fchownat(dfd, name, int(owner), -1, unix.AT_SYMLINK_NOFOLLOW); err != nil {
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

package ports

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// The owner of a loopback TCP connection's far end, asked of the kernel
// for that one socket (NETLINK_SOCK_DIAG, inet_diag): reading the whole
// TCP tables (/proc/net/tcp) costs milliseconds per connection, and more
// as they fill. x/sys/unix has the constants but not inet_diag's structs:
// they are written out here (linux/inet_diag.h).

const (
	sizeofInetDiagSockID = 48
	sizeofInetDiagReqV2  = 8 + sizeofInetDiagSockID
	sizeofInetDiagMsg    = 4 + sizeofInetDiagSockID + 20
	tcpEstablished       = 1
)

// tcpPeerUID is the uid of the socket at the far end of c, a connection
// accepted on a loopback listener: the established socket whose local
// address is c's remote one and whose remote address is c's local one,
// in the daemon's network namespace. A socket no longer established (a
// client that sent and closed, in FIN_WAIT2, shows no owner) is no one's.
func tcpPeerUID(c net.Conn) (uint32, error) {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return 0, errors.New("not a TCP connection")
	}
	peer, us := remote.AddrPort(), local.AddrPort()
	// An IPv4 peer's socket is AF_INET, or AF_INET6 speaking through a
	// mapped address (a dual-stack socket).
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		uid, ok, err := diagUID(family, peer, us)
		if err != nil {
			return 0, err
		}
		if ok {
			return uid, nil
		}
	}
	return 0, fmt.Errorf("no established socket %s → %s", peer, us)
}

// diagUID asks the kernel for the TCP socket of family from src to dst.
func diagUID(family uint8, src, dst netip.AddrPort) (uint32, bool, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, false, fmt.Errorf("asking the kernel for a socket's owner: %w", err)
	}
	defer unix.Close(fd)
	req := make([]byte, unix.SizeofNlMsghdr+sizeofInetDiagReqV2)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // sequence
	r := req[unix.SizeofNlMsghdr:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 1<<tcpEstablished)
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	putDiagAddr(id[4:20], family, src.Addr())
	putDiagAddr(id[20:36], family, dst.Addr())
	ne.PutUint32(id[40:], ^uint32(0)) // no cookie: find it by its addresses
	ne.PutUint32(id[44:], ^uint32(0))
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, false, fmt.Errorf("asking the kernel for a socket's owner: %w", err)
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, false, fmt.Errorf("asking the kernel for a socket's owner: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return 0, false, fmt.Errorf("reading the kernel's answer on a socket's owner: %w", err)
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if errno := unix.Errno(-int32(ne.Uint32(m.Data))); errno == unix.ENOENT {
					return 0, false, nil // not of this family, or not established
				} else if errno != 0 {
					return 0, false, fmt.Errorf("asking the kernel for a socket's owner: %w", errno)
				}
			}
			return 0, false, nil
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(m.Data) < sizeofInetDiagMsg {
				return 0, false, errors.New("the kernel's answer on a socket's owner is short")
			}
			state, uid, inode := m.Data[1], ne.Uint32(m.Data[4+sizeofInetDiagSockID+12:]), ne.Uint32(m.Data[4+sizeofInetDiagSockID+16:])
			if state != tcpEstablished || inode == 0 {
				return 0, false, nil
			}
			return uid, true, nil
		}
	}
	return 0, false, nil
}

// putDiagAddr writes a as inet_diag's 16 bytes for family: an IPv4
// address in the first 4; for AF_INET6 all 16, an IPv4 one mapped.
func putDiagAddr(b []byte, family uint8, a netip.Addr) {
	if family == unix.AF_INET {
		x := a.Unmap().As4()
		copy(b, x[:])
		return
	}
	x := a.As16()
	copy(b, x[:])
}

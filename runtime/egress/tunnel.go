package egress

import (
	"bufio"
	"io"
	"net"
	"sync"

	"github.com/sandboxd/sandboxd/internal/connbound"
)

// tunnel tells the client its CONNECT succeeded, then copies bytes both
// ways between it (reading through br, which may hold bytes it sent early)
// and up until both directions end.
func tunnel(c net.Conn, br *bufio.Reader, up net.Conn) {
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { copyHalf(up, br, c) })
	wg.Go(func() { copyHalf(c, up, up) })
	wg.Wait()
}

// copyHalf copies src, read from the connection from, to dst. At the end
// of src it shuts dst's writing side, passing the end on while the other
// direction goes on; on an error it closes both connections, ending the
// other direction too. It reads src again only once dst took what it
// read: a side that does not read stops the other's writes, held in
// queues pinned small (connbound.Pin), not in the daemon's memory.
func copyHalf(dst net.Conn, src io.Reader, from net.Conn) {
	// Never io.Copy: through src's WriteTo (a bufio.Reader's) it would
	// copy with a buffer of its own size.
	_, err := connbound.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
	from.Close()
}

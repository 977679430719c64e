package egress

import (
	"bufio"
	"io"
	"net"
	"sync"
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
// other direction too.
func copyHalf(dst net.Conn, src io.Reader, from net.Conn) {
	_, err := io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
	from.Close()
}

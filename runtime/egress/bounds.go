package egress

// Caps on the tunnels and requests of all the sandboxes' proxies, beside
// each sandbox's own (DefaultMaxConns): a Proxy with a Conns counter
// refuses one more past them at once, 503, as past its own cap.
const (
	MaxConnsPerOwner = 256  // open through the proxies of one owner's sandboxes
	MaxConnsAll      = 1024 // open through all the proxies
)

// What the daemon holds for a connection through a proxy, at most
// (measured in TestEgressTunnelsHoldBoundedMemory). Each way is copied
// by a read only once the other side took the last (backpressure,
// connbound.Copy), so a sandbox that does not read stops its origin's
// writes, and each connection holds:
//   - its two sockets (the sandbox's accepted one, the origin's dialed
//     one), each with a receive and a send queue pinned to
//     connbound.SocketBuffer (the kernel doubles it: 64 KiB a queue,
//     256 KiB the four; no autotuning);
//   - the copy's buffer each way, 2 × connbound.CopyBuffer = 32 KiB; the
//     request's reader (4 KiB) and, while it is read, its header (at most
//     maxHeaderBytes, 64 KiB; a plain request's response header as much);
//   - four goroutines (the connection, two copies, its idle watch) and
//     the sockets' structures, about 40 KiB; the Go side up to twice its
//     live size in the daemon's RSS between two garbage collections;
//
// so ConnMemory (448 KiB) and 2 descriptors. Per owner
// (MaxConnsPerOwner): 112 MiB and 512 descriptors; in all (MaxConnsAll):
// 448 MiB and 2,048 descriptors. Beside them each proxy holds its
// listener (1 descriptor) and its accept loop.
const ConnMemory = 448 << 10

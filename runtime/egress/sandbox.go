package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/sandboxd/sandboxd/internal/connbound"
)

// Sandbox is one sandbox's proxy as the daemon serves it: on addr of the
// loopback of the network namespace of the process pid (its init), with
// its owner's connections counted in conns.
type Sandbox struct {
	ID    string
	Owner uint32
	Allow []string
	PID   int
	Addr  string
	Conns *connbound.Counter
	Log   *slog.Logger
}

// ServeSandbox serves sb's proxy in the background until stop is called
// (stop waits for it to end).
func ServeSandbox(sb Sandbox) (stop func(), err error) {
	allow, err := ParseAllowlist(sb.Allow)
	if err != nil {
		return nil, err
	}
	// The sandbox's sockets pinned small before their handshake, as the
	// origins' are (ownerDialer): what a tunnel holds is bounded
	// (ConnMemory).
	ln, err := ListenInNetNSWith(fmt.Sprintf("/proc/%d/ns/net", sb.PID), sb.Addr, connbound.SetBuffers)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	closed := make(chan struct{})
	p := &Proxy{Allow: allow, Log: sb.Log, Sandbox: sb.ID, Dialer: ownerDialer{uid: sb.Owner}, Conns: sb.Conns, Owner: sb.Owner}
	go func() {
		defer close(closed)
		if err := p.Serve(ctx, ln); err != nil {
			sb.Log.Error("the allowlist proxy stopped", "SANDBOX_ID", sb.ID, "error", err)
		}
	}()
	return func() { cancel(); <-closed }, nil
}

// ownerDialer dials for a sandbox's proxy with sockets of the sandbox's
// owner: a service on the host's loopback that an allowlist names
// (another sandbox's exposed TCP port, which admits its owner's sockets
// alone) sees the owner, not the root daemon.
type ownerDialer struct{ uid uint32 }

func (d ownerDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return DialInNetNSAsWith(ctx, "/proc/self/ns/net", addr, d.uid, connbound.SetBuffers)
}

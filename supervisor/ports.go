package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/connbound"
	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/journal"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Ports a sandbox exposes on the host (ExposePort): the daemon listens on
// a unix socket only the sandbox's owner (and root) may connect to and,
// if asked, on a loopback TCP port whose connections it checks the same
// way, and carries each connection to that port on the sandbox's own
// loopback, whatever its network policy. The record keeps the ports, so
// that the daemon's next start exposes them again (the unix path stays,
// a TCP port gets a new number).
const (
	MaxPorts             = 16              // exposed by one sandbox at once
	MaxPortConns         = 64              // open through one port at once
	MaxPortConnsPerOwner = 256             // through all the ports of one owner's sandboxes
	MaxPortConnsAll      = 1024            // through all exposed ports
	PortIdleTimeout      = 5 * time.Minute // a connection with no byte either way is closed
	portDialTimeout      = 10 * time.Second
)

// What the daemon holds for the connections through exposed ports, at
// most (measured in TestHostilePortsHoldBoundedMemory and make bench).
// The copy does not read from one side while the other does not take
// what it read (backpressure), so each connection holds:
//   - its two sockets (the client's accepted one, and the one dialed in
//     the sandbox), each with a receive and a send queue pinned to
//     portSocketBuffer (the kernel doubles it for its overhead: 64 KiB a
//     queue, 256 KiB the four; no autotuning);
//   - the copy's buffer each way, 2 × portCopyBuffer = 32 KiB, two
//     goroutines and the sockets' structures: about 56 KiB live, up to
//     twice that in the daemon's RSS between two garbage collections;
//
// so PortConnMemory (384 KiB) and 2 descriptors. Per owner
// (MaxPortConnsPerOwner): 96 MiB and 512 descriptors; in all
// (MaxPortConnsAll): 384 MiB and 2,048 descriptors. Beside them each
// exposed port holds its listeners (1 descriptor, 2 with TCP: at most
// max_sandboxes × MaxPorts × 2, 8,192 with the default 256 sandboxes),
// a goroutine each, and about 15 KiB of RSS (measured: 7.5 MiB for 512).
const PortConnMemory = 384 << 10

// The sizes are internal/connbound's, which the egress proxy's tunnels
// use too.
const (
	portSocketBuffer = connbound.SocketBuffer // SO_RCVBUF and SO_SNDBUF asked of each socket
	portCopyBuffer   = connbound.CopyBuffer   // the copy's buffer, each way
)

// portsDir holds the exposed ports' unix sockets, <id>-<port>.sock.
func (s *Supervisor) portsDir() string { return filepath.Join(s.cfg.RuntimeDir, "ports") }

func portSocketName(id string, port uint16) string { return fmt.Sprintf("%s-%d.sock", id, port) }

type portKey struct {
	id   string
	port uint16
}

// exposedPort is one port being served: its listeners, and the
// connections through them, which end with its context.
type exposedPort struct {
	key     portKey
	owner   uint32
	path    string // of the unix socket
	ino     uint64 // the socket's inode: only it is removed at the end
	tcpAddr string // "" without TCP
	lns     []net.Listener
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // accept loops and connections
	slots   chan struct{}  // MaxPortConns
	refused lineCount
}

// address is what ExposePort answers: the TCP address where there is one.
func (e *exposedPort) address() string {
	if e.tcpAddr != "" {
		return e.tcpAddr
	}
	return e.path
}

type portTable struct {
	mu    sync.Mutex
	m     map[portKey]*exposedPort
	conns connbound.Counter // open connections by owner and in all, through all ports
}

// admit counts a connection through a port of owner's, or, past
// MaxPortConnsPerOwner, MaxPortConnsAll, or into the last quarter of it
// with connbound.FairShare of its own, says why it is refused. release
// uncounts it (once, however often it is called).
func (t *portTable) admit(owner uint32) (release func(), refusal string) {
	release, n, own, why := t.conns.Admit(owner, MaxPortConnsPerOwner, MaxPortConnsAll)
	switch why {
	case connbound.Admitted:
		return release, ""
	case connbound.OwnerFull:
		return nil, fmt.Sprintf("too many connections: %d open through the ports of uid %d's sandboxes, the most an owner may have", own, owner)
	case connbound.Reserved:
		return nil, fmt.Sprintf("too many connections: %d open through all exposed ports, %d through uid %d's: the last %d are kept for owners with fewer than %d",
			n, own, owner, MaxPortConnsAll/4, connbound.FairShare)
	default:
		return nil, fmt.Sprintf("too many connections: %d open through all exposed ports, the most the daemon holds", n)
	}
}

func (t *portTable) get(k portKey) *exposedPort {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[k]
}

func (t *portTable) add(e *exposedPort) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[portKey]*exposedPort{}
	}
	t.m[e.key] = e
}

// take removes the ports for which match holds and returns them.
func (t *portTable) take(match func(portKey) bool) []*exposedPort {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*exposedPort
	for k, e := range t.m {
		if match(k) {
			out = append(out, e)
			delete(t.m, k)
		}
	}
	return out
}

// ExposePort exposes port of sandbox id on the host and returns where:
// the unix socket's path, or the TCP address when tcp is asked.
func (s *Supervisor) ExposePort(ctx context.Context, id string, port uint16, tcp bool) (addr string, err error) {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return "", err
	}
	defer func() { s.auditPort(ctx, "port-expose", rec, port, tcp, err) }()
	what := fmt.Sprintf("exposing port %d of sandbox %s", port, id)
	if port == 0 {
		return "", fmt.Errorf("%s: a port is 1 to 65535: %w", what, ErrInvalid)
	}
	if cur := s.current(rec); (cur.State != state.Ready && cur.State != state.Running) || s.worlds.get(id) == nil {
		return "", fmt.Errorf("%s: it is %s: %w", what, cur.State, ErrWrongState)
	}
	if slices.ContainsFunc(rec.Ports, func(p state.Port) bool { return p.Port == port }) {
		where := filepath.Join(s.portsDir(), portSocketName(id, port))
		if e := s.ports.get(portKey{id, port}); e != nil {
			where = e.address()
		}
		return "", fmt.Errorf("%s: it is exposed already, at %s (close it first to expose it otherwise): %w", what, where, ErrExists)
	}
	if len(rec.Ports) >= MaxPorts {
		return "", fmt.Errorf("%s: it exposes %d ports, the most a sandbox may: %w", what, len(rec.Ports), ErrLimitReached)
	}
	// Recorded first: a crash after it leaves a port the daemon's next
	// start exposes, never a socket no record names.
	p := state.Port{Port: port, TCP: tcp}
	if rec, err = s.cfg.Store.Update(id, func(r *state.Record) error { r.Ports = append(r.Ports, p); return nil }); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	e, err := s.openPort(rec, p)
	if err != nil {
		if _, uerr := s.cfg.Store.Update(id, func(r *state.Record) error {
			r.Ports = slices.DeleteFunc(r.Ports, func(q state.Port) bool { return q.Port == port })
			return nil
		}); uerr != nil {
			s.log.Warn("forgetting a port that could not be exposed", "SANDBOX_ID", id, "port", port, "error", uerr)
		}
		return "", fmt.Errorf("%s: %w", what, err)
	}
	s.log.Info("port exposed", "SANDBOX_ID", id, "ACTION", "port-expose", "CALLER_UID", uidField(ctx),
		"port", port, "socket", e.path, "tcp", e.tcpAddr)
	return e.address(), nil
}

// ClosePort stops exposing port of sandbox id: its listeners close, and
// the connections through them.
func (s *Supervisor) ClosePort(ctx context.Context, id string, port uint16) (err error) {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return err
	}
	defer func() { s.auditPort(ctx, "port-close", rec, port, false, err) }()
	if !slices.ContainsFunc(rec.Ports, func(p state.Port) bool { return p.Port == port }) {
		return fmt.Errorf("closing port %d of sandbox %s: it is not exposed: %w", port, id, ErrInvalid)
	}
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error {
		r.Ports = slices.DeleteFunc(r.Ports, func(p state.Port) bool { return p.Port == port })
		return nil
	})
	if err != nil {
		return fmt.Errorf("closing port %d of sandbox %s: %w", port, id, err)
	}
	for _, e := range s.ports.take(func(k portKey) bool { return k == portKey{id, port} }) {
		s.closePort(e)
	}
	s.log.Info("port closed", "SANDBOX_ID", id, "ACTION", "port-close", "CALLER_UID", uidField(ctx), "port", port)
	return nil
}

func (s *Supervisor) auditPort(ctx context.Context, action string, rec state.Record, port uint16, tcp bool, err error) {
	what := fmt.Sprintf("port %d", port)
	if tcp {
		what += " tcp"
	}
	s.auditEntry(ctx, audit.Entry{Action: action, Command: what}, rec, err)
}

// restorePorts exposes again the ports rec's record keeps that are not
// served (after the daemon's start). A port that cannot be is logged and
// stays recorded: ClosePort forgets it.
func (s *Supervisor) restorePorts(rec state.Record) {
	for _, p := range rec.Ports {
		if s.ports.get(portKey{rec.ID, p.Port}) != nil {
			continue
		}
		e, err := s.openPort(rec, p)
		if err != nil {
			s.log.Warn("exposing a sandbox's port again", "SANDBOX_ID", rec.ID, "port", p.Port, "error", err)
			continue
		}
		s.log.Info("port exposed again", "SANDBOX_ID", rec.ID, "port", p.Port, "socket", e.path, "tcp", e.tcpAddr)
	}
}

// closePorts stops exposing every port of sandbox rec (destroyed), and
// removes the sockets a crash may have left of the ports it recorded.
func (s *Supervisor) closePorts(rec state.Record) {
	for _, e := range s.ports.take(func(k portKey) bool { return k.id == rec.ID }) {
		s.closePort(e)
	}
	for _, p := range rec.Ports {
		_ = removeSocket(s.portsDir(), portSocketName(rec.ID, p.Port), 0)
	}
}

// closeAllPorts stops exposing every port, at the daemon's end; the
// records keep them for its next start.
func (s *Supervisor) closeAllPorts() {
	for _, e := range s.ports.take(func(portKey) bool { return true }) {
		s.closePort(e)
	}
}

// openPort listens for port p of sandbox rec and serves it.
func (s *Supervisor) openPort(rec state.Record, p state.Port) (*exposedPort, error) {
	dir := s.portsDir()
	name := portSocketName(rec.ID, p.Port)
	ln, ino, err := listenOwnedUnix(s.cfg.RuntimeDir, dir, name, rec.Owner)
	if err != nil {
		return nil, err
	}
	e := &exposedPort{key: portKey{rec.ID, p.Port}, owner: rec.Owner, path: filepath.Join(dir, name), ino: ino,
		lns: []net.Listener{ln}, slots: make(chan struct{}, MaxPortConns)}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if p.TCP {
		// Accepted sockets take the listener's buffers, pinned before
		// the handshake that sizes the window.
		lc := net.ListenConfig{Control: connbound.ListenControl}
		tln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			s.closePort(e)
			return nil, fmt.Errorf("listening on a loopback TCP port: %w", err)
		}
		e.lns, e.tcpAddr = append(e.lns, tln), tln.Addr().String()
	}
	for i, ln := range e.lns {
		e.wg.Add(1)
		go s.servePort(e, ln, i > 0)
	}
	s.ports.add(e)
	return e, nil
}

// closePort closes e's listeners and connections, waits for them, and
// removes its socket.
func (s *Supervisor) closePort(e *exposedPort) {
	e.cancel()
	for _, ln := range e.lns {
		ln.Close()
	}
	e.wg.Wait()
	if err := removeSocket(filepath.Dir(e.path), filepath.Base(e.path), e.ino); err != nil {
		s.log.Warn("removing an exposed port's socket", "SANDBOX_ID", e.key.id, "path", e.path, "error", err)
	}
}

// servePort accepts connections on ln and forwards each; on the TCP
// listener (checkPeer), only those of sockets the owner made.
func (s *Supervisor) servePort(e *exposedPort, ln net.Listener, checkPeer bool) {
	defer e.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if e.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: wait rather than spin.
			s.log.Warn("accepting a connection to an exposed port", "SANDBOX_ID", e.key.id, "port", e.key.port, "error", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		select {
		case e.slots <- struct{}{}:
		default:
			s.refusePort(e, c, fmt.Sprintf("too many connections: %d open, the most a port may have", MaxPortConns))
			continue
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			defer func() { <-e.slots }()
			// The check reads the TCP tables: here, not in the accept
			// loop, which a crowded table would slow for everyone. Only
			// the owner's sockets: root reaches the unix socket, and a
			// root socket on loopback may be the daemon's own (the egress
			// proxy's, for another sandbox).
			if checkPeer {
				uid, err := tcpPeerUID(c)
				if err == nil && uid != e.owner {
					err = fmt.Errorf("the connecting socket is uid %d's, not the owner's (%d)", uid, e.owner)
				}
				if err != nil {
					s.refusePort(e, c, err.Error())
					return
				}
			} else if uid, err := unixPeerUID(c); err != nil || uid != e.owner && uid != 0 {
				// The socket is the owner's, who may open its mode: the
				// peer is asked too.
				s.refusePort(e, c, fmt.Sprintf("the connecting process is uid %d's, not the owner's (%d) or root's (%v)", uid, e.owner, err))
				return
			}
			// Counted once the peer is known: another user's connections
			// to a TCP port never use up the owner's.
			release, refusal := s.ports.admit(e.owner)
			if refusal != "" {
				s.refusePort(e, c, refusal)
				return
			}
			defer release()
			if err := connbound.Pin(c); err != nil {
				s.refusePort(e, c, err.Error())
				return
			}
			s.forward(e, c)
		}()
	}
}

func (s *Supervisor) refusePort(e *exposedPort, c net.Conn, reason string) {
	c.Close()
	if held, ok := e.refused.allow(); ok {
		// Any local user may connect: these lines share one budget,
		// apart from the daemon's own.
		s.log.Warn("exposed port refused a connection", "SANDBOX_ID", e.key.id, "port", e.key.port,
			"from", c.RemoteAddr().String(), "reason", reason, "refused_unlogged", held, journal.BudgetKey, "exposed-port-refusals")
	}
}

// forward carries c to e's port in the sandbox's network namespace until
// either side ends, the connection is idle for PortIdleTimeout, or the
// port is closed.
func (s *Supervisor) forward(e *exposedPort, c net.Conn) {
	defer c.Close()
	if err := s.wake(e.ctx, e.key.id); err != nil {
		s.log.Warn("exposed port: waking its sandbox", "SANDBOX_ID", e.key.id, "port", e.key.port, "error", err)
		return
	}
	defer s.touch(e.key.id)
	ns, err := s.sandboxNetNS(e.key.id)
	if err != nil {
		s.log.Debug("exposed port: no sandbox to forward to", "SANDBOX_ID", e.key.id, "port", e.key.port, "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, portDialTimeout)
	// With network=host the namespace is the host's own: the port is the
	// host's 127.0.0.1:PORT, where that sandbox's server is, and which
	// the owner reaches anyway. The socket is the owner's, not root's,
	// so that no check of a peer's uid there (another sandbox's exposed
	// TCP port) takes the owner for root.
	in, err := egress.DialInNetNSAsWith(ctx, fmt.Sprintf("/proc/self/fd/%d", ns.Fd()), fmt.Sprintf("127.0.0.1:%d", e.key.port), e.owner, connbound.SetBuffers)
	cancel()
	ns.Close()
	if err != nil {
		s.log.Debug("exposed port: the sandbox's port does not answer", "SANDBOX_ID", e.key.id, "port", e.key.port, "error", err)
		return
	}
	defer in.Close()
	stop := context.AfterFunc(e.ctx, func() { c.Close(); in.Close() })
	defer stop()
	splice(c, in, PortIdleTimeout)
}

// sandboxNetNS opens the network namespace of sandbox id's init. A pid
// whose init died may be another process's by now: the pid must still be
// in the sandbox's scope once its namespace is open.
func (s *Supervisor) sandboxNetNS(id string) (*os.File, error) {
	w := s.worlds.get(id)
	if w == nil {
		return nil, fmt.Errorf("sandbox %s is not running", id)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", w.pid))
	if err != nil {
		return nil, fmt.Errorf("opening the network namespace of sandbox %s: %w", id, err)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", w.pid))
	if err != nil || !strings.Contains(string(cg), "/"+unitName(id)+"\n") && !strings.Contains(string(cg), "/"+unitName(id)+"/") {
		f.Close()
		return nil, fmt.Errorf("the init of sandbox %s (pid %d) is gone", id, w.pid)
	}
	return f, nil
}

package ports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/connbound"
	"github.com/sandboxd/sandboxd/runtime/egress"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/journal"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Ports a sandbox exposes on the host (Expose): the daemon listens on
// a unix socket only the sandbox's owner (and root) may connect to and,
// if asked, on a loopback TCP port whose connections it checks the same
// way, and carries each connection to that port on the sandbox's own
// loopback, whatever its network policy. The record keeps the ports, so
// that the daemon's next start exposes them again (the unix path stays,
// a TCP port gets a new number).
const (
	Max              = 16              // ports exposed by one sandbox at once
	MaxConns         = 64              // open through one port at once
	MaxConnsPerOwner = 256             // through all the ports of one owner's sandboxes
	MaxConnsAll      = 1024            // through all exposed ports
	IdleTimeout      = 5 * time.Minute // a connection with no byte either way is closed
	dialTimeout      = 10 * time.Second
)

// What the daemon holds for the connections through exposed ports, at
// most (measured in TestHostilePortsHoldBoundedMemory and make bench).
// The copy does not read from one side while the other does not take
// what it read (backpressure), so each connection holds:
//   - its two sockets (the client's accepted one, and the one dialed in
//     the sandbox), each with a receive and a send queue pinned to
//     socketBuffer (the kernel doubles it for its overhead: 64 KiB a
//     queue, 256 KiB the four; no autotuning);
//   - the copy's buffer each way, 2 × copyBuffer = 32 KiB, two
//     goroutines and the sockets' structures: about 56 KiB live, up to
//     twice that in the daemon's RSS between two garbage collections;
//
// so ConnMemory (384 KiB) and 2 descriptors. Per owner
// (MaxConnsPerOwner): 96 MiB and 512 descriptors; in all
// (MaxConnsAll): 384 MiB and 2,048 descriptors. Beside them each
// exposed port holds its listeners (1 descriptor, 2 with TCP: at most
// max_sandboxes × Max × 2, 8,192 with the default 256 sandboxes),
// a goroutine each, and about 15 KiB of RSS (measured: 7.5 MiB for 512).
const ConnMemory = 384 << 10

// The sizes are internal/connbound's, which the egress proxy's tunnels
// use too.
const (
	socketBuffer = connbound.SocketBuffer // SO_RCVBUF and SO_SNDBUF asked of each socket
	copyBuffer   = connbound.CopyBuffer   // the copy's buffer, each way
)

// Config is what the daemon's configuration says of the ports.
type Config struct {
	// RuntimeDir is the daemon's runtime directory (the core's
	// Config.RuntimeDir); the sockets are in its ports/.
	RuntimeDir string
}

// Ports are the ports the sandboxes expose on the host: the table of
// those served, and what their connections hold.
type Ports struct {
	h   supervisor.Host
	cfg Config
	dir string // the sockets', <id>-<port>.sock
	t   portTable
}

// New makes the ports' room over h: the ports a sandbox's record keeps
// are exposed again once it runs (after the daemon's start; a rollback
// or a rebase kept them open: each connection finds the new init), closed
// as it is destroyed, and all closed at the daemon's end.
func New(h supervisor.Host, cfg Config) *Ports {
	p := &Ports{h: h, cfg: cfg, dir: filepath.Join(cfg.RuntimeDir, "ports")}
	hk := h.Hooks()
	hk.Started.Add(func(_ context.Context, st supervisor.Started) { p.restore(st.Record) })
	hk.Destroying.Add(func(_ context.Context, rec state.Record) { p.closeSandbox(rec) })
	hk.Close.Add(p.closeAll)
	hk.Busy.Add(func(_ context.Context, id string) bool { return p.t.busy(id) })
	return p
}

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
	unit    string // the sandbox's scope, that its init must still be in
	path    string // of the unix socket
	ino     uint64 // the socket's inode: only it is removed at the end
	tcpAddr string // "" without TCP
	lns     []net.Listener
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup // accept loops and connections
	slots   chan struct{}  // MaxConns
	refused lineCount
}

// address is what Expose answers: the TCP address where there is one.
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
// MaxConnsPerOwner, MaxConnsAll, or into the last quarter of it
// with connbound.FairShare of its own, says why it is refused. release
// uncounts it (once, however often it is called).
func (t *portTable) admit(owner uint32) (release func(), refusal string) {
	release, n, own, why := t.conns.Admit(owner, MaxConnsPerOwner, MaxConnsAll)
	switch why {
	case connbound.Admitted:
		return release, ""
	case connbound.OwnerFull:
		return nil, fmt.Sprintf("too many connections: %d open through the ports of uid %d's sandboxes, the most an owner may have", own, owner)
	case connbound.Reserved:
		return nil, fmt.Sprintf("too many connections: %d open through all exposed ports, %d through uid %d's: the last %d are kept for owners with fewer than %d",
			n, own, owner, MaxConnsAll/4, connbound.FairShare)
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

// busy says whether a connection is open through a port of sandbox id.
func (t *portTable) busy(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.m {
		if k.id == id && len(e.slots) > 0 {
			return true
		}
	}
	return false
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

// Expose exposes port of sandbox id on the host and returns where: the
// unix socket's path, or the TCP address when tcp is asked.
func (p *Ports) Expose(ctx context.Context, id string, port uint16, tcp bool) (addr string, err error) {
	defer p.h.Lock(id)()
	st := p.h.Store()
	// The record as it is now: a live sandbox whose init is gone is
	// stopped, though its record says otherwise.
	sb, err := p.h.Sandbox(ctx, id)
	if err != nil {
		return "", err
	}
	rec := sb.Record
	defer func() { p.audit(ctx, "port-expose", rec, port, tcp, err) }()
	what := fmt.Sprintf("exposing port %d of sandbox %s", port, id)
	if port == 0 {
		return "", fmt.Errorf("%s: a port is 1 to 65535: %w", what, supervisor.ErrInvalid)
	}
	if rec.State == state.Stopped {
		return "", fmt.Errorf("%s: %w: start it with sandboxctl start %s", what, supervisor.ErrStopped, id)
	}
	if _, runs := p.h.InitPID(id); (rec.State != state.Ready && rec.State != state.Running) || !runs {
		return "", fmt.Errorf("%s: it is %s: %w", what, rec.State, supervisor.ErrWrongState)
	}
	if slices.ContainsFunc(rec.Ports, func(q state.Port) bool { return q.Port == port }) {
		where := filepath.Join(p.dir, portSocketName(id, port))
		if e := p.t.get(portKey{id, port}); e != nil {
			where = e.address()
		}
		return "", fmt.Errorf("%s: it is exposed already, at %s (close it first to expose it otherwise): %w", what, where, supervisor.ErrExists)
	}
	if len(rec.Ports) >= Max {
		return "", fmt.Errorf("%s: it exposes %d ports, the most a sandbox may: %w", what, len(rec.Ports), supervisor.ErrLimitReached)
	}
	// Recorded first: a crash after it leaves a port the daemon's next
	// start exposes, never a socket no record names.
	np := state.Port{Port: port, TCP: tcp}
	if rec, err = st.Update(id, func(r *state.Record) error { r.Ports = append(r.Ports, np); return nil }); err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	e, err := p.open(rec, np)
	if err != nil {
		if _, uerr := st.Update(id, func(r *state.Record) error {
			r.Ports = slices.DeleteFunc(r.Ports, func(q state.Port) bool { return q.Port == port })
			return nil
		}); uerr != nil {
			p.h.Log().Warn("forgetting a port that could not be exposed", "SANDBOX_ID", id, "port", port, "error", uerr)
		}
		return "", fmt.Errorf("%s: %w", what, err)
	}
	p.h.Log().Info("port exposed", "SANDBOX_ID", id, "ACTION", "port-expose", "CALLER_UID", uidField(ctx),
		"port", port, "socket", e.path, "tcp", e.tcpAddr)
	return e.address(), nil
}

// Close stops exposing port of sandbox id: its listeners close, and the
// connections through them.
func (p *Ports) Close(ctx context.Context, id string, port uint16) (err error) {
	defer p.h.Lock(id)()
	st := p.h.Store()
	rec, err := st.Get(id)
	if err != nil {
		return err
	}
	defer func() { p.audit(ctx, "port-close", rec, port, false, err) }()
	if !slices.ContainsFunc(rec.Ports, func(q state.Port) bool { return q.Port == port }) {
		return fmt.Errorf("closing port %d of sandbox %s: it is not exposed: %w", port, id, supervisor.ErrInvalid)
	}
	rec, err = st.Update(id, func(r *state.Record) error {
		r.Ports = slices.DeleteFunc(r.Ports, func(q state.Port) bool { return q.Port == port })
		return nil
	})
	if err != nil {
		return fmt.Errorf("closing port %d of sandbox %s: %w", port, id, err)
	}
	for _, e := range p.t.take(func(k portKey) bool { return k == portKey{id, port} }) {
		p.closePort(e)
	}
	p.h.Log().Info("port closed", "SANDBOX_ID", id, "ACTION", "port-close", "CALLER_UID", uidField(ctx), "port", port)
	return nil
}

func (p *Ports) audit(ctx context.Context, action string, rec state.Record, port uint16, tcp bool, err error) {
	what := fmt.Sprintf("port %d", port)
	if tcp {
		what += " tcp"
	}
	p.h.AuditEntry(ctx, audit.Entry{Action: action, Command: what}, rec, err)
}

// uidField is the caller's uid for the journal, or "daemon".
func uidField(ctx context.Context) string {
	if uid, ok := supervisor.CallerUID(ctx); ok {
		return fmt.Sprint(uid)
	}
	return "daemon"
}

// restore exposes again the ports rec's record keeps that are not
// served (after the daemon's start). A port that cannot be is logged and
// stays recorded: Close forgets it.
func (p *Ports) restore(rec state.Record) {
	for _, q := range rec.Ports {
		if p.t.get(portKey{rec.ID, q.Port}) != nil {
			continue
		}
		e, err := p.open(rec, q)
		if err != nil {
			p.h.Log().Warn("exposing a sandbox's port again", "SANDBOX_ID", rec.ID, "port", q.Port, "error", err)
			continue
		}
		p.h.Log().Info("port exposed again", "SANDBOX_ID", rec.ID, "port", q.Port, "socket", e.path, "tcp", e.tcpAddr)
	}
}

// closeSandbox stops exposing every port of sandbox rec (destroyed), and
// removes the sockets a crash may have left of the ports it recorded.
func (p *Ports) closeSandbox(rec state.Record) {
	for _, e := range p.t.take(func(k portKey) bool { return k.id == rec.ID }) {
		p.closePort(e)
	}
	for _, q := range rec.Ports {
		_ = removeSocket(p.dir, portSocketName(rec.ID, q.Port), 0)
	}
}

// closeAll stops exposing every port, at the daemon's end; the records
// keep them for its next start.
func (p *Ports) closeAll() {
	for _, e := range p.t.take(func(portKey) bool { return true }) {
		p.closePort(e)
	}
}

// open listens for port q of sandbox rec and serves it.
func (p *Ports) open(rec state.Record, q state.Port) (*exposedPort, error) {
	name := portSocketName(rec.ID, q.Port)
	ln, ino, err := listenOwnedUnix(p.cfg.RuntimeDir, p.dir, name, rec.Owner)
	if err != nil {
		return nil, err
	}
	e := &exposedPort{key: portKey{rec.ID, q.Port}, owner: rec.Owner, unit: rec.Unit, path: filepath.Join(p.dir, name), ino: ino,
		lns: []net.Listener{ln}, slots: make(chan struct{}, MaxConns)}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if q.TCP {
		// Accepted sockets take the listener's buffers, pinned before
		// the handshake that sizes the window.
		lc := net.ListenConfig{Control: connbound.ListenControl}
		tln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			p.closePort(e)
			return nil, fmt.Errorf("listening on a loopback TCP port: %w", err)
		}
		e.lns, e.tcpAddr = append(e.lns, tln), tln.Addr().String()
	}
	for i, ln := range e.lns {
		e.wg.Add(1)
		go p.serve(e, ln, i > 0)
	}
	p.t.add(e)
	return e, nil
}

// closePort closes e's listeners and connections, waits for them, and
// removes its socket.
func (p *Ports) closePort(e *exposedPort) {
	e.cancel()
	for _, ln := range e.lns {
		ln.Close()
	}
	e.wg.Wait()
	if err := removeSocket(filepath.Dir(e.path), filepath.Base(e.path), e.ino); err != nil {
		p.h.Log().Warn("removing an exposed port's socket", "SANDBOX_ID", e.key.id, "path", e.path, "error", err)
	}
}

// serve accepts connections on ln and forwards each; on the TCP
// listener (checkPeer), only those of sockets the owner made.
func (p *Ports) serve(e *exposedPort, ln net.Listener, checkPeer bool) {
	defer e.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if e.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: wait rather than spin.
			p.h.Log().Warn("accepting a connection to an exposed port", "SANDBOX_ID", e.key.id, "port", e.key.port, "error", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		select {
		case e.slots <- struct{}{}:
		default:
			p.refuse(e, c, fmt.Sprintf("too many connections: %d open, the most a port may have", MaxConns))
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
					p.refuse(e, c, err.Error())
					return
				}
			} else if uid, err := unixPeerUID(c); err != nil || uid != e.owner && uid != 0 {
				// The socket is the owner's, who may open its mode: the
				// peer is asked too.
				p.refuse(e, c, fmt.Sprintf("the connecting process is uid %d's, not the owner's (%d) or root's (%v)", uid, e.owner, err))
				return
			}
			// Counted once the peer is known: another user's connections
			// to a TCP port never use up the owner's.
			release, refusal := p.t.admit(e.owner)
			if refusal != "" {
				p.refuse(e, c, refusal)
				return
			}
			defer release()
			if err := connbound.Pin(c); err != nil {
				p.refuse(e, c, err.Error())
				return
			}
			p.forward(e, c)
		}()
	}
}

func (p *Ports) refuse(e *exposedPort, c net.Conn, reason string) {
	c.Close()
	if held, ok := e.refused.allow(); ok {
		// Any local user may connect: these lines share one budget,
		// apart from the daemon's own.
		p.h.Log().Warn("exposed port refused a connection", "SANDBOX_ID", e.key.id, "port", e.key.port,
			"from", c.RemoteAddr().String(), "reason", reason, "refused_unlogged", held, journal.BudgetKey, "exposed-port-refusals")
	}
}

// forward carries c to e's port in the sandbox's network namespace until
// either side ends, the connection is idle for IdleTimeout, or the
// port is closed.
func (p *Ports) forward(e *exposedPort, c net.Conn) {
	defer c.Close()
	if err := p.h.Wake(e.ctx, e.key.id); err != nil {
		level := slog.LevelWarn
		if errors.Is(err, supervisor.ErrStopped) { // any local user may connect: not a line each
			level = slog.LevelDebug
		}
		p.h.Log().Log(e.ctx, level, "exposed port: waking its sandbox", "SANDBOX_ID", e.key.id, "port", e.key.port, "error", err)
		return
	}
	defer p.h.Touch(e.key.id)
	ns, err := p.netNS(e)
	if err != nil {
		p.h.Log().Debug("exposed port: no sandbox to forward to", "SANDBOX_ID", e.key.id, "port", e.key.port, "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(e.ctx, dialTimeout)
	// With network=host the namespace is the host's own: the port is the
	// host's 127.0.0.1:PORT, where that sandbox's server is, and which
	// the owner reaches anyway. The socket is the owner's, not root's,
	// so that no check of a peer's uid there (another sandbox's exposed
	// TCP port) takes the owner for root.
	in, err := egress.DialInNetNSAsWith(ctx, fmt.Sprintf("/proc/self/fd/%d", ns.Fd()), fmt.Sprintf("127.0.0.1:%d", e.key.port), e.owner, connbound.SetBuffers)
	cancel()
	ns.Close()
	if err != nil {
		p.h.Log().Debug("exposed port: the sandbox's port does not answer", "SANDBOX_ID", e.key.id, "port", e.key.port, "error", err)
		return
	}
	defer in.Close()
	stop := context.AfterFunc(e.ctx, func() { c.Close(); in.Close() })
	defer stop()
	splice(c, in, IdleTimeout)
}

// netNS opens the network namespace of the init of e's sandbox (the one
// running now: a rollback or a rebase starts another). A pid whose init
// died may be another process's by now: the pid must still be in the
// sandbox's scope once its namespace is open.
func (p *Ports) netNS(e *exposedPort) (*os.File, error) {
	id := e.key.id
	pid, ok := p.h.InitPID(id)
	if !ok {
		return nil, fmt.Errorf("sandbox %s is not running", id)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("opening the network namespace of sandbox %s: %w", id, err)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || !strings.Contains(string(cg), "/"+e.unit+"\n") && !strings.Contains(string(cg), "/"+e.unit+"/") {
		f.Close()
		return nil, fmt.Errorf("the init of sandbox %s (pid %d) is gone", id, pid)
	}
	return f, nil
}

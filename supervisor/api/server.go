package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"

	"github.com/sandboxd/sandboxd/internal/coalesce"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/api/access"
	"github.com/sandboxd/sandboxd/supervisor/api/calls"
	"github.com/sandboxd/sandboxd/supervisor/api/guard"
	"github.com/sandboxd/sandboxd/supervisor/api/introspection"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Server serves org.sandboxd1 on one bus connection until Close.
//
// A sandbox's object is served for exactly as long as the supervisor has
// the sandbox: every call on /org/sandboxd1/sandbox/<id> looks the id up
// in the supervisor (one handler serves the whole subtree), so an object
// can neither outlive its sandbox nor be missing for one. What the server
// remembers is only what it has announced (SandboxNew, StateChanged), so
// that the signals tell each change once.
type Server struct {
	conn   *dbus.Conn
	sup    *supervisor.Supervisor
	rooms  Rooms
	access access.Policy
	log    *slog.Logger

	// ctx is the calls' context; Close cancels it once the grace ends.
	ctx    context.Context
	cancel context.CancelFunc

	life   sync.Mutex // guards closed, and calls.Add against calls.Wait
	closed bool
	calls  sync.WaitGroup

	// mu guards known and orders the signals: each sandbox's signals go
	// out in the order its changes were seen.
	mu    sync.Mutex
	known map[string]state.State // id -> the state last announced
	// aud is who hears each sandbox's signals: its owner and admins.
	aud access.Audience

	// changes: the supervisor's change events, which follow announces.
	changes  *coalesce.Set
	followed chan struct{}

	// heavy bounds the calls that hold much memory or disk work at once.
	heavy *calls.Limiter
}

// managerIntrospectable serves the manager's XML as it is.
var managerIntrospectable = introspect.Introspectable(introspection.ManagerXML)

// serving holds the connections a Server uses: a second Server on the
// same connection would replace the first one's handlers.
var serving sync.Map

// closeGrace is how long Close lets calls in flight finish before it
// cancels them.
const closeGrace = 10 * time.Second

// Serve exports the manager and the sandboxes' objects on conn, then takes
// the name org.sandboxd1, so that a client that sees the name finds every
// object ready. It refuses to queue for the name: when another connection
// owns it, the error wraps ErrNameTaken and names the owner. ctx bounds
// the setting up; the Server lives until Close. Call it after the
// supervisor's Reconcile: the sandboxes that exist then are the ones
// served, without signals (clients list them).
func Serve(ctx context.Context, conn *dbus.Conn, sup *supervisor.Supervisor, rooms Rooms, policy access.Policy, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	if _, dup := serving.LoadOrStore(conn, true); dup {
		return nil, fmt.Errorf("serving %s: this connection serves it already", sandboxd1.BusName)
	}
	callCtx, cancel := context.WithCancel(context.Background())
	s := &Server{
		conn: conn, sup: sup, rooms: rooms, access: policy, log: log,
		ctx: callCtx, cancel: cancel,
		known: map[string]state.State{},
		heavy: calls.NewLimiter(),
	}
	if rooms.Commands != nil {
		guard.Attach(log, rooms.Commands)
		rooms.Commands.OnProcessExited(s.processExited)
	} else {
		guard.Attach(log, nil)
	}
	ok := false
	// Subscribed before the listing: a change made meanwhile is heard.
	s.changes, s.followed = sup.Subscribe(), make(chan struct{})
	defer func() {
		if !ok {
			sup.Unsubscribe(s.changes)
			s.unexport()
			cancel()
			serving.Delete(conn)
		}
	}()
	list, err := sup.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("serving %s: listing the sandboxes: %w", sandboxd1.BusName, err)
	}
	for _, sb := range list {
		if sb.Pool {
			continue // nobody's until claimed
		}
		if !sandboxd1.ValidID(sb.ID) {
			// Cannot happen with the supervisor's hex ids; such a record
			// could not have an object path.
			log.Error("a sandbox's id cannot name a D-Bus object; it is not served", "SANDBOX_ID", sb.ID)
			continue
		}
		s.known[sb.ID] = sb.State
		s.aud.SetOwner(sb.ID, sb.Owner)
	}
	if err := s.export(); err != nil {
		return nil, fmt.Errorf("serving %s: %w", sandboxd1.BusName, err)
	}
	if err := s.requestName(ctx); err != nil {
		return nil, err
	}
	ok = true
	go s.follow(s.changes, s.followed)
	log.Info("serving the D-Bus API", "name", sandboxd1.BusName, "sandboxes", len(s.known))
	return s, nil
}

func (s *Server) export() error {
	exports := []struct {
		v       any
		path    dbus.ObjectPath
		iface   string
		subtree bool
	}{
		{manager{s}, sandboxd1.ManagerPath, sandboxd1.ManagerInterface, false},
		{managerIntrospectable, sandboxd1.ManagerPath, "org.freedesktop.DBus.Introspectable", false},
		// One handler for every sandbox's object (and the node above them).
		{sandboxObject{s}, sandboxd1.SandboxPathPrefix, sandboxd1.SandboxInterface, true},
		{sandboxProperties{s}, sandboxd1.SandboxPathPrefix, "org.freedesktop.DBus.Properties", true},
		{sandboxIntrospectable{s}, sandboxd1.SandboxPathPrefix, "org.freedesktop.DBus.Introspectable", true},
		// Where the guard sends the calls it refuses (see guard.ConnOptions).
		{guard.Refuser{}, guard.RefusePath, guard.RefuseInterface, false},
	}
	for _, e := range exports {
		var err error
		if e.subtree {
			err = s.conn.ExportSubtree(e.v, e.path, e.iface)
		} else {
			err = s.conn.Export(e.v, e.path, e.iface)
		}
		if err != nil {
			return fmt.Errorf("exporting %s on %s: %w", e.iface, e.path, err)
		}
	}
	return nil
}

func (s *Server) unexport() {
	_ = s.conn.Export(nil, sandboxd1.ManagerPath, sandboxd1.ManagerInterface)
	_ = s.conn.Export(nil, sandboxd1.ManagerPath, "org.freedesktop.DBus.Introspectable")
	_ = s.conn.Export(nil, guard.RefusePath, guard.RefuseInterface)
	for _, iface := range []string{sandboxd1.SandboxInterface, "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable"} {
		_ = s.conn.ExportSubtree(nil, sandboxd1.SandboxPathPrefix, iface)
	}
}

func (s *Server) requestName(ctx context.Context) error {
	var reply uint32
	err := s.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.RequestName", 0, sandboxd1.BusName, uint32(dbus.NameFlagDoNotQueue)).Store(&reply)
	var derr dbus.Error
	if errors.As(err, &derr) && derr.Name == "org.freedesktop.DBus.Error.AccessDenied" {
		return fmt.Errorf("requesting %s on the bus: %w (the bus policy, org.sandboxd1.conf in the bus's system.d, lets root own it: is it installed, and is this root?)", sandboxd1.BusName, err)
	}
	if err != nil {
		return fmt.Errorf("requesting %s on the bus: %w", sandboxd1.BusName, err)
	}
	switch dbus.RequestNameReply(reply) {
	case dbus.RequestNameReplyPrimaryOwner, dbus.RequestNameReplyAlreadyOwner:
		return nil
	case dbus.RequestNameReplyExists:
		return fmt.Errorf("%w (%s); not starting a second one", ErrNameTaken, s.owner(ctx))
	default:
		return fmt.Errorf("requesting %s on the bus: unexpected answer %d", sandboxd1.BusName, reply)
	}
}

// owner describes the connection that owns sandboxd1.BusName, as well as the bus
// can tell.
func (s *Server) owner(ctx context.Context) string {
	var unique string
	if err := s.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", 0, sandboxd1.BusName).Store(&unique); err != nil {
		return "its owner is unknown: " + err.Error()
	}
	var pid uint32
	if err := s.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0, unique).Store(&pid); err != nil {
		return "connection " + unique
	}
	return fmt.Sprintf("pid %d, connection %s", pid, unique)
}

// Close stops serving: new calls are refused, the name is released (so a
// new daemon may take it), the objects are withdrawn, and calls in flight
// are given a grace period to finish before their context is cancelled.
// Close returns once no call runs; it is safe to call more than once.
func (s *Server) Close() error {
	s.life.Lock()
	if s.closed {
		s.life.Unlock()
		return nil
	}
	s.closed = true
	s.life.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	var reply uint32
	if cerr := s.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.ReleaseName", 0, sandboxd1.BusName).Store(&reply); cerr != nil {
		err = fmt.Errorf("releasing %s: %w", sandboxd1.BusName, cerr)
	}
	s.unexport()

	done := make(chan struct{})
	go func() { s.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeGrace):
		s.log.Warn("calls still running at shutdown; cancelling them")
	}
	s.cancel()
	<-done
	s.sup.Unsubscribe(s.changes)
	<-s.followed
	serving.Delete(s.conn)
	s.log.Info("stopped serving the D-Bus API", "name", sandboxd1.BusName)
	return err
}

// request is one method call being served.
type request struct {
	ctx    context.Context
	who    access.Caller
	actor  supervisor.Actor // who, as the supervisor's checks take it
	action string
	// project a call about a project names, for the journal: not an id,
	// it stays out of SANDBOX_ID.
	project string
	// slot is the call's heavy-call slot (nil: not a heavy call).
	slot *calls.Slot
	done func()
}

// begin admits a call from sender and identifies the caller.
func (s *Server) begin(sender dbus.Sender, action string) (*request, *dbus.Error) {
	s.life.Lock()
	if s.closed {
		s.life.Unlock()
		return nil, dbusError(sandboxd1.ErrorFailed, "%s: %v", action, ErrStopping)
	}
	s.calls.Add(1)
	s.life.Unlock()
	who, err := access.Identify(s.ctx, s.conn, s.access, sender)
	if err != nil {
		s.calls.Done()
		s.log.Error("refused a call from an unidentified caller", "ACTION", action, "BUS_SENDER", string(sender), "error", err)
		return nil, dbusError(sandboxd1.ErrorAccessDenied, "%s: cannot tell who is calling: %v", action, err)
	}
	s.aud.Heard(who)
	slot, derr := s.heavy.Acquire(s.ctx, action, who.UID)
	if derr != nil {
		s.calls.Done()
		s.log.Warn("D-Bus call", "ACTION", action, "CALLER_UID", who.UID, "BUS_SENDER", who.Name, "result", derr.Name, "error", derr.Error())
		return nil, derr
	}
	// The supervisor writes the caller into its audit log.
	actor := supervisor.Caller(identity(who))
	ctx := supervisor.WithActor(s.ctx, actor)
	done := func() { slot.Release(); s.calls.Done() }
	return &request{ctx: ctx, who: who, actor: actor, action: action, slot: slot, done: done}, nil
}

// identity is c as the supervisor knows callers: who uses a project, who
// a diff is written for, who the audit log names.
func identity(c access.Caller) supervisor.Identity {
	return supervisor.Identity{UID: c.UID, GIDs: c.GIDs, Admin: c.Admin}
}

// end audits the call: who did what to which sandbox, and how it went.
// Changes and refusals are logged; successful reads only at debug level.
func (s *Server) end(r *request, id string, derr *dbus.Error) *dbus.Error {
	r.done()
	attrs := []any{"ACTION", r.action, "CALLER_UID", r.who.UID, "BUS_SENDER", r.who.Name}
	switch {
	case sandboxd1.ValidID(id):
		attrs = append(attrs, "SANDBOX_ID", id)
	case id != "":
		// Not an id: kept out of SANDBOX_ID (journalctl SANDBOX_ID=...
		// finds sandboxes), and cut short.
		if len(id) > sandboxd1.MaxIDLen {
			id = id[:sandboxd1.MaxIDLen] + "..."
		}
		attrs = append(attrs, "requested_id", id)
	}
	if r.project != "" {
		attrs = append(attrs, "project", r.project)
	}
	switch {
	case derr == nil && !calls.Mutating(r.action):
		// Reads are many (a client polls State): they are kept out of
		// the journal unless debugging.
		s.log.Debug("D-Bus call", append(attrs, "result", "ok")...)
	case derr == nil:
		s.log.Info("D-Bus call", append(attrs, "result", "ok")...)
	case derr.Name == sandboxd1.ErrorFailed:
		s.log.Error("D-Bus call", append(attrs, "result", derr.Name, "error", derr.Error())...)
	default:
		s.log.Warn("D-Bus call", append(attrs, "result", derr.Name, "error", derr.Error())...)
	}
	return derr
}

// SandboxChanged is the hook for changes the server did not make itself
// (a command starts or ends, a TTL runs out, a scope dies): it reads the
// sandbox id from the supervisor and announces what changed since the last
// announcement: SandboxNew, StateChanged with PropertiesChanged, or
// SandboxRemoved.
func (s *Server) SandboxChanged(ctx context.Context, id string) error {
	if !sandboxd1.ValidID(id) {
		return fmt.Errorf("announcing a change of sandbox %q: not a valid id", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, err := s.sup.Get(ctx, id)
	switch {
	case errors.Is(err, supervisor.ErrNotFound) || err == nil && sb.Pool: // a pool's: nobody's yet
		s.announceGone(id)
		return nil
	case err != nil:
		return fmt.Errorf("announcing a change of sandbox %s: %w", id, err)
	}
	s.announce(id, sb.Owner, sb.State)
	return nil
}

// follow announces the sandboxes the supervisor says changed (made
// ready, frozen, thawed, destroyed, expired, a create undone), as
// SandboxChanged does for one, until the server closes.
func (s *Server) follow(sub *coalesce.Set, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-sub.Ready():
		}
		for _, id := range sub.Take() {
			if err := s.SandboxChanged(s.ctx, id); err != nil && s.ctx.Err() == nil {
				s.log.Error("announcing a change", "SANDBOX_ID", id, "error", err)
			}
		}
	}
}

// announce tells the owner's and the admins' connections that sandbox
// id, of owner, exists in state st, if that is news. s.mu must be held.
func (s *Server) announce(id string, owner uint32, st state.State) {
	old, known := s.known[id]
	s.known[id] = st
	s.aud.SetOwner(id, owner)
	switch {
	case !known:
		s.emit(owner, sandboxd1.ManagerPath, sandboxd1.ManagerInterface, "SandboxNew", id, sandboxd1.SandboxPath(id))
	case old != st:
		s.emit(owner, sandboxd1.ManagerPath, sandboxd1.ManagerInterface, "StateChanged", id, string(st))
		s.emit(owner, sandboxd1.SandboxPath(id), "org.freedesktop.DBus.Properties", "PropertiesChanged",
			sandboxd1.SandboxInterface, map[string]dbus.Variant{"State": dbus.MakeVariant(string(st))}, []string{})
	}
}

// announceGone tells the owner's and the admins' connections that sandbox
// id is gone, if that is news. s.mu must be held.
func (s *Server) announceGone(id string) {
	if _, known := s.known[id]; !known {
		return
	}
	delete(s.known, id)
	owner, ok := s.aud.Owner(id)
	if !ok {
		owner = 0 // unknown: admins alone hear it
	}
	s.aud.Forget(id)
	s.emit(owner, sandboxd1.ManagerPath, sandboxd1.ManagerInterface, "SandboxRemoved", id, sandboxd1.SandboxPath(id))
}

// emit sends a signal about a sandbox of owner to each connection that
// may see it (access.Audience): never broadcast, since its body names the
// sandbox.
func (s *Server) emit(owner uint32, path dbus.ObjectPath, iface, member string, values ...any) {
	for _, dest := range s.aud.Of(owner) {
		msg := &dbus.Message{
			Type: dbus.TypeSignal,
			Headers: map[dbus.HeaderField]dbus.Variant{
				dbus.FieldPath:        dbus.MakeVariant(path),
				dbus.FieldInterface:   dbus.MakeVariant(iface),
				dbus.FieldMember:      dbus.MakeVariant(member),
				dbus.FieldDestination: dbus.MakeVariant(dest),
				dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(values...)),
			},
			Body: values,
		}
		if call := s.conn.Send(msg, nil); call.Err != nil {
			s.log.Error("emitting a D-Bus signal", "signal", iface+"."+member, "path", string(path), "error", call.Err)
		}
	}
}

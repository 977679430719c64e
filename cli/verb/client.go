package verb

import (
	"context"
	"os"
	"time"

	"github.com/godbus/dbus/v5"

	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Client is sandboxctl's connection to sandboxd on the system bus: the
// Go client's (API), and the connection under it for what the Go client
// does not wrap (a terminal, signals forwarded to a command).
type Client struct {
	API     *sbclient.Client
	conn    *dbus.Conn
	signals chan *dbus.Signal
	// exits keeps CommandExited signals by command id: one can arrive
	// before Exec's reply.
	exits map[string]ExitStatus
	// daemon is sandboxd's unique bus name: only its signals count.
	daemon string
}

// ExitStatus is how a command ended, as its CommandExited signal says.
type ExitStatus struct {
	How    string
	Status int32
	Signal int32
}

// Connect connects to the system bus, where sandboxd is.
func Connect(ctx context.Context) (*Client, error) {
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return nil, &Error{Code: ExitUnavailable, Msg: "cannot reach the system bus: " + err.Error(),
			Fix: "is dbus running? (`systemctl status dbus`)", Err: err}
	}
	return &Client{API: sbclient.New(conn), conn: conn}, nil
}

// Close ends the connection.
func (c *Client) Close() { c.API.Close() }

// Sandbox is sandbox id's object on the bus.
func (c *Client) Sandbox(id string) dbus.BusObject {
	return c.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id))
}

// Call calls method on obj and stores its reply in out; what names the
// action for errors.
func Call(ctx context.Context, obj dbus.BusObject, what, method string, args []any, out ...any) error {
	c := obj.CallWithContext(ctx, method, 0, args...)
	if c.Err != nil {
		return FromBus(what, c.Err)
	}
	if len(out) > 0 {
		if err := c.Store(out...); err != nil {
			return FromBus(what, err)
		}
	}
	return nil
}

// List lists the sandboxes the caller may see.
func (c *Client) List(ctx context.Context) ([]sandboxd1.ListEntry, error) {
	entries, err := c.API.List(ctx)
	if err != nil {
		return nil, FromBus("listing sandboxes", err)
	}
	return entries, nil
}

// Resolve finds the sandbox arg names: its id, its name, or a prefix of
// its id that only it has.
func (c *Client) Resolve(ctx context.Context, arg string) (sandboxd1.ListEntry, error) {
	sb, err := c.API.Sandbox(ctx, arg)
	if err != nil {
		return sandboxd1.ListEntry{}, FromBus("finding sandbox "+Quote(arg), err)
	}
	return sb.Entry(), nil
}

// Handle is the Go client's handle on sandbox e.
func (c *Client) Handle(e sandboxd1.ListEntry) *sbclient.Sandbox { return c.API.Handle(e) }

// ResolveWatching is Resolve, with CommandExited watched from then on
// (startWatch), before any Exec: the calls of both go out at once.
func (c *Client) ResolveWatching(ctx context.Context, arg string) (sandboxd1.ListEntry, error) {
	watched := c.startWatch(ctx)
	e, err := c.Resolve(ctx, arg)
	werr := watched()
	if err != nil {
		return e, err
	}
	if werr != nil {
		return e, FromBus("watching for the command's end", werr)
	}
	return e, nil
}

// startWatch subscribes to CommandExited without waiting: its three
// calls go out at once, beside what the caller asks meanwhile, and the
// function it returns waits for their answers. Each round trip through
// the bus is a fraction of a millisecond, and a command's start is made
// of a few.
func (c *Client) startWatch(ctx context.Context) func() error {
	if c.signals != nil {
		return func() error { return nil }
	}
	c.signals, c.exits = make(chan *dbus.Signal, 16), map[string]ExitStatus{}
	c.conn.Signal(c.signals)
	bus := c.conn.BusObject()
	// A daemon that restarts while a command runs will not tell its end:
	// its name's owner, and the signal of its change, say so.
	calls := []*dbus.Call{
		bus.GoWithContext(ctx, "org.freedesktop.DBus.AddMatch", 0, nil,
			"type='signal',interface='"+sandboxd1.SandboxInterface+"',member='CommandExited'"),
		bus.GoWithContext(ctx, "org.freedesktop.DBus.AddMatch", 0, nil,
			"type='signal',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='"+sandboxd1.BusName+"'"),
		bus.GoWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", 0, nil, sandboxd1.BusName),
	}
	return func() error {
		for _, call := range calls {
			<-call.Done
			if call.Err != nil {
				return call.Err
			}
		}
		return calls[2].Store(&c.daemon)
	}
}

// WaitExit waits for command's CommandExited; onSignal is called with
// each signal the user sends sandboxctl meanwhile.
func (c *Client) WaitExit(ctx context.Context, command string, interrupts <-chan os.Signal, onSignal func(os.Signal)) (ExitStatus, error) {
	// NameOwnerChanged tells of a restart at once; the daemon's name is
	// also checked now and then, for one that came before the match.
	check := time.NewTicker(2 * time.Second)
	defer check.Stop()
	restarted := &Error{Code: ExitFailed,
		Msg: "sandboxd stopped or restarted while the command ran: its status is lost (the command may still run; see `sandboxctl status`)"}
	for {
		if st, ok := c.exits[command]; ok {
			return st, nil
		}
		select {
		case s, ok := <-c.signals:
			if !ok {
				return ExitStatus{}, &Error{Code: ExitFailed, Msg: "the connection to sandboxd ended while the command ran"}
			}
			if s.Name == "org.freedesktop.DBus.NameOwnerChanged" && len(s.Body) == 3 && s.Body[0] == sandboxd1.BusName {
				return ExitStatus{}, restarted
			}
			if s.Name != sandboxd1.SandboxInterface+".CommandExited" || len(s.Body) != 4 || s.Sender != c.daemon {
				continue
			}
			id, _ := s.Body[0].(string)
			how, _ := s.Body[1].(string)
			status, _ := s.Body[2].(int32)
			sig, _ := s.Body[3].(int32)
			c.exits[id] = ExitStatus{How: how, Status: status, Signal: sig}
		case <-check.C:
			var owner string
			err := c.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", 0, sandboxd1.BusName).Store(&owner)
			if err != nil || owner != c.daemon {
				return ExitStatus{}, restarted
			}
		case sig := <-interrupts:
			onSignal(sig)
		case <-ctx.Done():
			return ExitStatus{}, ctx.Err()
		}
	}
}

// Quote puts s in double quotes, for a message.
func Quote(s string) string { return "\"" + s + "\"" }

package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Client is a connection to sandboxd on the system bus. It is safe for
// use by many goroutines at once; Close it when done.
//
// Everything it does is done as the connecting process's user: the
// daemon checks each call against the uid and groups the bus vouches
// for, so a Client sees and touches only what that user may.
type Client struct {
	conn *dbus.Conn
	// exits routes CommandExited signals to the Exec calls waiting for
	// them; it starts with the first Exec.
	exits     *exitWatcher
	exitsOnce sync.Mutex
	closeOnce sync.Once
}

// Connect opens a connection to sandboxd over the system bus. ctx
// bounds the connecting only: the Client lives until Close.
func Connect(ctx context.Context) (*Client, error) {
	conn, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn}, nil
}

// ConnectAddress opens a connection to sandboxd over the bus at address,
// a D-Bus address (unix:path=...): another host's system bus, as a fleet
// test dials each of its hosts' from outside. ctx bounds the connecting
// only.
func ConnectAddress(ctx context.Context, address string) (*Client, error) {
	conn, err := dialWith(ctx, "the bus at "+address, func() (*dbus.Conn, error) { return dbus.Connect(address) })
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn}, nil
}

// New makes a Client of conn, a connection to the system bus the caller
// made (sandboxctl, which also makes calls the Client does not wrap, such
// as ExecTerminal's). Close closes conn.
func New(conn *dbus.Conn) *Client { return &Client{conn: conn} }

// dial connects to the system bus, giving up when ctx ends.
func dial(ctx context.Context) (*dbus.Conn, error) {
	return dialWith(ctx, "the system bus", func() (*dbus.Conn, error) { return dbus.ConnectSystemBus() })
}

// dialWith connects to bus (named so in errors) with connect, giving up
// when ctx ends.
func dialWith(ctx context.Context, bus string, connect func() (*dbus.Conn, error)) (*dbus.Conn, error) {
	type result struct {
		conn *dbus.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// Not dbus.WithContext(ctx): godbus would close the connection
		// when ctx ends, and the connection outlives this call.
		conn, err := connect()
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("connecting to %s: %w", bus, r.err)
		}
		return r.conn, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("connecting to %s: %w", bus, ctx.Err())
	}
}

// Close ends the connection. A command an Exec still waits for is not
// killed by it (Exec's ctx does that); its Exec returns an error.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() { err = c.conn.Close() })
	return err
}

// Connected says whether the connection to the bus still stands (a
// daemon's restart leaves it standing; the bus's does not).
func (c *Client) Connected() bool { return c.conn.Connected() }

func (c *Client) manager() dbus.BusObject {
	return c.conn.Object(sandboxd1.BusName, sandboxd1.ManagerPath)
}

func (c *Client) object(id string) dbus.BusObject {
	return c.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id))
}

// call calls iface's method on obj and stores the reply in out; op says
// what is being done, for errors.
func call(ctx context.Context, obj dbus.BusObject, op, iface, method string, args []any, out ...any) error {
	c := obj.CallWithContext(ctx, sandboxd1.Member(iface, method), 0, args...)
	if c.Err != nil {
		return wrap(op, c.Err)
	}
	if len(out) > 0 {
		if err := c.Store(out...); err != nil {
			return wrap(op, fmt.Errorf("reading the reply: %w", err))
		}
	}
	return nil
}

func (c *Client) callManager(ctx context.Context, op, method string, args []any, out ...any) error {
	return call(ctx, c.manager(), op, sandboxd1.ManagerInterface, method, args, out...)
}

// List returns the sandboxes the caller may see (its own; every one for
// an admin), oldest first.
func (c *Client) List(ctx context.Context) ([]sandboxd1.ListEntry, error) {
	var entries []sandboxd1.ListEntry
	err := c.callManager(ctx, "listing sandboxes", sandboxd1.MethodListSandboxes, nil, &entries)
	return entries, err
}

// Projects returns the projects the caller may make sandboxes of.
func (c *Client) Projects(ctx context.Context) ([]sandboxd1.ProjectEntry, error) {
	var entries []sandboxd1.ProjectEntry
	err := c.callManager(ctx, "listing projects", sandboxd1.MethodListProjects, nil, &entries)
	return entries, err
}

// Sandbox finds a sandbox the caller may see by its id, its name, or a
// prefix of its id that no other sandbox's id has, as sandboxctl does.
// None is an error matching ErrNoSuchSandbox; a prefix of several ids,
// one matching ErrInvalidArgs that lists them.
func (c *Client) Sandbox(ctx context.Context, idOrName string) (*Sandbox, error) {
	op := fmt.Sprintf("finding sandbox %q", idOrName)
	if idOrName == "" {
		return nil, newError(op, sandboxd1.ErrorInvalidArgs, "a sandbox id or name is empty")
	}
	var e sandboxd1.ListEntry
	if err := c.callManager(ctx, op, sandboxd1.MethodFindSandbox, []any{idOrName}, &e); err != nil {
		return nil, err
	}
	return c.handle(e), nil
}

// Handle is a handle on the sandbox of e, an entry of List, without a
// call: a sandbox gone since is ErrNoSuchSandbox at its first use.
func (c *Client) Handle(e sandboxd1.ListEntry) *Sandbox { return c.handle(e) }

func (c *Client) handle(e sandboxd1.ListEntry) *Sandbox {
	return &Sandbox{c: c, id: e.ID, name: e.Name, project: e.Project, entry: e}
}

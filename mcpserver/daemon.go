package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// daemon is the server's way to sandboxd: a client given at the start,
// or one made at the first call that needs it and made again once the
// connection to the bus was lost. So the server starts, answers
// initialize and lists its tools while the daemon (or the bus) is down,
// and each call says what is wrong and how to start it.
type daemon struct {
	connect func(context.Context) (*client.Client, error)

	mu sync.Mutex
	c  *client.Client
	// made: c was made here, and is closed here.
	made bool
}

func newDaemon(c *client.Client, connect func(context.Context) (*client.Client, error)) *daemon {
	return &daemon{c: c, connect: connect}
}

// errNoDaemon: the server was given neither a client nor a way to make one.
var errNoDaemon = errors.New("this MCP server has no connection to sandboxd")

// client is the connection, made now if there is none or it was lost.
func (d *daemon) client(ctx context.Context) (*client.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.c != nil && (!d.made || d.c.Connected()) {
		return d.c, nil
	}
	if d.c != nil {
		d.c.Close()
		d.c = nil
	}
	if d.connect == nil {
		return nil, fmt.Errorf("%w (%w)", errNoDaemon, client.ErrNotRunning)
	}
	c, err := d.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("reaching sandboxd: %w (%w)", err, client.ErrNotRunning)
	}
	d.c, d.made = c, true
	return c, nil
}

// close closes a connection made here.
func (d *daemon) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.made && d.c != nil {
		d.c.Close()
		d.c = nil
	}
}

// The client's calls the tools make, each on the connection as it is.

func (d *daemon) Sandbox(ctx context.Context, idOrName string) (*client.Sandbox, error) {
	c, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Sandbox(ctx, idOrName)
}

func (d *daemon) List(ctx context.Context) ([]sandboxd1.ListEntry, error) {
	c, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.List(ctx)
}

func (d *daemon) Projects(ctx context.Context) ([]sandboxd1.ProjectEntry, error) {
	c, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Projects(ctx)
}

func (d *daemon) Create(ctx context.Context, project string, opts client.CreateOptions) (*client.Sandbox, error) {
	c, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Create(ctx, project, opts)
}

func (d *daemon) Try(ctx context.Context, project string, variants []string, check, keep string, opts client.TryOptions) (*sandboxd1.TryReport, error) {
	c, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Try(ctx, project, variants, check, keep, opts)
}

func (d *daemon) Promotion(ctx context.Context, id string) (*sandboxd1.Promotion, error) {
	c, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.Promotion(ctx, id)
}

func (d *daemon) WaitPromotion(ctx context.Context, id string) (*sandboxd1.Promotion, error) {
	c, err := d.client(ctx)
	if err != nil {
		return nil, err
	}
	return c.WaitPromotion(ctx, id)
}

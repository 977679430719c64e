package mcpserver

import (
	"context"
	"io"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
)

// drainingTransport is a stream transport whose end of input waits for
// the answers to the calls under way: the SDK cancels the calls in flight
// when its read ends, so `sandboxctl mcp < requests.jsonl` would answer
// none of its tools/call requests. gone, when it fires, ends the wait: the
// reader of the answers went away, and the calls are then cancelled.
type drainingTransport struct {
	t    mcp.Transport
	gone <-chan struct{}
}

func (d *drainingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := d.t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	dc := &drainingConn{Connection: c, gone: d.gone, pending: map[any]bool{}}
	dc.cond = sync.NewCond(&dc.mu)
	return dc, nil
}

type drainingConn struct {
	mcp.Connection
	gone <-chan struct{}

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[any]bool // the ids of the calls read and not yet answered
	ended   bool         // the wait ended: gone fired, or the connection closed
}

func (c *drainingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		if r, ok := msg.(*jsonrpc.Request); ok && r.IsCall() {
			c.mu.Lock()
			c.pending[r.ID.Raw()] = true
			c.mu.Unlock()
		}
		return msg, nil
	}
	// The end of input: the calls under way answer first.
	stop := context.AfterFunc(ctx, c.end)
	defer stop()
	if c.gone != nil {
		go func() {
			select {
			case <-c.gone:
				c.end()
			case <-ctx.Done():
			}
		}()
	}
	c.mu.Lock()
	for len(c.pending) > 0 && !c.ended {
		c.cond.Wait()
	}
	c.mu.Unlock()
	return nil, err
}

func (c *drainingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if r, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		delete(c.pending, r.ID.Raw())
		c.cond.Broadcast()
		c.mu.Unlock()
	}
	if err != nil {
		c.end() // no one reads the answers: waiting for more is vain
	}
	return err
}

func (c *drainingConn) Close() error {
	c.end()
	return c.Connection.Close()
}

func (c *drainingConn) end() {
	c.mu.Lock()
	c.ended = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

// readerGone fires once w is a pipe or socket whose reading end was
// closed (the client that started the server went away), found by
// polling it for an error or hang-up; never for a file or a terminal.
func readerGone(w io.Writer) <-chan struct{} {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return nil
	}
	gone := make(chan struct{})
	fd := int(f.Fd())
	go func() {
		defer close(gone)
		for {
			fds := []unix.PollFd{{Fd: int32(fd), Events: 0}}
			n, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				continue
			}
			if err != nil || (n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0) {
				return
			}
			time.Sleep(10 * time.Millisecond) // poll woke with nothing: do not spin
		}
	}()
	return gone
}

package nsinit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Command is a command started in a sandbox, seen from the daemon.
type Command struct {
	// PID is the command's pid inside the sandbox.
	PID int
	// Master is the pseudo-terminal's master, for a Request with PTY: the
	// caller reads and writes the terminal through it. Exec's caller owns
	// it.
	Master *os.File

	conn *net.UnixConn
	done chan struct{}
	res  Result
}

// Exec runs req in the sandbox whose init listens on socket, with stdio
// (stdin, stdout, stderr; none for a PTY) as the command's own: the init
// gets copies, the caller keeps its files. It returns once the command
// has started; Wait tells how it ended.
func Exec(ctx context.Context, socket string, req Request, stdio []*os.File) (*Command, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("running %s: %w", req.program(), ErrNotRunning)
		}
		return nil, fmt.Errorf("running %s: reaching the sandbox's init: %w", req.program(), err)
	}
	conn := c.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if err := writeMessage(conn, message{Request: &req}, stdio); err != nil {
		conn.Close()
		return nil, fmt.Errorf("running %s: sending the request: %w", req.program(), err)
	}
	m, files, err := readMessage(conn, smallMessage)
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("running %s: %w", req.program(), ctx.Err())
		}
		return nil, fmt.Errorf("running %s: %w (%v)", req.program(), ErrNotRunning, err)
	}
	if m.Error != "" {
		closeAll(files)
		conn.Close()
		return nil, fmt.Errorf("running %s: %w", req.program(), startError(m))
	}
	cmd := &Command{PID: m.Started, conn: conn, done: make(chan struct{})}
	if req.PTY {
		if len(files) != 1 {
			closeAll(files)
			conn.Close()
			return nil, fmt.Errorf("running %s: the init sent no pseudo-terminal", req.program())
		}
		cmd.Master = files[0]
	} else {
		closeAll(files)
	}
	go cmd.await()
	return cmd, nil
}

// await reads the exit; a connection that ends first means the init did.
func (c *Command) await() {
	defer close(c.done)
	defer c.conn.Close()
	for {
		m, files, err := readMessage(c.conn, smallMessage)
		closeAll(files)
		if err != nil {
			c.res = Result{How: Lost}
			return
		}
		if m.Exit != nil {
			c.res = *m.Exit
			return
		}
	}
}

// Done is closed when the command has ended.
func (c *Command) Done() <-chan struct{} { return c.done }

// Wait waits for the command to end, or ctx.
func (c *Command) Wait(ctx context.Context) (Result, error) {
	select {
	case <-c.done:
		return c.res, nil
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// Result is how the command ended; valid once Done is closed.
func (c *Command) Result() Result {
	<-c.done
	return c.res
}

// Signal sends sig to the command's process group.
func (c *Command) Signal(sig syscall.Signal) error {
	select {
	case <-c.done:
		return nil
	default:
	}
	return writeMessage(c.conn, message{Signal: int(sig)}, nil)
}

// PeerPID is the pid (in the caller's PID namespace) of the init
// listening on socket: the way into its namespaces after a daemon restart.
func PeerPID(ctx context.Context, socket string) (int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		return 0, fmt.Errorf("reaching the sandbox's init: %w", err)
	}
	defer c.Close()
	cred, err := PeerCred(c.(*net.UnixConn))
	if err != nil {
		return 0, fmt.Errorf("reading the init's credentials: %w", err)
	}
	return int(cred.Pid), nil
}

// PeerCred is the credentials of the process at c's other end
// (SO_PEERCRED), as of its connect or listen.
func PeerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

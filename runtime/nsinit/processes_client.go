package nsinit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
)

// The daemon's side of background processes (see processes.go).

// dial connects to the init's control socket, closing the connection when
// ctx ends.
func dial(ctx context.Context, socket string) (*net.UnixConn, func(), error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, ErrNotRunning
		}
		return nil, nil, fmt.Errorf("reaching the sandbox's init: %w", err)
	}
	conn := c.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	return conn, func() { stop(); conn.Close() }, nil
}

// ask sends m and reads one answer of at most size bytes.
func ask(ctx context.Context, socket string, m message, files []*os.File, size int) (message, error) {
	conn, done, err := dial(ctx, socket)
	if err != nil {
		return message{}, err
	}
	defer done()
	if err := writeMessage(conn, m, files); err != nil {
		return message{}, fmt.Errorf("asking the sandbox's init: %w", err)
	}
	reply, extra, err := readMessage(conn, size)
	closeAll(extra)
	if err != nil {
		if ctx.Err() != nil {
			return reply, ctx.Err()
		}
		return reply, fmt.Errorf("%w (%v)", ErrNotRunning, err)
	}
	if reply.Error != "" && reply.Start != "" {
		return reply, startError(reply)
	}
	if reply.Error != "" {
		return reply, queryError(reply.Error)
	}
	return reply, nil
}

// queryError is the init's error text, with the sentinel it names.
func queryError(text string) error {
	for _, e := range []error{ErrNoProcess, ErrPastEnd, ErrTooMany} {
		if strings.Contains(text, e.Error()) {
			return fmt.Errorf("%s: %w", strings.TrimSuffix(strings.TrimSuffix(text, e.Error()), ": "), e)
		}
	}
	return fmt.Errorf("%w: %s", ErrCommand, text)
}

// Spawn starts req (whose Spawn names the process) in the background in
// the sandbox whose init listens on socket, with files (a command
// cgroup's, if req.Cgroup) passed along; it returns the process's pid
// inside the sandbox once it runs.
func Spawn(ctx context.Context, socket string, req Request, files []*os.File) (int, error) {
	if req.Spawn == "" {
		return 0, errors.New("spawning: no process id")
	}
	m, err := ask(ctx, socket, message{Request: &req}, files, smallMessage)
	if err != nil {
		return 0, fmt.Errorf("spawning %s: %w", req.program(), err)
	}
	return m.Started, nil
}

// ListProcesses lists the background processes, oldest first.
func ListProcesses(ctx context.Context, socket string) ([]Process, error) {
	m, err := ask(ctx, socket, message{Process: &ProcessQuery{List: true}}, nil, maxMessage)
	if err != nil {
		return nil, fmt.Errorf("listing background processes: %w", err)
	}
	return m.Processes, nil
}

// ReadLog reads at most max bytes (up to MaxReadLog) of process id's log
// from offset.
func ReadLog(ctx context.Context, socket, id string, offset uint64, max uint32) (LogChunk, error) {
	m, err := ask(ctx, socket, message{Process: &ProcessQuery{Read: true, ID: id, Offset: offset, Max: max}}, nil, maxMessage)
	if err != nil {
		return LogChunk{}, fmt.Errorf("reading the log of process %s: %w", id, err)
	}
	if m.Log == nil {
		return LogChunk{}, fmt.Errorf("reading the log of process %s: the init sent none", id)
	}
	return *m.Log, nil
}

// SignalProcess sends sig to process id's process group.
func SignalProcess(ctx context.Context, socket, id string, sig syscall.Signal) error {
	if _, err := ask(ctx, socket, message{Process: &ProcessQuery{Signal: int(sig), ID: id}}, nil, smallMessage); err != nil {
		return fmt.Errorf("signalling process %s: %w", id, err)
	}
	return nil
}

// WatchProcesses calls ended for each background process that ends, until
// ctx ends or the init goes (its error then); ready once the init has
// taken the watch (an end after that is heard).
func WatchProcesses(ctx context.Context, socket string, ready func(), ended func(Process)) error {
	conn, done, err := dial(ctx, socket)
	if err != nil {
		return err
	}
	defer done()
	if err := writeMessage(conn, message{Process: &ProcessQuery{Watch: true}}, nil); err != nil {
		return fmt.Errorf("watching background processes: %w", err)
	}
	for {
		m, extra, err := readMessage(conn, maxMessage)
		closeAll(extra)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("watching background processes: %w", err)
		}
		if m.Listed && ready != nil {
			ready()
		}
		if m.Exited != nil {
			ended(*m.Exited)
		}
	}
}

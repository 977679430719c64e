package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	portroom "github.com/sandboxd/sandboxd/supervisor/ports"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

// What the daemon holds for exposed ports that an owner holds open and
// does not read (issue 28's finding 5): its RSS and descriptors with no
// sandbox; with portSandboxes sandboxes of one owner (the bench, root),
// each exposing portsEach ports; then with the owner connected once to
// each port, never reading, while a writer in each sandbox writes to
// every connection as fast as it is taken. The daemon caps an owner's
// connections (256): the rest are refused at once.

const (
	portSandboxes = 32
	portsEach     = 16
	portBase      = 9000
)

// portsNote says, under the daemon's table, how the rows of held
// connections were measured.
const portsNote = "The rows of held connections: the daemon's VmRSS and open descriptors (/proc/PID/fd) with no sandbox, " +
	"then with 32 sandboxes of the 1k project, all the bench's (one owner), each exposing 16 ports (unix sockets) served by a Python writer in the sandbox that writes 64 KiB chunks to every connection as fast as they are taken; " +
	"then with the bench connected once to each of the 512 ports and reading nothing (a connection is served once a byte of it is readable, refused once it ends), " +
	"read once the daemon's socket queues stop growing (ss's skmem r+t+w+f of the daemon's sockets, in the testbed's namespace and each sandbox's)."

// benchPortConns adds the rows of the daemon's memory and descriptors
// with none, with the ports exposed, and with their connections held.
func benchPortConns(ctx context.Context, d *daemon, t *table, n int) (err error) {
	begin := time.Now()
	pid, none, err := d.memory(ctx)
	if err != nil {
		return err
	}
	fds0, err := openFDs(pid)
	if err != nil {
		return err
	}
	var ids []string
	defer func() {
		for _, id := range ids {
			err = errors.Join(err, d.destroy(context.WithoutCancel(ctx), id))
		}
	}()
	var ports []string
	for p := range portsEach {
		ports = append(ports, strconv.Itoa(portBase+p))
	}
	var addrs []string
	var netns []string // one pid in each sandbox's network namespace
	for range portSandboxes {
		id, err := d.create(ctx, projectName(n))
		if err != nil {
			return err
		}
		ids = append(ids, id)
		if _, err := d.spawn(ctx, id, append([]string{python, "-c", testbed.PortWriters, "port-writers"}, ports...)...); err != nil {
			return fmt.Errorf("starting the writer in sandbox %s: %w", id, err)
		}
		for _, p := range ports {
			port, _ := strconv.Atoi(p)
			var addr string
			if err := d.call(ctx, id, sandboxd1.MethodExposePort, []any{uint16(port), map[string]dbus.Variant{}}, &addr); err != nil {
				return err
			}
			addrs = append(addrs, addr)
		}
		// The writer listens before the bench connects: each connection
		// is then served or refused, never ended for want of a server.
		if _, err := d.runToEnd(ctx, id, "sh", "-c", "i=0; while [ ! -e /tmp/writers.ready ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; test -e /tmp/writers.ready"); err != nil {
			return fmt.Errorf("waiting for the writer in sandbox %s: %w", id, err)
		}
		ipid, err := d.initPID(ctx, id)
		if err != nil {
			return err
		}
		netns = append(netns, fmt.Sprintf("/proc/%d/ns/net", ipid))
	}
	_, exposed, err := d.memory(ctx)
	if err != nil {
		return err
	}
	fds1, err := openFDs(pid)
	if err != nil {
		return err
	}

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, a := range addrs {
		c, err := net.DialTimeout("unix", a, 10*time.Second)
		if err != nil {
			return fmt.Errorf("connecting to %s: %w", a, err)
		}
		conns = append(conns, c)
	}
	served, refused := 0, 0
	for _, c := range conns {
		ok, err := servedConn(c)
		if err != nil {
			return err
		}
		if ok {
			served++
		} else {
			refused++
		}
	}
	// The queues fill as the writers write: read once what the daemon's
	// sockets hold stops growing (no growth over 2 s of reads).
	queues, err := testbed.SettledQueues(ctx, 0, 2*time.Minute, func() (int, error) {
		queues, _, err := testbed.SocketQueues(ctx, pid, true, netns)
		return queues, err
	})
	if err != nil {
		return fmt.Errorf("the daemon's socket queues: %w", err)
	}
	_, held, err := d.memory(ctx)
	if err != nil {
		return err
	}
	fds2, err := openFDs(pid)
	if err != nil {
		return err
	}
	progress("held connections: %d served, %d refused, %v", served, refused, time.Since(begin).Round(time.Millisecond))

	t.add(row{fs: "btrfs", op: fmt.Sprintf("sandboxd with no sandbox (before the held connections): VmRSS %s, %d descriptors open", mib(none.rss), fds0)})
	t.add(row{fs: "btrfs", files: n,
		op: fmt.Sprintf("%d sandboxes of one owner, %d ports exposed each (%d unix sockets), a writer listening behind each, no connection: VmRSS %s (%s), %d descriptors (%+d)",
			portSandboxes, portsEach, len(addrs), mib(exposed.rss), plusMiB(exposed.rss, none.rss), fds1, fds1-fds0)})
	t.add(row{fs: "btrfs", files: n,
		op: fmt.Sprintf("the owner connected once to each of the %d ports, reading nothing, the writers writing: %d served, %d refused; VmRSS %s (%s), the daemon's socket queues %s, %d descriptors (%+d)",
			len(addrs), served, refused, mib(held.rss), plusMiB(held.rss, exposed.rss), mib(uint64(queues)), fds2, fds2-fds1),
		verdict: fmt.Sprintf("an owner's cap: %d connections; bound: %d KiB a connection, %s for the %d served; held %d KiB a connection",
			portroom.MaxConnsPerOwner,
			portroom.ConnMemory>>10, mib(uint64(served*portroom.ConnMemory)), served, (int(held.rss)-int(exposed.rss)+queues)/max(served, 1)>>10)})
	return nil
}

// initPID is the host pid of sandbox id's init, asked of systemd.
func (d *daemon) initPID(ctx context.Context, id string) (int, error) {
	var unit string
	if err := d.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id)).StoreProperty(sandboxd1.SandboxInterface+".Unit", &unit); err != nil {
		return 0, fmt.Errorf("finding the scope of sandbox %s: %w", id, err)
	}
	var procs []struct {
		Cgroup  string
		PID     uint32
		Cmdline string
	}
	systemd := d.conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	if err := systemd.CallWithContext(ctx, "org.freedesktop.systemd1.Manager.GetUnitProcesses", 0, unit).Store(&procs); err != nil {
		return 0, fmt.Errorf("listing the processes of %s: %w", unit, err)
	}
	for _, p := range procs {
		if strings.HasSuffix(p.Cmdline, " sandbox-init") {
			return int(p.PID), nil
		}
	}
	return 0, fmt.Errorf("finding the init of sandbox %s: %s holds no sandbox-init", id, unit)
}

// servedConn says whether c is served (a byte of the writer's comes) or
// refused (it ends); it reads that one byte.
func servedConn(c net.Conn) (bool, error) {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	n, err := c.Read(b[:])
	switch {
	case n == 1:
		return true, nil
	case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err):
		return false, nil
	}
	return false, fmt.Errorf("waiting for a byte or the end of a connection to an exposed port: %w", err)
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}

// openFDs counts pid's open descriptors.
func openFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, fmt.Errorf("counting the descriptors of pid %d: %w", pid, err)
	}
	return len(ents), nil
}

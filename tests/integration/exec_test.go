package integration

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/tests/testbed"
)

// client is a D-Bus client of the installed daemon, as an agent would
// write one: it passes its own files and waits for CommandExited.
type client struct {
	conn    *dbus.Conn
	signals chan *dbus.Signal
}

func newClient(t *testing.T) *client {
	t.Helper()
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &client{conn: conn, signals: make(chan *dbus.Signal, 16)}
	conn.Signal(c.signals)
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.sandboxd1.Sandbox"), dbus.WithMatchMember("CommandExited")); err != nil {
		t.Fatal(err)
	}
	return c
}

// exec runs argv in the sandbox at object with a pipe for stdout and
// stderr; it returns the output and CommandExited's how and status.
func (c *client) exec(t *testing.T, object string, argv ...string) (string, string, int32) {
	t.Helper()
	null, w, collect := testbed.Capture(t)
	var id string
	err := c.conn.Object("org.sandboxd1", dbus.ObjectPath(object)).Call("org.sandboxd1.Sandbox.Exec", 0,
		argv, map[string]dbus.Variant{}, dbus.UnixFD(null.Fd()), dbus.UnixFD(w.Fd()), dbus.UnixFD(w.Fd())).Store(&id)
	out := collect()
	if err != nil {
		t.Fatalf("Exec %q: %v", argv, err)
	}
	how, status := c.wait(t, object, id)
	return out, how, status
}

func (c *client) wait(t *testing.T, object, command string) (string, int32) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case s := <-c.signals:
			if string(s.Path) == object && s.Name == "org.sandboxd1.Sandbox.CommandExited" && s.Body[0] == command {
				return s.Body[1].(string), s.Body[2].(int32)
			}
		case <-timeout:
			t.Fatalf("no CommandExited for command %s of %s", command, object)
		}
	}
}

func TestExecStreamsThroughTheCallersOwnFiles(t *testing.T) {
	install(t)
	_, object := create(t)
	c := newClient(t)
	out, how, status := c.exec(t, object, "/bin/sh", "-c", "cat index.html; echo to-stderr >&2; exit 3")
	if out != "<h1>web</h1>\nto-stderr\n" || how != "exited" || status != 3 {
		t.Errorf("a command over D-Bus: %q, %s %d", out, how, status)
	}
	// Not the test's own 0, 1 and 2: on a terminal, those are refused.
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	n := dbus.UnixFD(null.Fd())
	err = c.conn.Object("org.sandboxd1", dbus.ObjectPath(object)).Call("org.sandboxd1.Sandbox.Exec", 0,
		[]string{"no-such-command"}, map[string]dbus.Variant{}, n, n, n).Err
	if err == nil || !strings.Contains(err.Error(), "no-such-command: not found") {
		t.Errorf("a command that does not exist: %v", err)
	}
	err = c.conn.Object("org.sandboxd1", dbus.ObjectPath(object)).Call("org.sandboxd1.Sandbox.Exec", 0,
		[]string{"true"}, map[string]dbus.Variant{"Colour": dbus.MakeVariant("red")}, n, n, n).Err
	if err == nil || !strings.Contains(err.Error(), `unknown option "Colour"`) {
		t.Errorf("an unknown option: %v", err)
	}
}

func TestATerminalCommandGetsAPTY(t *testing.T) {
	install(t)
	_, object := create(t)
	c := newClient(t)
	var id string
	var fd dbus.UnixFD
	// Bounded: a command that ended before the daemon wrote its reply once
	// took the descriptor with it, and the reply never came.
	callCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.conn.Object("org.sandboxd1", dbus.ObjectPath(object)).CallWithContext(callCtx, "org.sandboxd1.Sandbox.ExecTerminal", 0,
		[]string{"/bin/sh", "-c", "tty; stty size"}, map[string]dbus.Variant{}, uint16(24), uint16(80)).Store(&id, &fd)
	if err != nil {
		t.Fatal(err)
	}
	master := os.NewFile(uintptr(fd), "pty")
	defer master.Close()
	var out strings.Builder
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&out, master); close(done) }()
	how, status := c.wait(t, object, id)
	select {
	case <-done:
	case <-time.After(2 * time.Second):
	}
	if got := strings.ReplaceAll(out.String(), "\r", ""); how != "exited" || status != 0 || got != "/dev/pts/0\n24 80\n" {
		t.Errorf("tty in a terminal command: %s %d %q", how, status, got)
	}
}

func TestSandboxesKeepRunningAcrossADaemonRestart(t *testing.T) {
	install(t)
	_, object := create(t)
	c := newClient(t)
	if _, how, status := c.exec(t, object, "/bin/sh", "-c", "echo kept > /tmp/before-restart"); how != "exited" || status != 0 {
		t.Fatalf("writing to the sandbox's /tmp: %s %d", how, status)
	}
	testbed.MustRun(t, "systemctl", "restart", "sandboxd.service")
	c = newClient(t)
	// The same init (its /tmp lives as long as it does) answers.
	if out, how, status := c.exec(t, object, "cat", "/tmp/before-restart"); out != "kept\n" || how != "exited" || status != 0 {
		t.Errorf("after the daemon restarted: %q %s %d", out, how, status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Object("org.sandboxd1", dbus.ObjectPath(object)).CallWithContext(ctx, "org.sandboxd1.Sandbox.Destroy", 0).Err; err != nil {
		t.Errorf("destroying after the restart: %v", err)
	}
}

package client

import (
	"context"
	"errors"
	"sync"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The bus daemon's own name, interface and signal, which tell when
// sandboxd stops or restarts.
const (
	busDaemonName    = "org.freedesktop.DBus"
	nameOwnerChanged = "NameOwnerChanged"
	getNameOwner     = "org.freedesktop.DBus.GetNameOwner"
)

// maxEarly bounds the CommandExited signals kept for commands no Exec
// waits for yet (one can come before Exec's reply).
const maxEarly = 256

// exitWatcher routes the CommandExited signals the daemon sends this
// connection to the Exec calls that wait for them, by command id. It
// also follows who owns org.sandboxd1: a daemon that stops or restarts
// while a command runs will never tell its end, so its waiters are told
// that instead. Daemons are told apart by their unique bus names, which
// the bus never gives twice.
type exitWatcher struct {
	conn    *dbus.Conn
	signals chan *dbus.Signal

	mu sync.Mutex
	// gone are the daemons that lost org.sandboxd1: none of them will
	// tell of a command's end again.
	gone    map[string]bool
	waiters map[string]*exitWaiter
	early   map[string]earlyExit
	// ended is set when the connection ends: nothing will come.
	ended error
}

type exitWaiter struct {
	daemon string // the sandboxd the command was started by
	done   chan exitResult
}

// earlyExit is a CommandExited that came before its Exec's reply.
type earlyExit struct {
	daemon string
	status ExitStatus
}

type exitResult struct {
	status ExitStatus
	err    error
}

// watcher returns the client's exit watcher, starting it on first use.
func (c *Client) watcher(ctx context.Context) (*exitWatcher, error) {
	c.exitsOnce.Lock()
	defer c.exitsOnce.Unlock()
	if c.exits != nil {
		return c.exits, nil
	}
	w, err := watchExits(ctx, c.conn)
	if err != nil {
		return nil, wrap("watching for the ends of commands", err)
	}
	c.exits = w
	return w, nil
}

func watchExits(ctx context.Context, conn *dbus.Conn) (*exitWatcher, error) {
	w := &exitWatcher{conn: conn, signals: make(chan *dbus.Signal, 64), gone: map[string]bool{},
		waiters: map[string]*exitWaiter{}, early: map[string]earlyExit{}}
	conn.Signal(w.signals)
	err := conn.AddMatchSignalContext(ctx, dbus.WithMatchInterface(sandboxd1.SandboxInterface),
		dbus.WithMatchMember(sandboxd1.SignalCommandExited))
	if err == nil {
		err = conn.AddMatchSignalContext(ctx, dbus.WithMatchInterface(busDaemonName), dbus.WithMatchMember(nameOwnerChanged),
			dbus.WithMatchArg(0, sandboxd1.BusName))
	}
	if err != nil {
		conn.RemoveSignal(w.signals)
		return nil, err
	}
	go w.run()
	return w, nil
}

func (w *exitWatcher) run() {
	for s := range w.signals {
		switch {
		case s.Name == busDaemonName+"."+nameOwnerChanged && s.Sender == busDaemonName:
			if len(s.Body) == 3 && s.Body[0] == sandboxd1.BusName {
				old, _ := s.Body[1].(string)
				w.ownerChanged(old)
			}
		case s.Name == sandboxd1.SandboxInterface+"."+sandboxd1.SignalCommandExited && len(s.Body) == 4:
			id, _ := s.Body[0].(string)
			how, _ := s.Body[1].(string)
			status, _ := s.Body[2].(int32)
			sig, _ := s.Body[3].(int32)
			w.exited(s.Sender, id, ExitStatus{How: how, Code: int(status), Signal: int(sig)})
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = errors.New("the connection to the system bus ended while the command ran")
	for id, wt := range w.waiters {
		wt.done <- exitResult{err: w.ended}
		delete(w.waiters, id)
	}
}

// ownerChanged fails the waiters of old, which lost the name.
func (w *exitWatcher) ownerChanged(old string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old != "" {
		w.gone[old] = true
		for id, wt := range w.waiters {
			if wt.daemon == old {
				wt.done <- exitResult{err: ErrDaemonRestarted}
				delete(w.waiters, id)
			}
		}
	}
}

func (w *exitWatcher) exited(sender, id string, st ExitStatus) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt, ok := w.waiters[id]; ok {
		if wt.daemon == sender { // else not sandboxd's: anyone may send a signal
			wt.done <- exitResult{status: st}
			delete(w.waiters, id)
		}
		return
	}
	if len(w.early) >= maxEarly {
		for k := range w.early { // any one: none of them is awaited
			delete(w.early, k)
			break
		}
	}
	w.early[id] = earlyExit{daemon: sender, status: st}
}

// owner is the daemon a command started now is started by, as the bus
// says at this moment (a signal that the name changed hands may still be
// on its way).
func (w *exitWatcher) owner(ctx context.Context) (string, error) {
	var daemon string
	if err := w.conn.BusObject().CallWithContext(ctx, getNameOwner, 0, sandboxd1.BusName).Store(&daemon); err != nil {
		return "", wrap("finding sandboxd on the bus", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.ended != nil:
		return "", w.ended
	case w.gone[daemon]:
		return "", ErrDaemonRestarted
	}
	return daemon, nil
}

// wait returns where command id's end will be told; daemon is the owner
// the command was started by.
func (w *exitWatcher) wait(id, daemon string) <-chan exitResult {
	done := make(chan exitResult, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e, early := w.early[id]; {
	case early && e.daemon == daemon:
		delete(w.early, id)
		done <- exitResult{status: e.status}
	case w.ended != nil:
		done <- exitResult{err: w.ended}
	case w.gone[daemon]:
		done <- exitResult{err: ErrDaemonRestarted}
	default:
		w.waiters[id] = &exitWaiter{daemon: daemon, done: done}
	}
	return done
}

// forget stops waiting for command id.
func (w *exitWatcher) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiters, id)
	delete(w.early, id)
}

package api

import (
	"context"
	"errors"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
	"github.com/sandboxd/sandboxd/supervisor/commands"
)

// Sessions: OpenSession, Eval, CloseSession.

// OpenSession(s language, a{sv} options) -> (s session) starts a
// long-lived interpreter (python3, node, sh, go, sql) in the sandbox, as the caller,
// with Exec's options (Environment, WorkingDirectory, Root). It lives
// until CloseSession, its own end, the sandbox's, or the daemon's.
func (o sandboxObject) OpenSession(sender dbus.Sender, msg dbus.Message, language string, in map[string]dbus.Variant) (string, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodOpenSession)
	if derr != nil {
		return "", derr
	}
	opts := commands.ExecOptions{UID: r.who.UID}
	if err := options.Exec(&opts, in); err != nil {
		return "", s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs, "OpenSession: %v", err))
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return "", derr
	}
	sess, err := c.OpenSession(r.ctx, id, language, opts)
	if err != nil {
		return "", s.end(r, id, fromSupervisor(err))
	}
	return sess, s.end(r, id, nil)
}

// Eval(s session, s code) -> (s output, i status) runs code in the
// session's interpreter, in the scope the earlier inputs left, and
// returns what it wrote (stdout and stderr together, at most 1 MiB; bytes
// that are not UTF-8 become U+FFFD) and its status: 0 if it ran without
// error. Only the caller that opened the session (or root) may use it.
// One input runs at a time; a few wait for it, as long as their caller
// is on the bus; any more is refused at once with Busy.
func (o sandboxObject) Eval(sender dbus.Sender, msg dbus.Message, session, code string) (string, int32, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodEval)
	if derr != nil {
		return "", 0, derr
	}
	// An input that waits for the one before it stops waiting, and gives
	// its place back, when its caller leaves the bus.
	watch := func() (context.Context, func()) { return s.whileConnected(r.ctx, string(sender)) }
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return "", 0, derr
	}
	out, status, err := c.Eval(r.ctx, id, session, r.who.UID, code, commands.EvalOptions{Watch: watch})
	if err != nil {
		return "", 0, s.end(r, id, sessionError(err))
	}
	return strings.ToValidUTF8(out, "\uFFFD"), int32(status), s.end(r, id, nil)
}

// CloseSession(s session) ends a session and its interpreter.
func (o sandboxObject) CloseSession(sender dbus.Sender, msg dbus.Message, session string) *dbus.Error {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodCloseSession)
	if derr != nil {
		return derr
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return derr
	}
	return s.end(r, id, sessionError(c.CloseSession(r.ctx, id, session, r.who.UID)))
}

func sessionError(err error) *dbus.Error {
	if err == nil {
		return nil
	}
	if errors.Is(err, commands.ErrNoSession) {
		return dbusError(sandboxd1.ErrorNoSuchCommand, "%v", err)
	}
	if errors.Is(err, commands.ErrSessionBusy) {
		return dbusError(sandboxd1.ErrorBusy, "%v", err)
	}
	return fromSupervisor(err)
}

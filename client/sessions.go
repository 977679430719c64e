package client

import (
	"context"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Sessions (interpreters kept between inputs) and ports.

// OpenSession starts a long-lived interpreter in the sandbox, "python3",
// "node", "sh", "go" (snippets run against the project's module) or
// "sql" (one psql connection; PGDATABASE, PGUSER, PGHOST in opts.Env),
// as the caller, and returns its id for Eval. opts' Env, Dir and Root
// apply. It lives until CloseSession, its own end, the
// sandbox's or the daemon's; a sandbox has at most 8 (ErrLimitReached).
func (s *Sandbox) OpenSession(ctx context.Context, language string, opts ExecOptions) (string, error) {
	o := opts.options(false)
	delete(o, sandboxd1.OptTimeoutUSec)
	var session string
	err := s.call(ctx, fmt.Sprintf("opening a %s session in", language), sandboxd1.MethodOpenSession, []any{language, o}, &session)
	return session, err
}

// Eval runs code in a session, in the scope its earlier inputs left, and
// returns what it wrote (stdout and stderr together, at most 1 MiB) and
// its status: 0 when it ran without error. An unknown or closed session
// is ErrNoSuchCommand.
func (s *Sandbox) Eval(ctx context.Context, session, code string) (output string, status int, err error) {
	var st int32
	err = s.call(ctx, fmt.Sprintf("evaluating input in session %s of", session), sandboxd1.MethodEval, []any{session, code}, &output, &st)
	return output, int(st), err
}

// CloseSession ends a session and its interpreter.
func (s *Sandbox) CloseSession(ctx context.Context, session string) error {
	return s.call(ctx, fmt.Sprintf("closing session %s of", session), sandboxd1.MethodCloseSession, []any{session})
}

// ExposeOptions are how ExposePort exposes a port.
type ExposeOptions struct {
	// TCP also listens on a loopback TCP port of the host, whose
	// "127.0.0.1:N" ExposePort then returns; only the sandbox's owner
	// and root may connect to it.
	TCP bool
}

// ExposePort makes 127.0.0.1:port of the sandbox's own loopback
// reachable from the host, whatever its network, and returns where: a
// unix socket only the owner and root may connect to, or with TCP a
// loopback address. A port exposed already is ErrExists.
func (s *Sandbox) ExposePort(ctx context.Context, port uint16, opts ExposeOptions) (string, error) {
	o := map[string]dbus.Variant{}
	if opts.TCP {
		o[sandboxd1.OptTCP] = dbus.MakeVariant(true)
	}
	var addr string
	err := s.call(ctx, fmt.Sprintf("exposing port %d of", port), sandboxd1.MethodExposePort, []any{port, o}, &addr)
	return addr, err
}

// ClosePort stops exposing a port; the connections through it end.
func (s *Sandbox) ClosePort(ctx context.Context, port uint16) error {
	return s.call(ctx, fmt.Sprintf("closing port %d of", port), sandboxd1.MethodClosePort, []any{port})
}

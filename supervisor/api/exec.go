package api

import (
	"errors"
	"os"
	"syscall"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/guard"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
	"github.com/sandboxd/sandboxd/supervisor/commands"
)

// Exec(as argv, a{sv} options, h stdin, h stdout, h stderr) -> (s command)
// starts argv in the sandbox as the caller, with the caller's own files
// as its stdio: output streams to the caller, nothing passes through the
// daemon. It returns once the command runs; CommandExited, sent to the
// caller alone, tells how it ended. Options: Environment (as, KEY=value),
// WorkingDirectory (s), Root (b: root of the sandbox's user namespace; in a sandbox without one, only for root), TimeoutUSec (t),
// OutputLimit (t, bytes of stdout and stderr together), Detach (b: what
// the command started and left its process group keeps running after it
// ends; by default everything it started ends with it). A terminal, an
// anonymous inode (eventfd, pidfd, io_uring, ...), a directory or an
// O_PATH descriptor is refused as stdio: ExecTerminal gives a command a
// terminal of the sandbox's own.
func (o sandboxObject) Exec(sender dbus.Sender, msg dbus.Message, argv []string, opts map[string]dbus.Variant,
	stdin, stdout, stderr dbus.UnixFD) (string, *dbus.Error) {
	files, derr := adoptPassed(msg, "Exec", stdin, stdout, stderr)
	if derr != nil {
		return "", derr
	}
	defer func() { // the init has its own copies
		for _, f := range files {
			f.Close()
		}
	}()
	// Checked here, before anything reaches the sandbox's init: a
	// terminal, a pidfd, an io_uring or any other handle on the caller's
	// kernel objects is no stream a sandbox may hold.
	if err := nsinit.CheckStdio(files); err != nil {
		return "", dbusError(sandboxd1.ErrorInvalidArgs, "Exec: %v; pass a pipe, a socket or a file", err)
	}
	cmd, derr := o.exec(sender, msg, "Exec", argv, opts, func(e *commands.ExecOptions) { e.Stdio = files })
	if derr != nil {
		return "", derr
	}
	return cmd.ID, nil
}

// ExecTerminal(as argv, a{sv} options, q rows, q cols) -> (s command,
// h terminal) starts argv as Exec does, on a new pseudo-terminal of the
// sandbox's: the caller reads and writes the terminal's master, and sets
// its size there (TIOCSWINSZ).
func (o sandboxObject) ExecTerminal(sender dbus.Sender, msg dbus.Message, argv []string, opts map[string]dbus.Variant,
	rows, cols uint16) (string, dbus.UnixFD, *dbus.Error) {
	cmd, derr := o.exec(sender, msg, "ExecTerminal", argv, opts, func(e *commands.ExecOptions) {
		e.PTY, e.Rows, e.Cols = true, rows, cols
	})
	if derr != nil {
		return "", -1, derr
	}
	// godbus writes the reply after this returns, maybe after the command
	// ended (at once, on a busy machine): the reply gets a copy of the
	// master, closed once written; ours is closed when the command ends
	// (copied first: the command may have ended already).
	master := cmd.Master
	fd := dbus.UnixFD(-1)
	var err error
	if msg.Flags&dbus.FlagNoReplyExpected == 0 { // else no reply: nothing to hand off
		fd, err = guard.HandOff(master)
	}
	if err != nil {
		master.Close() // the command's terminal hangs up: it ends
		return "", -1, dbusError(sandboxd1.ErrorFailed, "ExecTerminal: %v", err)
	}
	go func() { <-cmd.Done(); master.Close() }()
	return cmd.ID, fd, nil
}

func (o sandboxObject) exec(sender dbus.Sender, msg dbus.Message, action string, argv []string,
	in map[string]dbus.Variant, set func(*commands.ExecOptions)) (*commands.Command, *dbus.Error) {
	s := o.s
	r, derr := s.begin(sender, action)
	if derr != nil {
		return nil, derr
	}
	id, derr := objectID(msg)
	if derr != nil {
		return nil, s.end(r, "", derr)
	}
	if _, derr := s.lookup(r, id); derr != nil {
		return nil, s.end(r, id, derr)
	}
	opts := commands.ExecOptions{Argv: argv, UID: r.who.UID}
	if err := options.Exec(&opts, in); err != nil {
		return nil, s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs, "%s: %v", action, err))
	}
	set(&opts)
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return nil, derr
	}
	cmd, err := c.Exec(r.ctx, id, opts)
	if err != nil {
		return nil, s.end(r, id, fromSupervisor(err))
	}
	go func() {
		res := cmd.Result()
		code := res.Code
		if res.How != "exited" {
			code = res.ExitCode()
		}
		s.emitTo(string(sender), sandboxd1.SandboxPath(id), "CommandExited", cmd.ID, res.How, int32(code), int32(res.Signal))
	}()
	return cmd, s.end(r, id, nil)
}

// Signal(s command, i signal) sends a signal to a running command's
// process group (Ctrl-C of a client: SIGINT).
func (o sandboxObject) Signal(sender dbus.Sender, msg dbus.Message, command string, signal int32) *dbus.Error {
	s := o.s
	r, derr := s.begin(sender, "Signal")
	if derr != nil {
		return derr
	}
	id, derr := objectID(msg)
	if derr != nil {
		return s.end(r, "", derr)
	}
	if _, derr := s.lookup(r, id); derr != nil {
		return s.end(r, id, derr)
	}
	if signal <= 0 || signal > 64 {
		return s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs, "signal %d: want 1..64", signal))
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return derr
	}
	if err := c.Signal(r.ctx, id, command, syscall.Signal(signal)); err != nil {
		if errors.Is(err, commands.ErrNoCommand) {
			return s.end(r, id, dbusError(sandboxd1.ErrorNoSuchCommand, "%v", err))
		}
		return s.end(r, id, fromSupervisor(err))
	}
	return s.end(r, id, nil)
}

// commandsOf is the commands room, or the answer, ending r, that this
// server serves none.
func (s *Server) commandsOf(r *request, id string) (*commands.Commands, *dbus.Error) {
	if s.rooms.Commands == nil {
		return nil, s.end(r, id, dbusError(sandboxd1.ErrorFailed, "commands, processes, sessions and files are not served here"))
	}
	return s.rooms.Commands, nil
}

// adoptPassed takes the descriptors of a call of method (adoptFDs), once
// it has checked that the call carries descriptors at all. A call that
// carries none still has its "h" arguments, and the bus passes it on:
// godbus then hands over the indices themselves, which are numbers of the
// daemon's own descriptors (its bus socket, its state file) that
// adoptFDs would give the sandbox, and close.
func adoptPassed(msg dbus.Message, method string, fds ...dbus.UnixFD) ([]*os.File, *dbus.Error) {
	if n, _ := msg.Headers[dbus.FieldUnixFDs].Value().(uint32); n == 0 {
		return nil, dbusError(sandboxd1.ErrorInvalidArgs, "%s: its descriptors must be passed with the call, which carries none", method)
	}
	files, err := adoptFDs(fds...)
	if err != nil {
		return nil, dbusError(sandboxd1.ErrorFailed, "%s: taking the caller's descriptors: %v", method, err)
	}
	return files, nil
}

// adoptFDs takes the descriptors godbus received for one call: a caller
// may name one descriptor for several arguments, so each argument gets a
// copy of its own, and each number received is closed once.
func adoptFDs(fds ...dbus.UnixFD) ([]*os.File, error) {
	files := make([]*os.File, 0, len(fds))
	var err error
	for _, fd := range fds {
		var dup int
		if dup, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3); err != nil {
			break
		}
		files = append(files, os.NewFile(uintptr(dup), "caller's"))
	}
	closed := map[dbus.UnixFD]bool{}
	for _, fd := range fds {
		if !closed[fd] && fd >= 0 {
			closed[fd] = true
			_ = unix.Close(int(fd))
		}
	}
	if err != nil {
		for _, f := range files {
			f.Close()
		}
		return nil, err
	}
	return files, nil
}

// emitTo sends a signal to one client: command results are the caller's.
func (s *Server) emitTo(dest string, path dbus.ObjectPath, name string, values ...any) {
	msg := &dbus.Message{
		Type: dbus.TypeSignal,
		Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldPath:        dbus.MakeVariant(path),
			dbus.FieldInterface:   dbus.MakeVariant(sandboxd1.SandboxInterface),
			dbus.FieldMember:      dbus.MakeVariant(name),
			dbus.FieldDestination: dbus.MakeVariant(dest),
		},
		Body: values,
	}
	if len(values) > 0 {
		msg.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(values...))
	}
	if call := s.conn.Send(msg, nil); call.Err != nil {
		s.log.Error("emitting a D-Bus signal", "signal", name, "path", string(path), "error", call.Err)
	}
}

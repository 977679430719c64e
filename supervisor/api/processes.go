package api

import (
	"errors"
	"syscall"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
	"github.com/sandboxd/sandboxd/supervisor/commands"
)

// Background processes: Spawn, ListProcesses, ReadLog, SignalProcess, and
// the ProcessExited signal to the sandbox's owner and admins.

// Spawn(as argv, a{sv} options) -> (s process) starts argv in the
// background, with Exec's options (Environment, WorkingDirectory, Root,
// TimeoutUSec; Detach and OutputLimit mean nothing here): its stdin is
// /dev/null, its stdout and stderr go to its log (ReadLog), kept by the
// sandbox, which it outlives the call, the caller and a daemon restart
// in. ProcessExited tells its end. Restart (b) declares it: it is
// spawned again each time the sandbox starts.
func (o sandboxObject) Spawn(sender dbus.Sender, msg dbus.Message, argv []string, in map[string]dbus.Variant) (string, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodSpawn)
	if derr != nil {
		return "", derr
	}
	opts := commands.ExecOptions{Argv: argv, UID: r.who.UID}
	if err := options.Spawn(&opts, in); err != nil {
		return "", s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs, "Spawn: %v", err))
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return "", derr
	}
	proc, err := c.Spawn(r.ctx, id, opts)
	if err != nil {
		return "", s.end(r, id, fromSupervisor(err))
	}
	return proc, s.end(r, id, nil)
}

// ListProcesses() -> a(sasuttsii) lists the sandbox's background
// processes, oldest first (sandboxd1.ProcessEntry).
func (o sandboxObject) ListProcesses(sender dbus.Sender, msg dbus.Message) ([]sandboxd1.ProcessEntry, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodListProcesses)
	if derr != nil {
		return nil, derr
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return nil, derr
	}
	ps, err := c.ListProcesses(r.ctx, id)
	if err != nil {
		return nil, s.end(r, id, fromSupervisor(err))
	}
	out := make([]sandboxd1.ProcessEntry, 0, len(ps))
	for _, p := range ps {
		out = append(out, processEntry(p))
	}
	return out, s.end(r, id, nil)
}

// ReadLog(s process, t offset, u max) -> (ay data, t next, b ended)
// reads at most max bytes (64 KiB at most) of the process's output from
// offset (bytes since it started; a log rotated past offset gives what it
// kept, from later); next is where to read on; ended once the process has
// ended and its log is read to the end.
func (o sandboxObject) ReadLog(sender dbus.Sender, msg dbus.Message, process string, offset uint64, max uint32) ([]byte, uint64, bool, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodReadLog)
	if derr != nil {
		return nil, 0, false, derr
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return nil, 0, false, derr
	}
	chunk, err := c.ReadLog(r.ctx, id, process, offset, max)
	if err != nil {
		return nil, 0, false, s.end(r, id, processError(err))
	}
	if chunk.Data == nil {
		chunk.Data = []byte{}
	}
	return chunk.Data, chunk.Next, chunk.Ended, s.end(r, id, nil)
}

// SignalProcess(s process, i signal) sends a signal to a background
// process's process group.
func (o sandboxObject) SignalProcess(sender dbus.Sender, msg dbus.Message, process string, signal int32) *dbus.Error {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodSignalProcess)
	if derr != nil {
		return derr
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return derr
	}
	if err := c.SignalProcess(r.ctx, id, process, syscall.Signal(signal)); err != nil {
		return s.end(r, id, processError(err))
	}
	return s.end(r, id, nil)
}

// beginOn begins a call on the sandbox the message's path names, which the
// caller must be allowed to see.
func (o sandboxObject) beginOn(sender dbus.Sender, msg dbus.Message, action string) (*request, string, *dbus.Error) {
	s := o.s
	r, derr := s.begin(sender, action)
	if derr != nil {
		return r, "", derr
	}
	id, derr := objectID(msg)
	if derr != nil {
		return r, "", s.end(r, "", derr)
	}
	if _, derr := s.lookup(r, id); derr != nil {
		return r, id, s.end(r, id, derr)
	}
	return r, id, nil
}

// processError names a process that is not there.
func processError(err error) *dbus.Error {
	if errors.Is(err, commands.ErrNoProcess) {
		return dbusError(sandboxd1.ErrorNoSuchCommand, "%v", err)
	}
	return fromSupervisor(err)
}

// processEntry is p on the wire.
func processEntry(p nsinit.Process) sandboxd1.ProcessEntry {
	e := sandboxd1.ProcessEntry{ID: p.ID, Argv: p.Argv, PID: uint32(p.PID), Started: micros(p.Started)}
	if e.Argv == nil {
		e.Argv = []string{}
	}
	if !p.Running() {
		e.Ended, e.How, e.Status, e.Signal = micros(p.Ended), p.Result.How, int32(p.Result.ExitCode()), int32(p.Result.Signal)
		if p.Result.How == nsinit.Exited {
			e.Status = int32(p.Result.Code)
		}
	}
	return e
}

// processExited sends ProcessExited(s process, s how, i status, i signal)
// to the sandbox's owner's and the admins' connections.
func (s *Server) processExited(sandbox string, p nsinit.Process) {
	e := processEntry(p)
	s.mu.Lock()
	owner, ok := s.aud.Owner(sandbox)
	s.mu.Unlock()
	if !ok {
		owner = 0 // unknown: admins alone hear it
	}
	s.emit(owner, sandboxd1.SandboxPath(sandbox), sandboxd1.SandboxInterface, sandboxd1.SignalProcessExited, p.ID, e.How, e.Status, e.Signal)
}

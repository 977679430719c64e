package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// How a command ended (ExitStatus.How), as CommandExited tells it.
const (
	HowExited      = "exited"       // Code is its exit status
	HowSignaled    = "signaled"     // Signal ended it
	HowOOMKilled   = "oom-killed"   // the sandbox's memory limit killed it
	HowTimedOut    = "timed-out"    // ExecOptions.Timeout ended it
	HowOutputLimit = "output-limit" // ExecOptions.OutputLimit ended it
	HowLost        = "lost"         // the sandbox ended first (a rollback, a destroy)
)

// killWait is how long Exec waits, after ctx ended and the command was
// sent SIGKILL, for the daemon to tell that it ended.
const killWait = 10 * time.Second

// ExitStatus is how a command ended.
type ExitStatus struct {
	// How is one of the How* values.
	How string `json:"how"`
	// Code is the exit status as a shell gives it: the command's own
	// when it exited, 128+N when signal N ended it.
	Code int `json:"code"`
	// Signal is the signal that ended it; 0 if none.
	Signal int `json:"signal,omitempty"`
}

// Success says whether the command exited with status 0.
func (e ExitStatus) Success() bool { return e.How == HowExited && e.Code == 0 }

// String reads "exit status 1", "signaled (killed)", "timed-out (status 137)".
func (e ExitStatus) String() string {
	switch e.How {
	case HowExited:
		return "exit status " + strconv.Itoa(e.Code)
	case HowSignaled:
		return "signaled (" + syscall.Signal(e.Signal).String() + ")"
	}
	return fmt.Sprintf("%s (status %d)", e.How, e.Code)
}

// ExecOptions are how a command runs. Spawn and OpenSession take Env,
// Dir, Root and Timeout of them, and Spawn Restart.
type ExecOptions struct {
	// Stdin is the command's stdin; nil is /dev/null. An *os.File is
	// passed to the command as it is; another Reader (or a terminal) is
	// copied to it through a pipe.
	Stdin io.Reader
	// Stdout and Stderr take the command's output; nil is /dev/null.
	// An *os.File is passed as it is; other Writers are written to from
	// pipes while the command runs (one pipe when both are the same
	// Writer, so that it is never written to twice at once), and never
	// after Exec returns.
	Stdout, Stderr io.Writer
	// Env is KEY=value added to (or replacing) the command's PATH,
	// HOME, USER, ... .
	Env []string
	// Dir is its working directory in the sandbox; "" is the project's.
	Dir string
	// Root runs it as root of the sandbox's user namespace (in a sandbox
	// without one, for root only).
	Root bool
	// Timeout ends it (HowTimedOut) after this long; 0 is no bound.
	Timeout time.Duration
	// OutputLimit ends it (HowOutputLimit) once stdout and stderr
	// together passed this many bytes; 0 is no bound.
	OutputLimit sandboxd1.Size
	// Detach leaves what the command moved out of its process group
	// (setsid) running after it ends.
	Detach bool
	// Restart (Spawn only) declares the process in the sandbox's record:
	// it is started again each time the sandbox starts (Start, the
	// host's reboot, a rollback).
	Restart bool
}

// options are o as Exec's a{sv}; Spawn and OpenSession take fewer.
func (o ExecOptions) options(full bool) map[string]dbus.Variant {
	m := map[string]dbus.Variant{}
	if len(o.Env) > 0 {
		m[sandboxd1.OptEnvironment] = dbus.MakeVariant(o.Env)
	}
	if o.Dir != "" {
		m[sandboxd1.OptWorkingDirectory] = dbus.MakeVariant(o.Dir)
	}
	if o.Root {
		m[sandboxd1.OptRoot] = dbus.MakeVariant(true)
	}
	if o.Timeout > 0 {
		m[sandboxd1.OptTimeoutUSec] = dbus.MakeVariant(micros(o.Timeout))
	}
	if full && o.OutputLimit > 0 {
		m[sandboxd1.OptOutputLimit] = dbus.MakeVariant(uint64(o.OutputLimit))
	}
	if full && o.Detach {
		m[sandboxd1.OptDetach] = dbus.MakeVariant(true)
	}
	return m
}

// WireOptions are o as Exec's a{sv} on the bus (Stdin, Stdout and
// Stderr aside), for a caller that makes, with the same options, a call
// this package does not wrap: ExecTerminal's, sandboxctl's Exec that
// forwards the user's signals.
func (o ExecOptions) WireOptions() map[string]dbus.Variant { return o.options(true) }

// Exec runs argv in the sandbox as the caller and waits for it to end.
// A command that ran returns its ExitStatus and a nil error, whatever
// its status; an error means it could not start, or its end could not be
// learnt (ErrDaemonRestarted). When ctx ends first, the command is killed
// (SIGKILL, its whole process group) and Exec returns ctx's error.
func (s *Sandbox) Exec(ctx context.Context, argv []string, opts ExecOptions) (ExitStatus, error) {
	op := "running " + commandName(argv) + " in " + s.label()
	if len(argv) == 0 {
		return ExitStatus{}, newError(op, sandboxd1.ErrorInvalidArgs, "no command given")
	}
	w, err := s.c.watcher(ctx)
	if err != nil {
		return ExitStatus{}, fmt.Errorf("%s: %w", op, err)
	}
	daemon, err := w.owner(ctx)
	if err != nil {
		return ExitStatus{}, fmt.Errorf("%s: %w", op, err)
	}
	files, err := newStdio(opts.Stdin, opts.Stdout, opts.Stderr)
	if err != nil {
		return ExitStatus{}, fmt.Errorf("%s: %w", op, err)
	}
	id, err := s.start(ctx, op, argv, opts, files)
	if err != nil {
		_ = files.finish(true)
		return ExitStatus{}, err
	}
	exited := w.wait(id, daemon)
	// ctx may have ended while the command started: then it is killed
	// at once, whatever a select would pick.
	if ctx.Err() == nil {
		select {
		case r := <-exited:
			if r.err != nil {
				_ = files.finish(true)
				return ExitStatus{}, fmt.Errorf("%s (command %s): %w", op, id, r.err)
			}
			if err := files.finish(false); err != nil {
				return r.status, fmt.Errorf("%s: %w", op, err)
			}
			return r.status, nil
		case <-ctx.Done():
		}
	}
	s.kill(ctx, w, id, exited)
	_ = files.finish(true)
	return ExitStatus{}, fmt.Errorf("%s: %w", op, ctx.Err())
}

// start calls Exec and returns the command's id. The call is not cut
// short by ctx, since the command may run by the time it would be: when
// ctx ends first, start still waits (a while) for the id, which the
// reply brings at once, for Exec to kill the command; past that, the
// command is killed whenever the reply comes.
func (s *Sandbox) start(ctx context.Context, op string, argv []string, opts ExecOptions, files *stdio) (string, error) {
	type reply struct {
		id  string
		err error
	}
	replied := make(chan reply, 1)
	go func() {
		var id string
		err := call(context.WithoutCancel(ctx), s.c.object(s.id), op, sandboxd1.SandboxInterface, sandboxd1.MethodExec,
			append([]any{argv, opts.options(true)}, files.fds()...), &id)
		files.release() // the daemon has its copies; the pipes end with the command
		replied <- reply{id, err}
	}()
	select {
	case r := <-replied:
		return r.id, r.err
	case <-ctx.Done():
	}
	select {
	case r := <-replied:
		return r.id, r.err
	case <-time.After(killWait):
		go func() {
			if r := <-replied; r.err == nil {
				s.signal(context.WithoutCancel(ctx), r.id, syscall.SIGKILL)
			}
		}()
		return "", fmt.Errorf("%s: %w", op, ctx.Err())
	}
}

// kill sends SIGKILL to command id and waits a while for its end, so
// that it is gone when Exec returns.
func (s *Sandbox) kill(ctx context.Context, w *exitWatcher, id string, exited <-chan exitResult) {
	s.signal(context.WithoutCancel(ctx), id, syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(killWait):
		w.forget(id)
	}
}

// signal sends sig to command id's process group; a command that ended
// meanwhile (NoSuchCommand) is no error.
func (s *Sandbox) signal(ctx context.Context, id string, sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	_ = s.call(ctx, fmt.Sprintf("sending signal %d to command %s in", int(sig), id), sandboxd1.MethodSignal,
		[]any{id, int32(sig)})
}

// Output runs argv as Exec does and returns what it wrote to stdout and
// stderr; opts' Stdout and Stderr are not used. Give opts an OutputLimit
// where a command could print more than memory holds.
func (s *Sandbox) Output(ctx context.Context, argv []string, opts ExecOptions) (stdout, stderr []byte, st ExitStatus, err error) {
	var out, errOut bytes.Buffer
	opts.Stdout, opts.Stderr = &out, &errOut
	st, err = s.Exec(ctx, argv, opts)
	return out.Bytes(), errOut.Bytes(), st, err
}

// commandName names argv in errors: its program, quoted.
func commandName(argv []string) string {
	if len(argv) == 0 {
		return "a command"
	}
	return strconv.Quote(argv[0])
}

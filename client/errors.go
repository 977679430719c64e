package client

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Sentinels a caller branches on with errors.Is. Each stands for one of
// the daemon's D-Bus error names (sandboxd1/errors.go); the error itself
// is an *Error that keeps the daemon's own words.
var (
	// ErrAccessDenied: the daemon (org.sandboxd1.Error.AccessDenied) or
	// the bus's policy (org.freedesktop.DBus.Error.AccessDenied) refused
	// the caller.
	ErrAccessDenied = errors.New("access denied")
	// ErrNoSuchSandbox: no sandbox of that id, name or id prefix that the
	// caller may see (another user's sandbox reads the same).
	ErrNoSuchSandbox = errors.New("no such sandbox")
	// ErrNoSuchProject: the daemon knows no project of that name.
	ErrNoSuchProject = errors.New("no such project")
	// ErrNoSuchCheckpoint: the sandbox has no checkpoint of that name.
	ErrNoSuchCheckpoint = errors.New("no such checkpoint")
	// ErrNoSuchCommand: no running command, background process or
	// session of that id (or one of another caller's).
	ErrNoSuchCommand = errors.New("no such command, process or session")
	// ErrNoSuchPromotion: no promotion of that id that the caller may see.
	ErrNoSuchPromotion = errors.New("no such promotion")
	// ErrInvalidArgs: bad input (an unknown option, an impossible value,
	// a malformed name, a call of the wrong signature).
	ErrInvalidArgs = errors.New("invalid arguments")
	// ErrExists: the name is taken (a sandbox's, a checkpoint's, a
	// project's), or the port is exposed already.
	ErrExists = errors.New("exists already")
	// ErrConflict: the project changed, since the sandbox's base, paths
	// the sandbox changed too (Promote, Rebase); the message names them.
	ErrConflict = errors.New("conflict with the project's changes")
	// ErrBusy: another promotion of the same project is under way, or a
	// session has as many inputs waiting as it takes.
	ErrBusy = errors.New("busy")
	// ErrLimitReached: admission control or a per-sandbox cap refused it.
	ErrLimitReached = errors.New("limit reached")
	// ErrWrongState: the sandbox's state does not allow the call (a
	// frozen sandbox for Exec, nothing to promote).
	ErrWrongState = errors.New("wrong state")
	// ErrStopped: the sandbox is stopped (Sandbox.Stop); Start it
	// first.
	ErrStopped = errors.New("sandbox is stopped")
	// ErrNoIdmap: root inside the sandbox was asked for, and the sandbox
	// has no user namespace of its own.
	ErrNoIdmap = errors.New("no user namespace for root")
	// ErrFailed: the daemon could not do it for another reason; the
	// message says why.
	ErrFailed = errors.New("failed")
	// ErrNotRunning: nothing owns org.sandboxd1 on the system bus.
	ErrNotRunning = errors.New("sandboxd is not running")
	// ErrDaemonRestarted: sandboxd stopped or restarted while a command
	// ran, and with it went the command's status (the command itself may
	// still run).
	ErrDaemonRestarted = errors.New("sandboxd stopped or restarted while the command ran")
	// ErrNoSuchFile: the file API's path names nothing in the sandbox
	// (or a directory on its way is not one). It also matches
	// fs.ErrNotExist.
	ErrNoSuchFile = errors.New("no such file")
	// ErrNoProgram: Exec's or Spawn's program is not in the sandbox (not
	// in its PATH, or no such file): a shell's exit 127.
	ErrNoProgram = errors.New("no such program")
	// ErrNotExecutable: the program is there but cannot be run (no
	// permission, a directory, a format the kernel does not run): a
	// shell's exit 126.
	ErrNotExecutable = errors.New("not executable")
	// ErrTooLarge: a file is larger than the bound ReadFile was given.
	ErrTooLarge = errors.New("file too large")
)

// sentinels maps the D-Bus error names to the sentinels.
var sentinels = map[string]error{
	sandboxd1.ErrorAccessDenied:                ErrAccessDenied,
	sandboxd1.ErrorBusAccessDenied:             ErrAccessDenied,
	sandboxd1.ErrorNoSuchSandbox:               ErrNoSuchSandbox,
	sandboxd1.ErrorNoSuchProject:               ErrNoSuchProject,
	sandboxd1.ErrorNoSuchCheckpoint:            ErrNoSuchCheckpoint,
	sandboxd1.ErrorNoSuchCommand:               ErrNoSuchCommand,
	sandboxd1.ErrorNoSuchPromotion:             ErrNoSuchPromotion,
	sandboxd1.ErrorInvalidArgs:                 ErrInvalidArgs,
	sandboxd1.ErrorExists:                      ErrExists,
	sandboxd1.ErrorConflict:                    ErrConflict,
	sandboxd1.ErrorBusy:                        ErrBusy,
	sandboxd1.ErrorLimitReached:                ErrLimitReached,
	sandboxd1.ErrorWrongState:                  ErrWrongState,
	sandboxd1.ErrorStopped:                     ErrStopped,
	sandboxd1.ErrorNoIdmap:                     ErrNoIdmap,
	sandboxd1.ErrorNoSuchFile:                  ErrNoSuchFile,
	sandboxd1.ErrorNoProgram:                   ErrNoProgram,
	sandboxd1.ErrorNotExecutable:               ErrNotExecutable,
	sandboxd1.ErrorFailed:                      ErrFailed,
	sandboxd1.ErrorServiceUnknown:              ErrNotRunning,
	sandboxd1.ErrorNameHasNoOwner:              ErrNotRunning,
	sandboxd1.ErrorPropertyReadOnly:            ErrInvalidArgs,
	sandboxd1.ErrorUnknownProperty:             ErrInvalidArgs,
	sandboxd1.ErrorUnknownInterface:            ErrInvalidArgs,
	"org.freedesktop.DBus.Error.UnknownMethod": ErrInvalidArgs,
}

// Error is how a call to sandboxd failed: what the client was doing, and
// the error name and message the daemon (or the bus) answered with.
// errors.Is matches it against the sentinel of its name.
type Error struct {
	// Op says what was being done to what: `reading /etc/hosts in
	// sandbox 7a28fd100edf`.
	Op string
	// Name is the D-Bus error name, one of sandboxd1's Error* names
	// when the daemon answered.
	Name string
	// Message is the daemon's own text.
	Message string
	err     error // what godbus returned, for errors.As
}

// Error is Op and the daemon's message; Op alone is left out when the
// daemon's message starts with it already.
func (e *Error) Error() string {
	if e.Op == "" || strings.HasPrefix(e.Message, e.Op) {
		return e.Message
	}
	return e.Op + ": " + e.Message
}

// Is reports whether target is the sentinel of e's name (or, for
// ErrNoSuchFile, fs.ErrNotExist, as os's errors of a missing file).
func (e *Error) Is(target error) bool {
	s, ok := sentinels[e.Name]
	return ok && (s == target || s == ErrNoSuchFile && target == fs.ErrNotExist)
}

// Unwrap returns the error godbus returned (a dbus.Error), if any.
func (e *Error) Unwrap() error { return e.err }

// wrap turns an error of a call made while doing op into an *Error when
// the bus or the daemon answered with an error name, or wraps it with op
// otherwise (a context's end, a closed connection).
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var derr dbus.Error
	if errors.As(err, &derr) {
		msg := derr.Name
		if len(derr.Body) > 0 {
			if s, ok := derr.Body[0].(string); ok && s != "" {
				msg = s
			}
		}
		return &Error{Op: op, Name: derr.Name, Message: msg, err: err}
	}
	var perr *dbus.Error
	if errors.As(err, &perr) && perr != nil {
		return wrap(op, *perr)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// newError is an error the client itself finds, under a daemon's name
// (a sandbox no listing has, say), so that it matches the same sentinel.
func newError(op, name, format string, args ...any) error {
	return &Error{Op: op, Name: name, Message: fmt.Sprintf(format, args...)}
}

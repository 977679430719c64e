package verb

import (
	"errors"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5"

	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Exit codes of sandboxctl: stable, documented in its help and man page.
// `exec` and `shell` exit with the command's own status once it ran.
const (
	ExitOK          = 0
	ExitFailed      = 1 // the daemon could not do it, or another error
	ExitUsage       = 2 // a usage mistake: the message shows the right form
	ExitNotFound    = 3 // no such sandbox, project or checkpoint
	ExitDenied      = 4 // not allowed for this user
	ExitConflict    = 5 // the state does not allow it, a name is taken, a limit is reached
	ExitUnavailable = 6 // sandboxd is not running, or the system bus cannot be reached
	// As a shell does, for a command that could not be run.
	ExitNotExecutable = 126 // the program is there but cannot be run
	ExitNoProgram     = 127 // the program is not there
)

// ExitCodes documents the codes, for help and the man page.
const ExitCodes = `EXIT STATUS
   0  ok
   1  the daemon could not do it, or another error
   2  usage mistake (the message shows the right form)
   3  no such sandbox, project, checkpoint, promotion or file
   4  not allowed for this user
   5  conflict: the sandbox's state does not allow it, a name is taken, a limit is reached,
      a promotion's paths were changed in the project too
   6  sandboxd is not running, or the system bus cannot be reached
   exec and shell exit with the command's own status once it ran
   (128+N for a signal N, 124 when its timeout ended it); as a shell
   does, 127 when the program is not in the sandbox, 126 when it is
   there but cannot be run (run --detach too).`

// Error is a failure with its exit code and, where there is one, the fix.
type Error struct {
	Code int
	Msg  string
	Fix  string // how to put it right; "" when there is nothing to say
	Err  error
}

// Error is the message for the terminal: the daemon's words carry what a
// sandbox named (paths in a conflict, a check's error), so whatever in
// them would act on the terminal or start a line is escaped.
func (e *Error) Error() string {
	if e.Fix != "" {
		return termsafe.Text(e.Msg) + "\n  " + termsafe.Text(e.Fix)
	}
	return termsafe.Text(e.Msg)
}

func (e *Error) Unwrap() error { return e.Err }

// Usage is a usage mistake (exit 2); its message says the right form.
func Usage(format string, args ...any) *Error {
	return &Error{Code: ExitUsage, Msg: fmt.Sprintf(format, args...)}
}

// FromBus turns an error of a call to the daemon into an Error with the
// code a script branches on, keeping the daemon's words.
func FromBus(what string, err error) *Error {
	var already *Error
	if errors.As(err, &already) {
		return already
	}
	var derr dbus.Error
	var cerr *sbclient.Error
	if errors.As(err, &cerr) {
		// The Go client's error: its name and the daemon's words.
		derr = dbus.Error{Name: cerr.Name, Body: []any{cerr.Message}}
	}
	if derr.Name != "" || errors.As(err, &derr) {
		msg := what + ": " + dbusMessage(derr)
		if strings.HasPrefix(dbusMessage(derr), what) {
			msg = dbusMessage(derr) // the daemon said what it was doing already
		}
		switch derr.Name {
		case sandboxd1.ErrorNoSuchSandbox:
			return &Error{Code: ExitNotFound, Msg: msg, Fix: "see `sandboxctl list`", Err: err}
		case sandboxd1.ErrorNoSuchCheckpoint:
			return &Error{Code: ExitNotFound, Msg: msg, Fix: "see `sandboxctl checkpoints SANDBOX`", Err: err}
		case sandboxd1.ErrorNoSuchProject:
			return &Error{Code: ExitNotFound, Msg: msg, Fix: "see `sandboxctl project list`", Err: err}
		case sandboxd1.ErrorAccessDenied, "org.freedesktop.DBus.Error.AccessDenied":
			fix := "ask an administrator to add you to group sandboxd (or to [access] in /etc/sandboxd/sandboxd.toml)"
			switch {
			case strings.Contains(msg, "permission denied"):
				fix = "the file's owner and mode in the sandbox do not let you (sandboxctl exec SANDBOX -- ls -l PATH)"
			case strings.Contains(msg, "may not use project"):
				fix = "ask an administrator to list you in the project's users or groups (sandboxctl project add --user/--group, or [[project]] in /etc/sandboxd/sandboxd.toml)"
			case strings.Contains(msg, "members of group sandboxd may, their own directories"):
				fix = "ask an administrator to add you to group sandboxd (or to [access] in /etc/sandboxd/sandboxd.toml)"
			case strings.Contains(msg, "may not add projects") || strings.Contains(msg, "may not remove projects"):
				fix = "ask an administrator to add or remove it; a directory of your own you may adopt yourself (sandboxctl project adopt NAME PATH)"
			case strings.Contains(msg, "are for root and admins") || strings.Contains(msg, "did not adopt it"):
				fix = "ask an administrator (root or [access] admin_users, admin_groups) to do it"
			case strings.Contains(msg, "privileged files"):
				fix = "remove the set-id bits, capabilities or device nodes it names from the sandbox, or ask an administrator to promote with --allow-privileged"
			}
			return &Error{Code: ExitDenied, Msg: msg, Fix: fix, Err: err}
		case sandboxd1.ErrorNoIdmap:
			return &Error{Code: ExitDenied, Msg: msg, Fix: "run it without --root, or ask an administrator for a pool and root layers that can idmap (btrfs; see docs/userns.md)", Err: err}
		case sandboxd1.ErrorNoSuchFile:
			return &Error{Code: ExitNotFound, Msg: msg, Err: err}
		case sandboxd1.ErrorNoProgram:
			return &Error{Code: ExitNoProgram, Msg: msg, Fix: "is it installed in the sandbox, and in its PATH? (sandboxctl exec SANDBOX -- sh -c 'command -v NAME')", Err: err}
		case sandboxd1.ErrorNotExecutable:
			return &Error{Code: ExitNotExecutable, Msg: msg, Fix: "its mode, or its #! line, does not let you run it (sandboxctl exec SANDBOX -- ls -l PATH)", Err: err}
		case sandboxd1.ErrorNoSuchPromotion:
			return &Error{Code: ExitNotFound, Msg: msg, Fix: "see `sandboxctl promotions`", Err: err}
		case sandboxd1.ErrorConflict:
			return &Error{Code: ExitConflict, Msg: msg, Fix: "see each path's versions (sandboxctl versions SANDBOX PATH) and merge the project's change into the sandbox (sandboxctl merge SANDBOX PATH); then rebase (sandboxctl rebase), or promote with --force", Err: err}
		case sandboxd1.ErrorWrongState, sandboxd1.ErrorStopped, sandboxd1.ErrorLimitReached, sandboxd1.ErrorExists, sandboxd1.ErrorBusy:
			return &Error{Code: ExitConflict, Msg: msg, Err: err}
		case sandboxd1.ErrorInvalidArgs:
			return &Error{Code: ExitUsage, Msg: msg, Err: err}
		case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
			return notRunning(err)
		}
		return &Error{Code: ExitFailed, Msg: msg, Err: err}
	}
	msg := what + ": " + err.Error()
	if strings.HasPrefix(err.Error(), what) {
		msg = err.Error() // the Go client said what it was doing already
	}
	return &Error{Code: ExitFailed, Msg: msg, Err: err}
}

func dbusMessage(e dbus.Error) string {
	if len(e.Body) > 0 {
		if s, ok := e.Body[0].(string); ok {
			return s
		}
	}
	return e.Name
}

func notRunning(err error) *Error {
	return &Error{Code: ExitUnavailable, Msg: "sandboxd is not running (nothing owns org.sandboxd1 on the system bus)",
		Fix: "start it with `systemctl start sandboxd`; `journalctl -u sandboxd` says why it stopped", Err: err}
}

// ExitWith ends sandboxctl with a command's own status, saying nothing.
type ExitWith int

func (e ExitWith) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

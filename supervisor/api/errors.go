package api

import (
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/internal/termsafe"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
)

// ErrNameTaken: another connection (another sandboxd) owns org.sandboxd1.
var ErrNameTaken = errors.New("another sandboxd owns " + sandboxd1.BusName)

// ErrStopping: the server is closing and takes no new calls.
var ErrStopping = errors.New("sandboxd is stopping")

func dbusError(name, format string, args ...any) *dbus.Error {
	return dbus.NewError(name, []any{fmt.Sprintf(format, args...)})
}

// fromSupervisor names err, an error of the supervisor, for the bus. The
// message is err's own text: it already says what was done to what.
func fromSupervisor(err error) *dbus.Error {
	name := sandboxd1.ErrorFailed
	switch {
	case errors.Is(err, supervisor.ErrNotFound):
		name = sandboxd1.ErrorNoSuchSandbox
	case errors.Is(err, supervisor.ErrUnknownProject):
		name = sandboxd1.ErrorNoSuchProject
	case errors.Is(err, supervisor.ErrInvalid):
		name = sandboxd1.ErrorInvalidArgs
	case errors.Is(err, supervisor.ErrLimitReached):
		name = sandboxd1.ErrorLimitReached
	case errors.Is(err, supervisor.ErrStopped):
		name = sandboxd1.ErrorStopped
	case errors.Is(err, supervisor.ErrWrongState), errors.Is(err, supervisor.ErrProjectInUse):
		name = sandboxd1.ErrorWrongState
	case errors.Is(err, supervisor.ErrExists):
		name = sandboxd1.ErrorExists
	case errors.Is(err, supervisor.ErrInvalidProject):
		name = sandboxd1.ErrorInvalidArgs
	case errors.Is(err, checkpoints.ErrNoCheckpoint):
		name = sandboxd1.ErrorNoSuchCheckpoint
	case errors.Is(err, supervisor.ErrConflict):
		name = sandboxd1.ErrorConflict
	case errors.Is(err, supervisor.ErrBusy):
		name = sandboxd1.ErrorBusy
	case errors.Is(err, promotion.ErrNoPromotion):
		name = sandboxd1.ErrorNoSuchPromotion
	case errors.Is(err, promotion.ErrNothingToPromote), errors.Is(err, promotion.ErrChangeDiffers), errors.Is(err, commands.ErrNotBooted):
		name = sandboxd1.ErrorWrongState
	case errors.Is(err, supervisor.ErrAccessDenied):
		name = sandboxd1.ErrorAccessDenied
	case errors.Is(err, supervisor.ErrNoIdmap):
		name = sandboxd1.ErrorNoIdmap
	case errors.Is(err, commands.ErrNoFile):
		name = sandboxd1.ErrorNoSuchFile
	case errors.Is(err, nsinit.ErrNoProgram):
		name = sandboxd1.ErrorNoProgram
	case errors.Is(err, nsinit.ErrNotExecutable):
		name = sandboxd1.ErrorNotExecutable
	}
	// The text carries what sandboxes named (a conflict's paths, a
	// check's error): escaped here, so that no client (busctl, a script)
	// shows a raw escape sequence or a line break from it.
	return dbus.NewError(name, []any{termsafe.Line(err.Error())})
}

// noSuchSandbox is the answer for an id that names no sandbox the caller
// may see: the same words whether it does not exist or is someone else's,
// so that a caller cannot probe for other users' sandboxes.
func noSuchSandbox(id string) *dbus.Error {
	return dbusError(sandboxd1.ErrorNoSuchSandbox, "no sandbox %q", id)
}

func invalidID(id string) *dbus.Error {
	return dbusError(sandboxd1.ErrorInvalidArgs, "%q is not a sandbox id (1 to %d of A-Z, a-z, 0-9 and _)", id, sandboxd1.MaxIDLen)
}

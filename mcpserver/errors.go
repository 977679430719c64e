package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/client"
)

// errInvalid marks bad input that the server itself finds, before asking
// the daemon; it reads as the daemon's InvalidArgs does.
var errInvalid = client.ErrInvalidArgs

// invalidf is bad input, said as format says it.
func invalidf(format string, args ...any) error {
	return &inputError{msg: fmt.Sprintf(format, args...)}
}

type inputError struct{ msg string }

func (e *inputError) Error() string        { return e.msg }
func (e *inputError) Is(target error) bool { return target == errInvalid }

// hints say what an agent can do about an error, by its kind. The
// daemon's own words (in the error) say what was done to what.
var hints = []struct {
	err  error
	hint string
}{
	{client.ErrNoSuchSandbox, "sandbox_list lists the sandboxes you may use; sandbox_create makes one"},
	{client.ErrNoSuchProject, "sandbox_list lists the projects you may make sandboxes of"},
	{client.ErrNoProgram, "the program is not in the sandbox's PATH as its user sees it: shell \"command -v NAME\" tells, and exec with shell runs a line as sh would"},
	{client.ErrNotExecutable, "the program is there but cannot be run (its mode, a directory, a format the kernel does not run): exec shell \"ls -l PATH\" shows it"},
	{client.ErrNoSuchFile, "file_list shows what is there (a relative path starts at the project's directory)"},
	{client.ErrNoSuchCheckpoint, "sandbox_status lists the sandbox's checkpoints"},
	{client.ErrNoSuchCommand, "logs without a process lists the sandbox's background processes"},
	{client.ErrNoSuchPromotion, "promote returns the id of the promotion it started"},
	{client.ErrTooLarge, "read it in parts (offset and max_bytes), or look into it with exec (head, tail, grep, wc)"},
	{client.ErrAccessDenied, "the daemon's access rules refuse it to the user the MCP server runs as; retrying will not help"},
	{client.ErrNoIdmap, "run it without root: this sandbox has no user namespace of its own"},
	{errRebaseConflict, "the sandbox is left as it was: see each conflicting path's three versions (conflict_versions) and merge the project's change into the sandbox's file (merge, or edit it to hold both); then rebase again, which takes a file that holds the project's change"},
	{client.ErrConflict, "the project changed the same paths since this sandbox was made: rebase the sandbox onto the project (the rebase tool), check the result, and promote again"},
	{client.ErrBusy, "another promotion of the project, or other inputs of the same session, are under way: try again once they ended"},
	{client.ErrLimitReached, "a limit of the daemon's was reached: destroy sandboxes (or sessions, processes) you no longer need"},
	{errNotBooted, "make a sandbox with sandbox_create and boot true to run services with systemctl in it"},
	{client.ErrStopped, "the sandbox is stopped: start it with sandbox_start (its files are as it left them; its background processes spawned with restart start again)"},
	{client.ErrWrongState, "sandbox_status says the sandbox's state"},
	{client.ErrExists, "choose another name"},
	{client.ErrNotRunning, "sandboxd is not running on this host: an administrator must start it (systemctl start sandboxd)"},
	{client.ErrDaemonRestarted, "sandboxd restarted: the command may still run; spawn and logs follow a command across restarts"},
}

// toolError is err as a tool's error text: its message, and what to do
// when there is something to say.
func toolError(err error) error {
	switch {
	case errors.Is(err, errServerEnding):
		return fmt.Errorf("%w: the call was cancelled", err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%w (the call was cancelled; what it started was stopped)", err)
	}
	if errors.Is(err, client.ErrAccessDenied) && strings.Contains(err.Error(), "permission denied") {
		return fmt.Errorf("%w\n(the file's owner and mode in the sandbox do not let you: exec ls -l shows them; with root the call acts as the sandbox's own root)", err)
	}
	for _, h := range hints {
		if errors.Is(err, h.err) {
			return fmt.Errorf("%w\n(%s)", err, h.hint)
		}
	}
	return err
}

package commands

// What a caller asks of a command, and how a command run for its output
// ended: this room runs them (Exec, RunCaptured); others (promotion's
// checks, try) ask it through Runner.

import (
	"context"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
)

// ExecOptions are what a caller asks of a command in a sandbox.
type ExecOptions struct {
	Argv []string
	// Env is added to the command's environment (PATH, HOME, USER, ...
	// are set for the caller already; these override them).
	Env []string
	// Dir is the working directory inside the sandbox ("": the
	// project's path).
	Dir string
	// UID is the caller's: the command runs as that user. AsRoot runs it
	// as root with root's kept capabilities: the root of the sandbox's
	// user namespace, which any caller may ask for, or, in a sandbox
	// without one, the host's, which only root may. Root's command
	// without AsRoot is uid 0 with no capability.
	UID    uint32
	AsRoot bool
	// Stdio are the caller's stdin, stdout and stderr, which the command
	// gets as its own; the caller keeps (and closes) its files. With PTY
	// there are none: the command gets a new terminal of Rows x Cols,
	// whose master is Command.Master.
	Stdio      []*os.File
	PTY        bool
	Rows, Cols uint16
	// Timeout ends the command after this long (0: none); OutputLimit
	// once it has written this many bytes (0: none).
	Timeout     time.Duration
	OutputLimit int64
	// Detach leaves what the command started running after it ends, if
	// it left the command's process group (setsid). Without it, the
	// command runs in a cgroup of its own, and everything in that cgroup
	// ends with it.
	Detach bool
	// Restart (Spawn only) declares the background process in the
	// sandbox's record: it is spawned again, as asked now, each time the
	// sandbox starts (Start, the host's reboot, a rollback, a rebase),
	// until a caller ends it with SIGTERM, SIGKILL, SIGINT or SIGQUIT.
	Restart bool
}

// Captured is how a command run for its output ended: a promotion's
// check, a step of Try.
type Captured struct {
	nsinit.Result
	Output string // the end of what it wrote to stdout and stderr
	Took   time.Duration
}

// Runner runs a command in a sandbox for its output: o with /dev/null
// for stdin and one pipe for stdout and stderr, how it ended, the last
// max bytes of its output and how long it took. The commands room is
// one; promotion's checks and try use it.
type Runner interface {
	RunCaptured(ctx context.Context, id string, o ExecOptions, max int) (Captured, error)
}

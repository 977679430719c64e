package replica

// The shell scripts a Replica runs on the replica's host, one per
// operation, each after the prelude (its variables and the exit statuses)
// and the shared functions. They live in scripts/ as shell, where they
// can be read and checked as such.

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
)

var (
	//go:embed scripts/functions.sh
	scriptFunctions string
	//go:embed scripts/has.sh
	hasScript string
	//go:embed scripts/receive.sh
	receiveScript string
	//go:embed scripts/switch.sh
	switchScript string
	//go:embed scripts/revert.sh
	revertScript string
	//go:embed scripts/check.sh
	checkScript string
	//go:embed scripts/forget.sh
	forgetScript string
)

// Exit statuses of the scripts, read back into errors.
const (
	exitFailed      = 10
	exitNotFound    = 11
	exitExists      = 12
	exitNotBtrfs    = 13
	exitBusy        = 14
	exitNoTool      = 15
	exitCorrupt     = 16
	exitNotVolume   = 17
	exitInterrupted = 18
	exitAborted     = 19
	exitSSH         = 255 // ssh's own failure
)

// exitStatuses is the one table of the scripts' exit statuses: the
// prelude defines each as a shell variable (E_NOT_FOUND=11), which the
// scripts fail with (fail $E_NOT_FOUND "..."), and statusError reads a
// status back into its error (nil: a failure with no sentinel of its own).
// TestScriptExitStatuses checks that the scripts use no other.
var exitStatuses = []struct {
	name string
	code int
	err  error
}{
	{"E_FAILED", exitFailed, nil},
	{"E_NOT_FOUND", exitNotFound, cowfs.ErrNotFound},
	{"E_EXISTS", exitExists, cowfs.ErrExists},
	{"E_NOT_BTRFS", exitNotBtrfs, cowfs.ErrUnsupportedFS},
	{"E_BUSY", exitBusy, ErrBusy},
	{"E_NO_TOOL", exitNoTool, nil},
	{"E_CORRUPT", exitCorrupt, cowfs.ErrCorruptStream},
	{"E_NOT_VOLUME", exitNotVolume, cowfs.ErrNotVolume},
	{"E_INTERRUPTED", exitInterrupted, ErrInterrupted},
	{"E_ABORTED", exitAborted, nil},
}

// scriptPrelude defines the exit statuses for the scripts.
var scriptPrelude = func() string {
	var b strings.Builder
	for _, e := range exitStatuses {
		fmt.Fprintf(&b, "%s=%d\n", e.name, e.code)
	}
	return b.String()
}()

// statusError is the sentinel a script's exit status stands for (nil:
// none).
func statusError(code int) error {
	for _, e := range exitStatuses {
		if e.code == code {
			return e.err
		}
	}
	return nil
}

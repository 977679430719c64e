// Package crashpoint names the steps of sandboxd's multi-step operations,
// so that a test can kill the daemon at each one and check what its next
// start makes of the leftovers. The daemon dies at step NAME when its
// environment has SANDBOXD_CRASHPOINT=NAME (set by the tests through a
// drop-in of the unit); without it, Hit does nothing and costs a string
// compare.
package crashpoint

import (
	"fmt"
	"os"
	"syscall"
)

// Env is the variable that arms a crash point.
const Env = "SANDBOXD_CRASHPOINT"

var armed = os.Getenv(Env)

// The steps of a promotion (promote/design.md), in order.
const (
	PromoteRecorded      = "promote-recorded"       // the promotion's record is written; nothing else
	PromoteSource        = "promote-source"         // the sandbox's read-only source snapshot exists
	PromoteRollbackPoint = "promote-rollback-point" // the stage's rollback point exists; nothing applied
	PromoteApplying      = "promote-applying"       // half the change set is written to the stage
	PromoteApplied       = "promote-applied"        // all of it is written and synced
	PromoteChecking      = "promote-checking"       // the checks' sandbox runs
	PromoteChecked       = "promote-checked"        // the checks passed; the stage is not yet recorded passed
	PromoteRollingBack   = "promote-rolling-back"   // a check failed; the rollback is next
	PromotePassed        = "promote-passed"         // the stage is recorded passed; its rollback point remains
)

// Promotion lists the promotion's crash points, in order.
var Promotion = []string{
	PromoteRecorded, PromoteSource, PromoteRollbackPoint, PromoteApplying, PromoteApplied,
	PromoteChecking, PromoteChecked, PromoteRollingBack, PromotePassed,
}

// Hit kills this process with SIGKILL if name is the armed crash point.
func Hit(name string) {
	if armed == "" || armed != name {
		return
	}
	fmt.Fprintf(os.Stderr, "crashpoint: killed at %s\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// Package crashpoint names the steps of sandboxd's multi-step operations,
// so that a test can kill the daemon at each one and check what its next
// start makes of the leftovers. The daemon dies at step NAME when its
// environment has SANDBOXD_CRASHPOINT=NAME (set by the tests through a
// drop-in of the unit); without it, Hit does nothing and costs a string
// compare.
//
// An armed point kills once: the start that follows its kill (systemd's
// restart, with the same environment) runs disarmed, or a step that the
// start repeats (finishDestroy, under Reconcile) would kill every start.
// The kill leaves a mark, a file in the service's runtime directory that
// the next start removes; a start without a mark is armed again.
package crashpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Env is the variable that arms a crash point.
const Env = "SANDBOXD_CRASHPOINT"

var armed = arm(os.Getenv(Env))

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

// The steps of an adoption (supervisor AdoptProject), in order.
const (
	AdoptCopied    = "adopt-copied"    // the volume holds a copy of the directory; recorded copying
	AdoptSwitching = "adopt-switching" // recorded switching; the directory is still the old one
	AdoptSwitched  = "adopt-switched"  // the volume is at the path (swapped or mounted); not yet recorded done
	// AdoptBoundOne: of several directories, the first is bound back, the
	// others not yet.
	AdoptBoundOne = "adopt-bound-one"
)

// Steps of an adoption by descriptor (a directory others than root can
// change) alone, where a hostile test pauses (PauseEnv); in no list.
const (
	AdoptMeasuring   = "adopt-measuring"   // its size is being measured: its top's entries listed
	AdoptCopying     = "adopt-copying"     // its top's entries are listed; none copied yet
	ReleaseUnmounted = "release-unmounted" // its volume is unmounted; the files not yet copied back
)

// Adoption lists the adoption's crash points, in order; AdoptionOfSeveral
// those of an adoption of several directories.
var (
	Adoption          = []string{AdoptCopied, AdoptSwitching, AdoptSwitched}
	AdoptionOfSeveral = []string{AdoptCopied, AdoptSwitching, AdoptBoundOne, AdoptSwitched}
)

// The steps of a release (supervisor ReleaseProject), in order.
const (
	ReleaseRecorded = "release-recorded" // recorded releasing, the project forgotten; no file moved
	ReleaseCopied   = "release-copied"   // the plain copy is made (or the files are back under the path)
	ReleaseSwitched = "release-switched" // the plain directory is at the path; the volume not yet removed
)

// Release lists the release's crash points, in order.
var Release = []string{ReleaseRecorded, ReleaseCopied, ReleaseSwitched}

// The steps of a create (supervisor Create), in order where the init
// starts before the snapshots (btrfs); where the sandbox's volume is a
// mount of its own (ZFS), the init starts after the sandbox's snapshot.
const (
	CreateRecorded     = "create-recorded"      // the record says creating; nothing made
	CreateInitLaunched = "create-init-launched" // the sandbox's init runs; its scope not yet asked for (on btrfs it starts next, beside the snapshots)
	CreateBase         = "create-base"          // the read-only base of the project exists
	CreateVolume       = "create-volume"        // the sandbox's writable snapshot of the base exists
	CreateLayer        = "create-layer"         // its system layer exists (where the pool carries one)
	CreateScopeStarted = "create-scope-started" // its scope holds its init; the record still says creating
	CreateReady        = "create-ready"         // the record says ready; the caller has no answer yet
)

// Create lists the create's crash points, in order.
var Create = []string{
	CreateRecorded, CreateInitLaunched, CreateBase, CreateVolume, CreateLayer, CreateScopeStarted, CreateReady,
}

// The steps of a checkpoint (supervisor/checkpoints Take), in order.
const (
	CheckpointFrozen    = "checkpoint-frozen"    // the sandbox is frozen for the snapshots; none taken
	CheckpointFirst     = "checkpoint-first"     // the snapshot of its copy of the project exists
	CheckpointSnapshots = "checkpoint-snapshots" // its system layer's too; the record does not list it
	CheckpointRecorded  = "checkpoint-recorded"  // the record lists it; the sandbox is still frozen, the caller has no answer
)

// Checkpoint lists the checkpoint's crash points, in order.
var Checkpoint = []string{CheckpointFrozen, CheckpointFirst, CheckpointSnapshots, CheckpointRecorded}

// The steps of a rollback to a checkpoint (supervisor/checkpoints Rollback), in order.
const (
	RollbackStopped      = "rollback-stopped"       // the sandbox's scope is stopped
	RollbackWorldRemoved = "rollback-world-removed" // its runtime directory is gone too
	RollbackVolume       = "rollback-volume"        // its copy of the project holds the checkpoint; its system layer not yet
	RollbackSwapped      = "rollback-swapped"       // every volume of it holds the checkpoint; it is not started
	RollbackRestarted    = "rollback-restarted"     // its init runs again; the record and the caller are not told
)

// Rollback lists the rollback's crash points, in order.
var Rollback = []string{RollbackStopped, RollbackWorldRemoved, RollbackVolume, RollbackSwapped, RollbackRestarted}

// The steps of a rebase (supervisor/checkpoints Rebase), in order.
const (
	RebaseSource     = "rebase-source"      // a read-only snapshot of the sandbox (its changes' source) exists
	RebaseNewBase    = "rebase-new-base"    // the new base, of the project as it is now, exists
	RebaseApplied    = "rebase-applied"     // the new copy holds the sandbox's changes; the record names the old pair
	RebaseStopped    = "rebase-stopped"     // the sandbox's scope is stopped
	RebaseRecorded   = "rebase-recorded"    // the record names the new pair; the sandbox is not started
	RebaseRestarted  = "rebase-restarted"   // it runs on the new pair, recorded ready; the old pair remains
	RebaseOldDeleted = "rebase-old-deleted" // the old pair is gone; the caller has no answer
)

// Rebase lists the rebase's crash points, in order.
var Rebase = []string{
	RebaseSource, RebaseNewBase, RebaseApplied, RebaseStopped, RebaseRecorded, RebaseRestarted, RebaseOldDeleted,
}

// The steps of a destroy (supervisor destroy and finishDestroy), in order.
const (
	DestroyRecorded       = "destroy-recorded"        // the record says destroying; nothing removed
	DestroyScopeStopped   = "destroy-scope-stopped"   // its scope is stopped; its volumes remain
	DestroyVolumesDeleted = "destroy-volumes-deleted" // its volumes are gone; its record remains
	DestroyRecordDeleted  = "destroy-record-deleted"  // its record is gone; the caller has no answer
)

// Destroy lists the destroy's crash points, in order.
var Destroy = []string{DestroyRecorded, DestroyScopeStopped, DestroyVolumesDeleted, DestroyRecordDeleted}

// The steps of a fork (supervisor/fork Fork), in order.
const (
	ForkSnapshots = "fork-snapshots" // the temporary snapshots of the source exist (frozen for them, thawed); no fork recorded
	ForkFirst     = "fork-first"     // the first fork is ready; the others are not made, the snapshots remain
	ForkMade      = "fork-made"      // every fork is ready, its processes started; the snapshots remain, the caller has no answer
	// A single fork's own: its create holds the source (locked, frozen)
	// to snapshot its volumes straight; the fork is recorded, its base made.
	ForkHeld = "fork-held"
)

// Fork lists the fork's crash points, in order (ForkHeld: a single
// fork's, instead of ForkSnapshots).
var Fork = []string{ForkSnapshots, ForkFirst, ForkMade, ForkHeld}

// The steps of a stop and a start (supervisor/stop.go), in order.
const (
	StopRecorded = "stop-recorded" // the record says stopped; its scope still runs
	StartScope   = "start-scope"   // its scope runs its init again; the record still says stopped
)

// Stop and Start list their crash points.
var (
	Stop  = []string{StopRecorded}
	Start = []string{StartScope}
)

// All lists every crash point, by operation.
var All = map[string][]string{
	"create":     Create,
	"checkpoint": Checkpoint,
	"rollback":   Rollback,
	"rebase":     Rebase,
	"destroy":    Destroy,
	"promote":    Promotion,
	"fork":       Fork,
	"stop":       Stop,
	"start":      Start,
}

// PauseEnv arms a pause point: the process stops at step NAME (when its
// environment has SANDBOXD_PAUSEPOINT=NAME), makes the file Paused names,
// and goes on once that file is gone (or after PauseMax): a hostile test
// changes what the step acts on, deterministically, in between.
const PauseEnv = "SANDBOXD_PAUSEPOINT"

// PauseMax bounds a pause: a test that died leaves no daemon stuck.
const PauseMax = 2 * time.Minute

var pauseAt = os.Getenv(PauseEnv)

// Paused is the file that says the process waits at point name; its
// removal lets it go on.
func Paused(name string) string {
	return mark(name) + ".paused"
}

// PausedIn is Paused of a process whose runtime directory is dir (a
// test's view of the daemon's, /run/sandboxd).
func PausedIn(dir, name string) string {
	return filepath.Join(dir, ".crashpoint-"+filepath.Base(name)+".paused")
}

// pause waits at name if it is the armed pause point.
func pause(name string) {
	if pauseAt == "" || pauseAt != name {
		return
	}
	f, err := os.OpenFile(Paused(name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return
	}
	f.Close()
	fmt.Fprintf(os.Stderr, "crashpoint: paused at %s until %s is removed\n", name, Paused(name))
	for end := time.Now().Add(PauseMax); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(Paused(name)); err != nil {
			return
		}
	}
	_ = os.Remove(Paused(name))
}

// Hit kills this process with SIGKILL if name is the armed crash point
// (and first waits there if it is the armed pause point).
func Hit(name string) {
	pause(name)
	if armed == "" || armed != name {
		return
	}
	// The mark before the kill: without it, the next start would die too.
	f, err := os.OpenFile(mark(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return // another goroutine is killing it, or no mark can be left: live on
	}
	f.Close()
	fmt.Fprintf(os.Stderr, "crashpoint: killed at %s\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// arm is the point armed in this process: name, unless the last process
// was killed there (its mark, removed now, says so).
func arm(name string) string {
	if name == "" {
		return ""
	}
	if err := os.Remove(mark(name)); err == nil {
		fmt.Fprintf(os.Stderr, "crashpoint: %s disarmed: the last start was killed there\n", name)
		return ""
	}
	return name
}

// mark is the file that says a process was killed at point name: in the
// runtime directory systemd gives the service (kept across its restarts),
// else the temporary directory.
func mark(name string) string {
	dir := os.Getenv("RUNTIME_DIRECTORY")
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, ".crashpoint-"+filepath.Base(name))
}

package sandboxd1

import "time"

// Promotion is GetPromotion's record, sent as JSON: one promotion of a
// sandbox's changes through the stages. It is the wire's own type, with
// the field names the daemon has always sent; the daemon keeps its
// records otherwise and converts them.
type Promotion struct {
	ID          string `json:"id"`
	Sandbox     string `json:"sandbox"`
	SandboxName string `json:"sandbox_name,omitempty"`
	Project     string `json:"project"`
	Owner       uint32 `json:"owner"` // the uid that asked for it
	State       string `json:"state"` // one of the Promotion* states
	// Source is the read-only snapshot of the sandbox the promotion reads,
	// and Base the sandbox's base volume it is compared with.
	Source string `json:"source"`
	Base   string `json:"base"`
	// Changes is how many paths the change set has; Digest a hash of it.
	Changes int    `json:"changes"`
	Digest  string `json:"digest,omitempty"`
	// Changed are the change set's first entries (at most 20: Changes
	// says how many there are), for a line that says what changed.
	Changed []ChangedPath `json:"changed,omitempty"`
	// Ignored is how many changed paths the project's ignore rules
	// (.sandboxignore, [[project]] ignore) left out of the change set.
	Ignored int  `json:"ignored,omitempty"`
	Force   bool `json:"force,omitempty"`
	// AllowPrivileged: an admin let set-id files and device nodes through.
	AllowPrivileged bool `json:"allow_privileged,omitempty"`
	// Conflicts are the paths both sides changed (refused unless Force).
	Conflicts []string   `json:"conflicts,omitempty"`
	Stages    []StageRun `json:"stages"`
	Created   time.Time  `json:"created"`
	Updated   time.Time  `json:"updated"`
	Error     string     `json:"error,omitempty"`
}

// ChangedPath is one change of a promotion's change set: its kind
// (added, modified, deleted, renamed, metadata), its path and a rename's
// new path. Paths are the sandbox's: escape them before printing.
type ChangedPath struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	NewPath string `json:"new_path,omitempty"`
}

// StageRun is one stage of a promotion.
type StageRun struct {
	Name   string `json:"name"`
	Target string `json:"target"`
	State  string `json:"state"` // one of the Stage* states
	// RollbackPoint is the volume (or the replica's previous tree) the
	// stage goes back to on failure.
	RollbackPoint string        `json:"rollback_point,omitempty"`
	Checks        []CheckResult `json:"checks,omitempty"`
	Approval      string        `json:"approval,omitempty"`   // "auto" or "admin"
	Approved      bool          `json:"approved,omitempty"`   // an admin said yes
	DecidedBy     *uint32       `json:"decided_by,omitempty"` // the admin who approved or rejected it
	Decided       time.Time     `json:"decided,omitzero"`
	Reason        string        `json:"reason,omitempty"` // an admin's word on a rejection
	Started       time.Time     `json:"started,omitzero"`
	Ended         time.Time     `json:"ended,omitzero"`
	Error         string        `json:"error,omitempty"`
}

// CheckResult is one check's outcome.
type CheckResult struct {
	Command  string        `json:"command"`
	Status   int           `json:"status"` // its exit status (128+N for signal N)
	How      string        `json:"how"`    // exited, signaled, timed-out...
	Duration time.Duration `json:"duration"`
	Output   string        `json:"output,omitempty"` // its last lines
}

// States of a promotion.
const (
	PromotionRunning  = "running"  // a stage is being applied or checked
	PromotionWaiting  = "waiting"  // a stage waits for an admin's approval
	PromotionDone     = "done"     // every stage asked for passed
	PromotionFailed   = "failed"   // a stage failed and was rolled back
	PromotionRejected = "rejected" // an admin said no
)

// States of a stage of a promotion.
const (
	StagePending  = "pending"  // not reached yet
	StageWaiting  = "waiting"  // reached; an admin must approve it first
	StageApplying = "applying" // the change set is being written
	StageChecking = "checking" // written; its checks run
	StagePassed   = "passed"
	StageFailed   = "failed"   // rolled back to its rollback point
	StageRejected = "rejected" // an admin said no
	StageSkipped  = "skipped"  // beyond where the promotion was asked to go
)

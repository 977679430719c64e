package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrNoPromotion: no promotion with that id is recorded.
var ErrNoPromotion = errors.New("no such promotion")

var promotionsBucket = []byte("promotions")

// PromotionState is where a promotion is.
type PromotionState string

const (
	PromotionRunning  PromotionState = "running"  // a stage is being applied or checked
	PromotionWaiting  PromotionState = "waiting"  // a stage waits for an admin's approval
	PromotionDone     PromotionState = "done"     // every stage asked for passed
	PromotionFailed   PromotionState = "failed"   // a stage failed and was rolled back
	PromotionRejected PromotionState = "rejected" // an admin said no
)

// Finished says whether nothing more happens to a promotion.
func (s PromotionState) Finished() bool {
	return s == PromotionDone || s == PromotionFailed || s == PromotionRejected
}

// StageState is where one stage of a promotion is.
type StageState string

const (
	StagePending  StageState = "pending"  // not reached yet
	StageWaiting  StageState = "waiting"  // reached; an admin must approve it first
	StageApplying StageState = "applying" // the change set is being written (rollback point taken or about to be)
	StageChecking StageState = "checking" // written; its checks run
	StagePassed   StageState = "passed"
	StageFailed   StageState = "failed"   // rolled back to its rollback point
	StageRejected StageState = "rejected" // an admin said no
	StageSkipped  StageState = "skipped"  // beyond where the promotion was asked to go
)

// Promotion is the record of one promotion of a sandbox's changes through
// the stages (promote/design.md). It is written before each step, so that
// the daemon's start knows what to finish or roll back.
type Promotion struct {
	ID          string         `json:"id"`
	Sandbox     string         `json:"sandbox"`
	SandboxName string         `json:"sandbox_name,omitempty"`
	Project     string         `json:"project"`
	Owner       uint32         `json:"owner"` // the uid that asked for it
	State       PromotionState `json:"state"`
	// Source is the read-only snapshot of the sandbox the promotion reads,
	// and Base the sandbox's base volume it is compared with.
	Source string `json:"source"`
	Base   string `json:"base"`
	// Changes is how many paths the change set has; Digest a hash of it.
	Changes int    `json:"changes"`
	Digest  string `json:"digest,omitempty"`
	// Changed are the change set's first MaxChanged entries, for a line
	// that says what changed ("1 change: modified calc.py").
	Changed []ChangedPath `json:"changed,omitempty"`
	// Ignored is how many changed paths the project's ignore rules left
	// out of the change set.
	Ignored int  `json:"ignored,omitempty"`
	Force   bool `json:"force,omitempty"`
	// AllowPrivileged: an admin let set-id files and device nodes through
	// (the paths are in the audit log); kept across restarts, so that a
	// stage that waits for approval carries them when approved.
	AllowPrivileged bool `json:"allow_privileged,omitempty"`
	// Conflicts are the paths both sides changed (refused unless Force).
	Conflicts []string   `json:"conflicts,omitempty"`
	Stages    []StageRun `json:"stages"`
	Created   time.Time  `json:"created"`
	Updated   time.Time  `json:"updated"`
	Error     string     `json:"error,omitempty"`
}

// MaxChanged bounds a promotion record's Changed.
const MaxChanged = 20

// ChangedPath is one change of a change set: its kind (added, modified,
// deleted, renamed, metadata) and path (and a rename's new path).
type ChangedPath struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	NewPath string `json:"new_path,omitempty"`
}

// StageRun is one stage of a promotion.
type StageRun struct {
	Name   string     `json:"name"`
	Target string     `json:"target"`
	State  StageState `json:"state"`
	// RollbackPoint is the volume (or the replica's previous tree) the
	// stage goes back to on failure; named before it exists.
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

// PutPromotion records p (made or changed), then mirrors it.
func (s *Store) PutPromotion(p Promotion) error {
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("recording promotion %s: %w", p.ID, err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(promotionsBucket).Put([]byte(p.ID), data)
	}); err != nil {
		return fmt.Errorf("recording promotion %s: %w", p.ID, err)
	}
	if err := writeAtomic(filepath.Join(s.promotions, p.ID+".json"), data); err != nil {
		return fmt.Errorf("mirroring promotion %s: %w", p.ID, err)
	}
	return nil
}

// Promotion returns promotion id.
func (s *Store) Promotion(id string) (Promotion, error) {
	var p Promotion
	err := s.db.View(func(tx *bolt.Tx) error {
		data := tx.Bucket(promotionsBucket).Get([]byte(id))
		if data == nil {
			return fmt.Errorf("promotion %s: %w", id, ErrNoPromotion)
		}
		if err := json.Unmarshal(data, &p); err != nil {
			return fmt.Errorf("reading promotion %s: %w: %w", id, ErrCorrupt, err)
		}
		return nil
	})
	return p, err
}

// Promotions returns every recorded promotion, oldest first.
func (s *Store) Promotions() ([]Promotion, error) {
	var out []Promotion
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(promotionsBucket).ForEach(func(k, v []byte) error {
			var p Promotion
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("reading promotion %s: %w: %w", k, ErrCorrupt, err)
			}
			out = append(out, p)
			return nil
		})
	})
	slices.SortFunc(out, func(a, b Promotion) int { return a.Created.Compare(b.Created) })
	return out, err
}

func (s *Store) rebuildPromotions() (int, error) {
	return rebuildBucket(s.db, s.promotions, promotionsBucket, func(data []byte) string {
		var p Promotion
		if json.Unmarshal(data, &p) != nil {
			return ""
		}
		return p.ID
	})
}

// DeletePromotion forgets promotion id, which named no volume that is
// left (a promotion that found nothing to promote): there is nothing of
// it to keep.
func (s *Store) DeletePromotion(id string) error {
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(promotionsBucket).Delete([]byte(id))
	}); err != nil {
		return fmt.Errorf("deleting promotion %s: %w", id, err)
	}
	if err := os.Remove(filepath.Join(s.promotions, id+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting the mirror of promotion %s: %w", id, err)
	}
	return nil
}

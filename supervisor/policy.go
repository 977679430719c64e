package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// ErrLimitReached: a create that admission control refuses (too many
// sandboxes, for the host or the caller, or too much memory promised).
var ErrLimitReached = errors.New("limit reached")

// Policy is admission control and time to live. Zero fields: no cap.
type Policy struct {
	MaxSandboxes int
	MaxPerOwner  int
	// DestroyOldest: a create beyond MaxPerOwner destroys the owner's
	// oldest sandbox first, instead of being refused.
	DestroyOldest bool
	// MaxAdoptionsPerOwner caps the directories a member (not an admin)
	// has adopted as its own projects, under way or done.
	MaxAdoptionsPerOwner int
	// MaxMemory caps the sum of the live sandboxes' MemoryMax; with it, a
	// sandbox needs a MemoryMax (its own, DefaultMemoryMax or the one
	// derived from the host).
	MaxMemory        uint64
	DefaultMemoryMax uint64
	DefaultTTL       time.Duration
	MaxTTL           time.Duration
}

// auditor records the daemon's actions in the audit log, with their
// caller and result.
type auditor struct {
	log      *audit.Log // nil: none
	journal  *slog.Logger
	refusals *Hook[error] // the rooms' refusals (Hooks.Refusals)
}

// record records an action and how it ended.
func (a *auditor) record(ctx context.Context, action string, rec state.Record, err error) {
	a.entry(ctx, audit.Entry{Action: action, Network: rec.Network}, rec, err)
}

// auditEntry records e, an action on rec, with its caller and result.
func (a *auditor) entry(ctx context.Context, e audit.Entry, rec state.Record, err error) {
	e.CallerUID, e.Sandbox, e.Project, e.Result = callerOf(ctx), rec.ID, rec.Project, "ok"
	if e.Action != "create" {
		e.Network = ""
	}
	action := e.Action
	if err != nil {
		e.Result, e.Error, e.Refused = "error", err.Error(), a.refused(err)
	}
	if aerr := a.log.Record(e); aerr != nil {
		a.journal.Error("writing the audit log", "error", aerr, "ACTION", action, "SANDBOX_ID", rec.ID)
	}
}

// refusals are the errors that are the caller's: what it asked is not
// allowed, not there or not well formed. The audit log keeps them short
// and budgets them apart from the caller's actions.
var refusals = []error{
	ErrAccessDenied, ErrNotFound, ErrUnknownProject, ErrInvalid, ErrWrongState, ErrExists,
	ErrInvalidProject, ErrProjectInUse, ErrLimitReached,
	ErrNoIdmap, ErrConflict, ErrBusy,
}

func (a *auditor) refused(err error) bool {
	for _, r := range refusals {
		if errors.Is(err, r) {
			return true
		}
	}
	for _, r := range a.refusals.each() {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// applyDefaults fills what the policy gives a create that did not say.
func (p Policy) applyDefaults(opts *CreateOptions) error {
	if opts.TTL == 0 {
		opts.TTL = p.DefaultTTL
	}
	if p.MaxTTL > 0 && opts.TTL > p.MaxTTL {
		return fmt.Errorf("time to live %v is over the host's maximum of %v: %w", opts.TTL, p.MaxTTL, ErrInvalid)
	}
	if opts.Limits.MemoryMax == nil && p.DefaultMemoryMax > 0 {
		opts.Limits.MemoryMax = &p.DefaultMemoryMax
	}
	return nil
}

// admit checks a create against the caps, given the live records; it
// returns the owner's sandboxes to destroy first (DestroyOldest).
func (p Policy) admit(live []state.Entry, opts CreateOptions) ([]state.Entry, error) {
	if p.MaxSandboxes > 0 && len(live) >= p.MaxSandboxes {
		return nil, fmt.Errorf("%d sandboxes are alive, the host's limit (limits.max_sandboxes): %w", len(live), ErrLimitReached)
	}
	var own []state.Entry
	var promised uint64
	for _, r := range live {
		if r.Owner == opts.Owner {
			own = append(own, r)
		}
		var l units.Limits
		if p.MaxMemory > 0 && len(r.Limits) > 0 && json.Unmarshal(r.Limits, &l) == nil && l.MemoryMax != nil {
			promised += *l.MemoryMax
		}
	}
	var evict []state.Entry
	if p.MaxPerOwner > 0 && len(own) >= p.MaxPerOwner {
		if !p.DestroyOldest {
			return nil, fmt.Errorf("uid %d has %d sandboxes alive, the limit per user (limits.max_sandboxes_per_user); destroy one first: %w", opts.Owner, len(own), ErrLimitReached)
		}
		evict = own[:len(own)-p.MaxPerOwner+1] // live is oldest first
	}
	if p.MaxMemory > 0 {
		if opts.Limits.MemoryMax == nil {
			return nil, fmt.Errorf("a MemoryMax is required: the host caps the memory of all sandboxes (limits.max_memory): %w", ErrInvalid)
		}
		for _, r := range evict {
			var l units.Limits
			if json.Unmarshal(r.Limits, &l) == nil && l.MemoryMax != nil {
				promised -= *l.MemoryMax
			}
		}
		if promised+*opts.Limits.MemoryMax > p.MaxMemory {
			return nil, fmt.Errorf("MemoryMax %d would bring the memory promised to sandboxes to %d, over the host's %d (limits.max_memory): ask for less (--memory) or destroy a sandbox: %w",
				*opts.Limits.MemoryMax, promised+*opts.Limits.MemoryMax, p.MaxMemory, ErrLimitReached)
		}
	}
	return evict, nil
}

// liveOf lists the records of sandboxes that count against the caps.
func liveOf(recs []state.Entry) []state.Entry {
	var out []state.Entry
	for _, r := range recs {
		if r.State != state.Destroying {
			out = append(out, r)
		}
	}
	return out
}

// Expire destroys the sandboxes whose time to live ended by now, and
// returns their ids. The daemon calls it periodically.
func (s *Supervisor) Expire(ctx context.Context, now time.Time) ([]string, error) {
	recs, err := s.cfg.Store.List()
	if err != nil {
		return nil, err
	}
	var done []string
	var errs []error
	for _, r := range recs {
		if r.Expires.IsZero() || r.Expires.After(now) || r.State == state.Creating || r.State == state.Destroying {
			continue
		}
		gone, err := s.destroy(ctx, r.ID, "expire")
		gone()
		if errors.Is(err, ErrNotFound) {
			continue // destroyed meanwhile
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, r.ID)
	}
	return done, errors.Join(errs...)
}

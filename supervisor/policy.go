package supervisor

import (
	"context"
	"errors"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/admission"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// ErrLimitReached: a create that admission control refuses (too many
// sandboxes, for the host or the caller, or too much memory promised).
var ErrLimitReached = admission.ErrLimitReached

// Policy is admission control and time to live (admission.Policy); a
// create's Profile is admission.Profile.
type (
	Policy  = admission.Policy
	Profile = admission.Profile
)

// auditor records the daemon's actions on sandboxes in the audit log.
type auditor struct{ audit.Recorder }

// record records an action on rec and how it ended.
func (a *auditor) record(ctx context.Context, action string, rec state.Record, err error) {
	a.entry(ctx, audit.Entry{Action: action, Network: rec.Network}, rec, err)
}

// entry records e, an action on rec, with its caller and result.
func (a *auditor) entry(ctx context.Context, e audit.Entry, rec state.Record, err error) {
	e.Sandbox, e.Project = rec.ID, rec.Project
	if e.Action != "create" && e.Action != "pool-create" {
		e.Network = ""
	}
	a.Record(ctx, e, err)
}

// refusals are the errors that are the caller's (audit.Recorder).
var refusals = []error{
	ErrAccessDenied, ErrNotFound, ErrUnknownProject, ErrInvalid, ErrWrongState, ErrExists,
	ErrInvalidProject, ErrProjectInUse, ErrLimitReached,
	ErrNoIdmap, ErrConflict, ErrBusy, ErrStopped,
}

// settle gives opts what its profile, the policy and the host give a
// create that did not say (admission), and checks what it gets.
func settle(cfg *Config, opts *CreateOptions) error {
	r := admission.Request{
		Profile: opts.Profile, Network: opts.Network, Allow: opts.Allow, Limits: opts.Limits,
		DiskQuota: opts.DiskQuota, TTL: opts.TTL, ReadOnlyProject: opts.ReadOnlyProject,
	}
	profiles := admission.Profiles{Named: cfg.Profiles, Default: cfg.DefaultProfile, Hidden: cfg.Hidden, ReadOnly: cfg.ReadOnly}
	err := profiles.Resolve(&r)
	if err == nil {
		err = cfg.Policy.ApplyDefaults(&r)
	}
	if err == nil {
		memoryMax, tasksMax, diskQuota := admission.HostDefaults(cfg.Backend.Info().Root)
		admission.ApplyHostDefaults(&r, memoryMax, tasksMax, diskQuota)
	}
	opts.Profile, opts.Network, opts.Allow, opts.Limits = r.Profile, r.Network, r.Allow, r.Limits
	opts.DiskQuota, opts.TTL, opts.ReadOnlyProject, opts.hidden, opts.readOnly = r.DiskQuota, r.TTL, r.ReadOnlyProject, r.Hidden, r.ReadOnly
	return err
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
		err := s.destroy(ctx, r.ID, "expire")
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

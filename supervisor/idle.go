package supervisor

// Idle sandboxes (issue 21): one with no running command, background
// process or open port connection for Config.IdleFreeze is frozen (its
// memory stays, its CPU is free) and thawed by the next call that needs
// it or the next connection to one of its ports; for Config.IdleStop,
// stopped (issue 31: its memory is free too) and started so again.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

// wake thaws or starts sandbox id if it was frozen or stopped for being
// idle, and records activity; one a caller stopped is ErrStopped, one a
// caller froze stays frozen.
func (s *Supervisor) wake(ctx context.Context, id string) error {
	s.activity.Touch(id)
	rec, err := s.cfg.Store.Get(id)
	switch {
	case err != nil:
		return nil
	case rec.State == state.Stopped && rec.StoppedIdle:
		if _, err := s.Start(ctx, id); err != nil {
			return fmt.Errorf("starting idle sandbox %s: %w", id, err)
		}
	case rec.State == state.Stopped:
		return fmt.Errorf("sandbox %s: %w: start it with sandboxctl start %s", id, ErrStopped, id)
	case rec.State == state.Frozen && rec.FrozenIdle:
		if _, err := s.Thaw(ctx, id); err != nil && !errors.Is(err, ErrWrongState) {
			return fmt.Errorf("thawing idle sandbox %s: %w", id, err)
		}
	}
	s.activity.Touch(id)
	return nil
}

// busy reports whether sandbox id runs a command (sessions too), a
// background process, a file call, or carries a port connection.
func (h *Hooks) busy(ctx context.Context, id string) bool {
	for _, f := range h.Busy.Funcs() {
		if f(ctx, id) {
			return true
		}
	}
	return false
}

// Idle freezes the ready sandboxes that have been idle for
// Config.IdleFreeze, and stops those idle for Config.IdleStop (frozen for
// being idle too: freeze first, stop later); 0: never. It returns their
// ids. A sandbox this daemon has seen nothing of since it started counts
// from then.
func (s *Supervisor) Idle(ctx context.Context, now time.Time) (frozen, stopped []string, err error) {
	if s.cfg.IdleFreeze <= 0 && s.cfg.IdleStop <= 0 {
		return nil, nil, nil
	}
	recs, err := s.cfg.Store.List()
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, r := range recs {
		// A warm pool's sandbox is idle by design and nobody's yet: frozen
		// or stopped, no claim could hand it out as a create's, and its
		// idle time counts from its claim (Claim).
		if r.Pool {
			continue
		}
		if !r.Runs() && !(r.State == state.Frozen && r.FrozenIdle) {
			continue
		}
		last, ok := s.activity.Last(r.ID)
		if !ok {
			s.activity.Touch(r.ID)
			continue
		}
		// One frozen for being idle did nothing since: wake thaws it.
		stop := s.cfg.IdleStop > 0 && now.Sub(last) >= s.cfg.IdleStop
		freeze := !stop && r.Runs() && s.cfg.IdleFreeze > 0 && now.Sub(last) >= s.cfg.IdleFreeze
		if !stop && !freeze || !r.FrozenIdle && s.hooks.busy(ctx, r.ID) {
			continue
		}
		var err error
		if stop {
			_, err = s.stop(ctx, r.ID, last)
		} else {
			err = s.freezeIdle(ctx, r.ID, last)
		}
		switch {
		case err != nil && !errors.Is(err, ErrWrongState):
			errs = append(errs, err)
		case err == nil && stop:
			stopped = append(stopped, r.ID)
		case err == nil:
			frozen = append(frozen, r.ID)
		}
	}
	return frozen, stopped, errors.Join(errs...)
}

// freezeIdle freezes sandbox id, marked as frozen for being idle, unless
// it did something since idleSince.
func (s *Supervisor) freezeIdle(ctx context.Context, id string, idleSince time.Time) error {
	defer s.locks.Lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return err
	}
	if !rec.Runs() {
		return fmt.Errorf("freezing idle sandbox %s: it is %s: %w", id, rec.State, ErrWrongState)
	}
	if last, _ := s.activity.Last(id); last.After(idleSince) {
		return fmt.Errorf("freezing idle sandbox %s: it woke: %w", id, ErrWrongState)
	}
	if err := s.cfg.Units.Freeze(ctx, rec.Unit); err != nil {
		return fmt.Errorf("freezing idle sandbox %s: %w", id, err)
	}
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error { r.State, r.FrozenIdle = state.Frozen, true; return nil })
	if err != nil {
		return fmt.Errorf("freezing idle sandbox %s: %w", id, err)
	}
	s.events.changed(id)
	s.auditor.record(ctx, "freeze-idle", rec, nil)
	s.log.Info("sandbox frozen for being idle", "SANDBOX_ID", id, "ACTION", "freeze-idle", "idle_since", idleSince.UTC().Format(time.RFC3339))
	return nil
}

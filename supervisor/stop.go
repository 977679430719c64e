package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// ErrStopped: the call needs a running sandbox, and it is stopped (Stop);
// Start runs it again.
var ErrStopped = errors.New("sandbox is stopped")

// Stop ends a sandbox's processes (its scope) and keeps it: its record
// (state stopped), volumes, checkpoints, ports and declared processes. A
// stopped sandbox stays so across the daemon's restarts and the host's
// reboots until Start. Stop of a stopped sandbox does nothing.
func (s *Supervisor) Stop(ctx context.Context, id string) (Sandbox, error) {
	return s.stop(ctx, id, time.Time{})
}

// stop is Stop; a non-zero idleSince stops the sandbox for being idle
// (StoppedIdle) unless it did something since.
func (s *Supervisor) stop(ctx context.Context, id string, idleSince time.Time) (sb Sandbox, err error) {
	unlock, err := s.locks.LockCtx(ctx, id)
	if err != nil {
		return sb, fmt.Errorf("stopping sandbox %s: %w", id, err)
	}
	defer unlock()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return sb, err
	}
	idle, action := !idleSince.IsZero(), "stop"
	if idle {
		action = "stop-idle"
		if last, _ := s.activity.Last(id); last.After(idleSince) {
			return sb, fmt.Errorf("stopping idle sandbox %s: it woke: %w", id, ErrWrongState)
		}
	}
	if rec.State == state.Stopped {
		if !idle && rec.StoppedIdle { // a caller's stop: it stays stopped until Start
			rec, err = s.cfg.Store.Update(id, func(r *state.Record) error { r.StoppedIdle = false; return nil })
		}
		return sandboxOf(ctx, s.cfg.Backend, &s.worlds, rec), err
	}
	defer func() { s.auditor.record(ctx, action, rec, err) }()
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen}, rec.State) {
		return sb, fmt.Errorf("stopping sandbox %s: it is %s: %w", id, rec.State, ErrWrongState)
	}
	// The intent first: a crash from here leaves a sandbox that
	// Reconcile finishes stopping.
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error {
		r.State, r.FrozenIdle, r.StoppedIdle = state.Stopped, false, idle
		return nil
	})
	if err != nil {
		return sb, fmt.Errorf("stopping sandbox %s: %w", id, err)
	}
	defer s.events.changed(id)
	crashpoint.Hit(crashpoint.StopRecorded)
	if err := s.endScope(ctx, rec); err != nil {
		return sb, fmt.Errorf("stopping sandbox %s: %w", id, err)
	}
	s.log.Info("sandbox stopped", "SANDBOX_ID", id, "ACTION", action, "CALLER_UID", uidField(ctx))
	return sandboxOf(ctx, s.cfg.Backend, &s.worlds, rec), nil
}

// endScope ends a stopped sandbox's processes: thawed first (a frozen
// process cannot die), its scope stopped, its init forgotten (the
// Stopped hook) and its runtime directory removed.
func (s *Supervisor) endScope(ctx context.Context, rec state.Record) error {
	_ = s.cfg.Units.Thaw(ctx, rec.Unit) // not frozen, or gone: nothing to do
	if err := s.scopes.stop(ctx, rec.Unit); err != nil {
		return err
	}
	return s.removeWorld(rec.ID)
}

// Start runs a stopped sandbox again (or one whose init died): a new
// scope and init on its volumes, as after a reboot; a booted one boots,
// the rooms hear of it (Started: ports, declared processes). Start of a
// running sandbox does nothing.
func (s *Supervisor) Start(ctx context.Context, id string) (sb Sandbox, err error) {
	unlock, err := s.locks.LockCtx(ctx, id)
	if err != nil {
		return sb, fmt.Errorf("starting sandbox %s: %w", id, err)
	}
	defer unlock()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return sb, err
	}
	switch s.worlds.current(rec).State {
	case state.Ready, state.Running, state.Frozen:
		return sandboxOf(ctx, s.cfg.Backend, &s.worlds, rec), nil
	case state.Stopped:
	default:
		return sb, fmt.Errorf("starting sandbox %s: it is %s: %w", id, rec.State, ErrWrongState)
	}
	defer func() { s.auditor.record(ctx, "start", rec, err) }()
	var limits units.Limits
	if err := units.UnmarshalLimits(rec.Limits, &limits); err != nil {
		return sb, fmt.Errorf("starting sandbox %s: %w", id, err)
	}
	// What is left of a dead init, or of a stop a crash interrupted.
	if err := s.endScope(ctx, rec); err != nil {
		return sb, fmt.Errorf("starting sandbox %s: %w", id, err)
	}
	if err := s.startScope(ctx, rec, limits, nil, nil); err != nil {
		return sb, fmt.Errorf("starting sandbox %s: %w", id, err)
	}
	// A crash here leaves the record stopped: Reconcile stops the scope.
	crashpoint.Hit(crashpoint.StartScope)
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error {
		r.State, r.FrozenIdle, r.StoppedIdle = state.Ready, false, false
		return nil
	})
	if err != nil {
		return sb, fmt.Errorf("starting sandbox %s: %w", id, err)
	}
	s.activity.Touch(id)
	s.events.changed(id)
	s.log.Info("sandbox started", "SANDBOX_ID", id, "ACTION", "start", "CALLER_UID", uidField(ctx))
	return sandboxOf(ctx, s.cfg.Backend, &s.worlds, rec), nil
}

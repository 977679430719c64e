package supervisor

import (
	"context"
	"fmt"
	"slices"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Freeze stops every process of a ready or running sandbox until Thaw
// (its files and scope stay; its limits keep counting).
func (s *Supervisor) Freeze(ctx context.Context, id string) (Sandbox, error) {
	return s.transition(ctx, id, "freeze", []state.State{state.Ready, state.Running}, state.Frozen, s.cfg.Units.Freeze)
}

// Thaw lets a frozen sandbox's processes run again.
func (s *Supervisor) Thaw(ctx context.Context, id string) (Sandbox, error) {
	return s.transition(ctx, id, "thaw", []state.State{state.Frozen}, state.Ready, s.cfg.Units.Thaw)
}

// transition applies act to a sandbox's scope when its state is one of
// from, then records the state to.
func (s *Supervisor) transition(ctx context.Context, id, action string, from []state.State, to state.State,
	act func(context.Context, string) error) (sb Sandbox, err error) {
	// Given up with ctx: a port's connection waking a sandbox whose
	// destroy holds the lock and waits for that connection to end.
	unlock, err := s.locks.LockCtx(ctx, id)
	if err != nil {
		return sb, fmt.Errorf("%s of sandbox %s: %w", action, id, err)
	}
	defer unlock()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return sb, err
	}
	defer func() { s.auditor.record(ctx, action, rec, err) }()
	if rec.State == state.Stopped {
		return sb, fmt.Errorf("%s of sandbox %s: %w: start it with sandboxctl start %s", action, id, ErrStopped, id)
	}
	if !slices.Contains(from, rec.State) {
		return sb, fmt.Errorf("%s of sandbox %s: it is %s: %w", action, id, rec.State, ErrWrongState)
	}
	if err := act(ctx, rec.Unit); err != nil {
		return sb, fmt.Errorf("%s of sandbox %s: %w", action, id, err)
	}
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error { r.State, r.FrozenIdle = to, false; return nil })
	if err != nil {
		return sb, fmt.Errorf("%s of sandbox %s: %w", action, id, err)
	}
	s.events.changed(id)
	s.log.Info("sandbox "+string(to), "SANDBOX_ID", id, "ACTION", action, "CALLER_UID", uidField(ctx))
	return sandboxOf(ctx, s.cfg.Backend, &s.worlds, rec), nil
}

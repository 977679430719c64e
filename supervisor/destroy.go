package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/supervisor/diskquota"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// Destroy ends a sandbox: its intent is recorded, its scope stopped, its
// volumes deleted, and its record removed last; Reconcile finishes a
// destroy that a crash interrupted.
func (s *Supervisor) Destroy(ctx context.Context, id string) error {
	return s.destroy(ctx, id, "destroy")
}

// destroy is Destroy, named in the journal and audit log by action
// (destroy, expire, evict).
func (s *Supervisor) destroy(ctx context.Context, id, action string) error {
	_, finish, err := s.markDestroying(id)
	if err != nil {
		return err
	}
	return finish(ctx, action)
}

// markDestroying takes sandbox id's lock and records the intent: from
// here Reconcile finishes the destroy. finish destroys it, releases its
// lock, then runs the Destroyed hooks. Create marks what it evicts under
// the admission lock, and finishes it once it left the lock.
func (s *Supervisor) markDestroying(id string) (state.Record, func(ctx context.Context, action string) error, error) {
	unlock := s.locks.Lock(id)
	rec, err := s.cfg.Store.Update(id, func(r *state.Record) error { r.State = state.Destroying; return nil })
	if err != nil {
		unlock()
		return rec, nil, fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	finish := func(ctx context.Context, action string) (err error) {
		gone := func() {}
		defer func() { unlock(); gone() }()
		defer func() { s.auditor.record(ctx, action, rec, err) }()
		// Announced whatever happens from here: gone, or left destroying
		// for Reconcile.
		defer s.events.changed(rec.ID)
		crashpoint.Hit(crashpoint.DestroyRecorded)
		if err := s.finishDestroy(ctx, rec); err != nil {
			return fmt.Errorf("destroying sandbox %s: %w", rec.ID, err)
		}
		crashpoint.Hit(crashpoint.DestroyRecordDeleted)
		s.log.Info("sandbox destroyed", "SANDBOX_ID", rec.ID, "ACTION", action, "CALLER_UID", uidField(ctx))
		gone = s.hooks.destroyed(context.WithoutCancel(ctx), rec)
		return nil
	}
	return rec, finish, nil
}

// uidField is the caller's uid for the journal, or "daemon".
func uidField(ctx context.Context) string {
	if uid := callerOf(ctx); uid != nil {
		return fmt.Sprint(*uid)
	}
	return "daemon"
}

// finishDestroy removes what exists of a sandbox, then its record.
func (s *Supervisor) finishDestroy(ctx context.Context, rec state.Record) error {
	if err := s.scopes.stop(ctx, rec.Unit); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.DestroyScopeStopped)
	for _, f := range s.hooks.Destroying.Funcs() {
		f(ctx, rec)
	}
	if err := s.removeWorld(rec.ID); err != nil {
		return err
	}
	diskquota.Unbound(ctx, s.cfg.Backend, s.log, rec)
	// Checkpoints (snapshots of the sandbox) first; clones before their
	// origins; the layer by its name, which a crash may have left out of
	// the record.
	var names []string
	for _, c := range slices.Backward(rec.Checkpoints) {
		names = append(names, volname.CheckpointLayer(rec.ID, c.Name), volname.Checkpoint(rec.ID, c.Name))
	}
	names = append(names, volname.Layer(rec.ID), rec.Volume, rec.Base)
	for _, name := range names {
		v, err := s.cfg.Backend.Get(ctx, name)
		if errors.Is(err, cowfs.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if err := s.cfg.Backend.Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
			return err
		}
	}
	crashpoint.Hit(crashpoint.DestroyVolumesDeleted)
	return s.cfg.Store.Delete(rec.ID)
}

// evictAll destroys what a create marked to make room.
func evictAll(evicted []func() error) error {
	var errs []error
	for _, f := range evicted {
		if err := f(); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

package supervisor

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/volname"
	"slices"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/supervisor/diskquota"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Destroy ends a sandbox: its intent is recorded, its scope stopped, its
// volumes deleted, and its record removed last; Reconcile finishes a
// destroy that a crash interrupted.
func (s *Supervisor) Destroy(ctx context.Context, id string) error {
	gone, err := s.destroy(ctx, id, "destroy")
	gone()
	return err
}

// destroy is Destroy, named in the journal and audit log by action
// (destroy, expire, evict). gone runs the Destroyed hooks, which an
// eviction runs only once it left the admission lock.
func (s *Supervisor) destroy(ctx context.Context, id, action string) (gone func(), err error) {
	gone = func() {}
	defer s.locks.Lock(id)()
	rec, err := s.cfg.Store.Update(id, func(r *state.Record) error { r.State = state.Destroying; return nil })
	if err != nil {
		return gone, fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	defer func() { s.auditor.record(ctx, action, rec, err) }()
	// Announced whatever happens from here: gone, or left destroying for
	// Reconcile.
	defer s.events.changed(id)
	crashpoint.Hit(crashpoint.DestroyRecorded)
	if err := s.finishDestroy(ctx, rec); err != nil {
		return gone, fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	crashpoint.Hit(crashpoint.DestroyRecordDeleted)
	s.log.Info("sandbox destroyed", "SANDBOX_ID", id, "ACTION", action, "CALLER_UID", uidField(ctx))
	return s.hooks.destroyed(context.WithoutCancel(ctx), rec), nil
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

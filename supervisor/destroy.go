package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Destroy ends a sandbox: its intent is recorded, its scope stopped, its
// volumes deleted, and its record removed last; Reconcile finishes a
// destroy that a crash interrupted.
func (s *Supervisor) Destroy(ctx context.Context, id string) error {
	return s.destroy(ctx, id, "destroy")
}

// destroy is Destroy, named in the journal and audit log by action
// (destroy, expire, evict).
func (s *Supervisor) destroy(ctx context.Context, id, action string) (err error) {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Update(id, func(r *state.Record) error { r.State = state.Destroying; return nil })
	if err != nil {
		return fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	defer func() { s.audit(ctx, action, rec, err) }()
	crashpoint.Hit(crashpoint.DestroyRecorded)
	if err := s.finishDestroy(ctx, rec); err != nil {
		return fmt.Errorf("destroying sandbox %s: %w", id, err)
	}
	crashpoint.Hit(crashpoint.DestroyRecordDeleted)
	s.log.Info("sandbox destroyed", "SANDBOX_ID", id, "ACTION", action, "CALLER_UID", uidField(ctx))
	// The source of its last promotion was kept for its next one.
	if s.earlierSource(ctx, id) != nil {
		if _, err := s.prunePromotions(ctx); err != nil {
			s.log.Warn("deleting a destroyed sandbox's promotion source", "SANDBOX_ID", id, "error", err)
		}
	}
	return nil
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
	if err := s.stopScope(ctx, rec.Unit); err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.DestroyScopeStopped)
	s.closePorts(rec)
	if err := s.removeWorld(rec.ID); err != nil {
		return err
	}
	s.unboundDisk(ctx, rec)
	// Checkpoints (snapshots of the sandbox) first; clones before their
	// origins; the layer by its name, which a crash may have left out of
	// the record.
	var names []string
	for _, c := range slices.Backward(rec.Checkpoints) {
		names = append(names, checkpointLayerName(rec.ID, c.Name), checkpointName(rec.ID, c.Name))
	}
	names = append(names, layerName(rec.ID), rec.Volume, rec.Base)
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

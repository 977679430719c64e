package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/revert"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// Rollback brings sandbox id back to checkpoint name. A running sandbox
// is stopped first (its processes end: they could hold files of the state
// being replaced), its volumes are swapped for the checkpoint's, and its
// init starts again on them; the sandbox is ready after, with the same id,
// limits and time to live. Later checkpoints stay.
func (c *Checkpoints) Rollback(ctx context.Context, id, name string) (sb supervisor.Sandbox, err error) {
	defer c.h.Lock(id)()
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return sb, err
	}
	defer func() { c.h.Audit(ctx, "rollback", rec, err) }()
	what := fmt.Sprintf("rolling sandbox %s back to checkpoint %q", id, name)
	i := slices.IndexFunc(rec.Checkpoints, func(c Checkpoint) bool { return c.Name == name })
	if i < 0 {
		return sb, fmt.Errorf("%s: %w", what, ErrNoCheckpoint)
	}
	// A stopped one runs again after, as after a rebase.
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen, state.Stopped}, rec.State) {
		return sb, fmt.Errorf("%s: it is %s: %w", what, rec.State, supervisor.ErrWrongState)
	}
	undo := revert.New()
	defer func() { _ = undo.Fail(ctx) }()
	start, err := c.h.StopSandbox(ctx, rec, func() { crashpoint.Hit(crashpoint.RollbackStopped) })
	if start != nil {
		// A failure after the stop: the sandbox starts again on what its
		// volumes hold, rather than stay listed without an init.
		undo.AddFunc(func() {
			if serr := start(context.WithoutCancel(ctx), rec); serr != nil {
				c.h.Log().Error("restarting a sandbox after a failed rollback", "SANDBOX_ID", id, "error", serr)
			}
		})
	}
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RollbackWorldRemoved)
	b := c.h.Backend()
	pairs := rollbackPairs(rec, i)
	// The volumes are swapped one at a time: a crash between two swaps
	// would leave the checkpoint's files under the system layer of
	// before. A marker volume, there from before the first swap to after
	// the last, has the daemon's next start finish the rollback.
	var marker cowfs.Volume
	if len(pairs) > 1 {
		if marker, err = b.Create(ctx, volname.RollbackMarker(id, name)); err != nil {
			return sb, fmt.Errorf("%s: marking it under way: %w", what, err)
		}
		// A failure is not finished later: the sandbox runs on.
		undo.AddFunc(func() { _ = b.Delete(context.WithoutCancel(ctx), marker) })
	}
	for _, p := range pairs {
		if err := swap(ctx, b, p); err != nil {
			return sb, fmt.Errorf("%s: %w", what, err)
		}
		if p == pairs[0] {
			crashpoint.Hit(crashpoint.RollbackVolume)
		}
	}
	if marker.Name != "" {
		if err := b.Delete(ctx, marker); err != nil {
			return sb, fmt.Errorf("%s: removing its marker: %w", what, err)
		}
	}
	crashpoint.Hit(crashpoint.RollbackSwapped)
	// Started again as after a reboot: Reconcile would do the same if the
	// daemon died here. Whatever happens now: one start only.
	undo.Success()
	if err := start(ctx, rec); err != nil {
		return sb, fmt.Errorf("%s: starting it again: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RollbackRestarted)
	rec, err = c.h.Store().Update(id, func(r *state.Record) error { r.State = state.Ready; return nil })
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	c.h.Log().Info("sandbox rolled back", "SANDBOX_ID", id, "ACTION", "rollback", "checkpoint", name, "CALLER_UID", uidField(ctx))
	return c.h.Sandbox(ctx, id)
}

// swap rolls volume p[0] back to p[1], a snapshot of it.
func swap(ctx context.Context, b cowfs.Backend, p [2]string) error {
	v, err := b.Get(ctx, p[0])
	if err != nil {
		return err
	}
	to, err := b.Get(ctx, p[1])
	if err != nil {
		return err
	}
	return b.Rollback(ctx, v, to)
}

// rollbackPairs pairs each volume of sandbox rec that a rollback to its
// checkpoint i swaps with the checkpoint's volume it takes.
func rollbackPairs(rec state.Record, i int) [][2]string {
	c := rec.Checkpoints[i]
	pairs := [][2]string{{rec.Volume, volname.Checkpoint(rec.ID, c.Name)}}
	if rec.Layer != "" && c.Layer {
		pairs = append(pairs, [2]string{rec.Layer, volname.CheckpointLayer(rec.ID, c.Name)})
	}
	return pairs
}

// finishRollbacks finishes the rollbacks that a crash interrupted between
// their swaps (each has its marker volume), before their sandboxes start
// again: every volume of the sandbox is rolled back to the checkpoint
// again, one already swapped to the same content. Then the markers go.
func (c *Checkpoints) finishRollbacks(ctx context.Context, recs []state.Record, vols []cowfs.Volume, active map[string]bool) error {
	byID := map[string]state.Record{}
	for _, rec := range recs {
		byID[rec.ID] = rec
	}
	var errs []error
	for _, marker := range vols {
		id, name, ok := volname.RollbackOf(marker.Name)
		if !ok || !marker.Ours {
			continue
		}
		rec, known := byID[id]
		i := slices.IndexFunc(rec.Checkpoints, func(c Checkpoint) bool { return c.Name == name })
		switch {
		case !known || i < 0 || rec.State == state.Creating || rec.State == state.Destroying:
			// Nothing to finish.
		case active[rec.Unit]:
			// Rollback stops the sandbox before it marks; never swap
			// the volumes under a running one.
			errs = append(errs, fmt.Errorf("sandbox %s runs with a rollback to %q marked under way: left as it is", id, name))
		default:
			if err := c.redoRollback(ctx, rec, i); err != nil {
				errs = append(errs, fmt.Errorf("sandbox %s: finishing its rollback to %q: %w", id, name, err))
			} else {
				c.h.Log().Warn("finished a rollback that a crash interrupted", "SANDBOX_ID", id, "checkpoint", name, "ACTION", "reconcile")
			}
		}
		if err := c.h.Backend().Delete(ctx, marker); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
			errs = append(errs, fmt.Errorf("removing rollback marker %s: %w", marker.Name, err))
		}
	}
	return errors.Join(errs...)
}

// redoRollback rolls each volume of sandbox rec back to its checkpoint i.
func (c *Checkpoints) redoRollback(ctx context.Context, rec state.Record, i int) error {
	defer c.h.Lock(rec.ID)()
	for _, p := range rollbackPairs(rec, i) {
		if err := swap(ctx, c.h.Backend(), p); err != nil {
			return err
		}
	}
	return nil
}

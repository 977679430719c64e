package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/revert"
	"github.com/sandboxd/sandboxd/promote"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// Rebase brings sandbox id onto its project as it is now: a new base is
// taken of the project, and the sandbox's own changes are applied onto a
// copy of it, unless the project changed any of the same paths (a
// conflict, refused by name, unless the sandbox's version holds the
// project's change already: a Merge resolved it). Like a rollback, the sandbox's processes
// are stopped and it starts again on the new copy; its system layer and
// checkpoints stay.
func (c *Checkpoints) Rebase(ctx context.Context, id string) (sb supervisor.Sandbox, err error) {
	defer c.h.Lock(id)()
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return sb, err
	}
	defer func() { c.h.Audit(ctx, "rebase", rec, err) }()
	what := "rebasing sandbox " + id
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen, state.Stopped}, rec.State) {
		return sb, fmt.Errorf("%s: it is %s: %w", what, rec.State, supervisor.ErrWrongState)
	}
	snapshotProject, err := c.h.OpenProject(ctx, rec)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	b := c.h.Backend()
	oldBase, err := b.Get(ctx, rec.Base)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	oldVol, err := b.Get(ctx, rec.Volume)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	undo := revert.New()
	defer func() { _ = undo.Fail(ctx) }()
	// What the sandbox changed, read from a moment's read-only copy; the
	// sandbox is frozen for it, as for a checkpoint.
	src, err := c.h.FrozenSnapshot(ctx, rec, oldVol, volname.Diff(id, "r"+newTag()))
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = b.Delete(context.WithoutCancel(ctx), src) }()
	crashpoint.Hit(crashpoint.RebaseSource)
	changes, err := b.Changes(ctx, oldBase, src)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	baseName, volName := volname.Rebase(id, newTag())
	newBase, err := snapshotProject(ctx, baseName)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	undo.AddFunc(func() { _ = b.Delete(context.WithoutCancel(ctx), newBase) })
	crashpoint.Hit(crashpoint.RebaseNewBase)
	theirs, err := b.Changes(ctx, oldBase, newBase)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	conflicts, err := promote.RealConflicts(promote.Conflicts(changes, theirs), newBase.Path, oldBase.Path, src.Path)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	if conflicts, err = merged(ctx, conflicts, oldBase.Path, newBase.Path, src.Path); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	if len(conflicts) > 0 {
		return sb, fmt.Errorf("%s: the project changed these paths since the sandbox's base, and so did the sandbox: %s: %w",
			what, strings.Join(conflicts, ", "), supervisor.ErrConflict)
	}
	newVol, err := b.Snapshot(ctx, newBase, volName, false)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	undo.AddFunc(func() { _ = b.Delete(context.WithoutCancel(ctx), newVol) })
	if err := c.h.BoundDisk(ctx, rec, newVol); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := promote.Apply(ctx, changes, src.Path, newVol.Path); err != nil {
		return sb, fmt.Errorf("%s: applying its changes onto the project: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RebaseApplied)

	// The swap: stop, record the new volumes (one transaction: a crash
	// leaves the old pair or the new one named, and Reconcile removes the
	// other), start again, delete the old pair.
	start, err := c.h.StopSandbox(ctx, rec, func() { crashpoint.Hit(crashpoint.RebaseStopped) })
	if err != nil {
		if start != nil {
			c.restartAfterFailure(ctx, start, rec)
		}
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	rec, err = c.h.Store().Update(id, func(r *state.Record) error {
		r.Base, r.Volume = newBase.Name, newVol.Name
		return nil
	})
	if err != nil {
		c.restartAfterFailure(ctx, start, rec)
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	undo.Success() // named by the record now
	crashpoint.Hit(crashpoint.RebaseRecorded)
	if err := start(ctx, rec); err != nil {
		return sb, fmt.Errorf("%s: starting it again: %w", what, err)
	}
	if rec, err = c.h.Store().Update(id, func(r *state.Record) error { r.State = state.Ready; return nil }); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RebaseRestarted)
	for _, v := range []cowfs.Volume{oldVol, oldBase} {
		if err := b.Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
			c.h.Log().Warn("deleting a rebased sandbox's old volume", "SANDBOX_ID", id, "volume", v.Name, "error", err)
		}
	}
	crashpoint.Hit(crashpoint.RebaseOldDeleted)
	c.h.Log().Info("sandbox rebased", "SANDBOX_ID", id, "ACTION", "rebase", "changes", len(changes), "CALLER_UID", uidField(ctx))
	return c.h.Sandbox(ctx, id)
}

// restartAfterFailure starts a sandbox again on what its volumes hold,
// after a failure once it was stopped.
func (c *Checkpoints) restartAfterFailure(ctx context.Context, start func(context.Context, state.Record) error, rec state.Record) {
	if err := start(context.WithoutCancel(ctx), rec); err != nil {
		c.h.Log().Error("restarting a sandbox after a failure", "SANDBOX_ID", rec.ID, "error", err)
	}
}

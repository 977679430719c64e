package supervisor

import (
	"context"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/diskquota"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// What the checkpoints room (supervisor/checkpoints) needs of the core
// beyond Host: a rollback and a rebase swap a sandbox's volumes under a
// stopped init; a checkpoint and a rebase put what they make under the
// sandbox's disk quota; a rebase takes a new base of the project as a
// create does.

// StopSandbox stops sandbox rec's scope (its processes end), then
// forgets its init and removes its runtime directory; stopped runs
// between the two. It returns start, which starts the sandbox again
// from a record (rec, or rec as the room changed its volumes) as
// Reconcile does after a reboot, with rec's limits. start is nil only
// when nothing was stopped: a room that fails once start is given calls
// it, so that the sandbox runs on what its volumes hold.
func (h host) StopSandbox(ctx context.Context, rec state.Record, stopped func()) (start func(context.Context, state.Record) error, err error) {
	var limits units.Limits
	if err := units.UnmarshalLimits(rec.Limits, &limits); err != nil {
		return nil, err
	}
	if err := h.s.scopes.stop(ctx, rec.Unit); err != nil {
		return nil, err
	}
	start = func(ctx context.Context, rec state.Record) error {
		return h.s.startScope(ctx, rec, limits, nil, nil)
	}
	stopped()
	return start, h.s.removeWorld(rec.ID)
}

// boundDisk and unboundDisk: a sandbox's disk quota (create).
var boundDisk, unboundDisk = diskquota.Bound, diskquota.Unbound

// BoundDisk puts vols, volumes of sandbox rec, under its disk quota.
func (h host) BoundDisk(ctx context.Context, rec state.Record, vols ...cowfs.Volume) error {
	return diskquota.Bound(ctx, h.s.cfg.Backend, rec, vols...)
}

// OpenProject opens sandbox rec's project as it is now, for the caller
// of ctx: refused when the project is gone, the caller may not use it,
// or it moved (ErrProjectMoved). snapshot takes a read-only snapshot of
// it named name, as a create takes a base (under the project's gate).
func (h host) OpenProject(ctx context.Context, rec state.Record) (snapshot func(ctx context.Context, name string) (cowfs.Volume, error), err error) {
	location, err := h.ProjectLocation(ctx, rec)
	if err != nil {
		return nil, err
	}
	project, err := h.s.cfg.Backend.Project(ctx, location)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, name string) (cowfs.Volume, error) {
		return h.s.projects.SnapshotBase(ctx, rec.Project, project, name)
	}, nil
}

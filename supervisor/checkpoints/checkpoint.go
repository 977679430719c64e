package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/randid"
	"github.com/sandboxd/sandboxd/internal/revert"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// ErrNoCheckpoint: the sandbox has no checkpoint of that name.
var ErrNoCheckpoint = errors.New("no such checkpoint")

// Checkpoint is a named, read-only snapshot of a sandbox: its copy of the
// project and, where the layer is a volume, its system layer.
type Checkpoint = state.Checkpoint

// maxCheckpointName keeps the volumes' names within cowfs's limit.
const maxCheckpointName = 64

// DefaultMaxCheckpoints is how many checkpoints a sandbox may keep when
// Config.MaxCheckpoints is 0. What they hold is charged to the sandbox's
// disk quota where the pool can: under btrfs simple quotas an extent is
// charged to the volume that wrote it for as long as any snapshot keeps
// it, so data that only a checkpoint still holds counts against the
// sandbox; a ZFS quota counts a dataset's snapshots. The cap bounds what
// the quota cannot: the number of volumes (and their metadata).
const DefaultMaxCheckpoints = 32

// Host is the core as this room needs it: supervisor.Host, and what a
// rollback, a rebase and a checkpoint do to a sandbox beyond it
// (supervisor/host_checkpoints.go).
type Host interface {
	supervisor.Host
	// StopSandbox stops sandbox rec's scope, runs stopped, then forgets
	// its init; start starts it again from a record (nil: nothing was
	// stopped).
	StopSandbox(ctx context.Context, rec state.Record, stopped func()) (start func(context.Context, state.Record) error, err error)
	// BoundDisk puts vols, volumes of sandbox rec, under its disk quota.
	BoundDisk(ctx context.Context, rec state.Record, vols ...cowfs.Volume) error
	// OpenProject opens sandbox rec's project as it is now for the
	// caller of ctx; snapshot takes a base of it as a create does.
	OpenProject(ctx context.Context, rec state.Record) (snapshot func(ctx context.Context, name string) (cowfs.Volume, error), err error)
}

// Config is what the room is made with.
type Config struct {
	// MaxCheckpoints caps one sandbox's checkpoints (0:
	// DefaultMaxCheckpoints).
	MaxCheckpoints int
}

// Checkpoints is the room: checkpoints, rollback, diff and rebase.
type Checkpoints struct {
	h   Host
	cfg Config
}

// New makes the room over h: it registers its refusals and finishes,
// before the sandboxes start again, the rollbacks a crash interrupted.
func New(h Host, cfg Config) *Checkpoints {
	c := &Checkpoints{h: h, cfg: cfg}
	h.Hooks().Refusals.Add(ErrNoCheckpoint)
	h.Hooks().BeforeReconcile.Add(func(ctx context.Context, v supervisor.ReconcileView) error {
		return c.finishRollbacks(ctx, v.Records, v.Volumes, v.Active)
	})
	return c
}

func (c *Checkpoints) maxCheckpoints() int {
	if c.cfg.MaxCheckpoints > 0 {
		return c.cfg.MaxCheckpoints
	}
	return DefaultMaxCheckpoints
}

// Take takes checkpoint name of sandbox id. The sandbox is frozen for
// the moment of the snapshots, so that its project and its system layer
// are taken at the same instant; it runs on after.
func (c *Checkpoints) Take(ctx context.Context, id, name string) (ck Checkpoint, err error) {
	defer c.h.Lock(id)()
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return ck, err
	}
	defer func() { c.h.Audit(ctx, "checkpoint", rec, err) }()
	what := fmt.Sprintf("checkpoint %q of sandbox %s", name, id)
	if err := cowfs.ValidateName(name); err != nil || len(name) > maxCheckpointName {
		return ck, fmt.Errorf("%s: a name is letters, digits, '-', '_' and '.', not starting with '.' or '-', at most %d bytes: %w", what, maxCheckpointName, supervisor.ErrInvalid)
	}
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen, state.Stopped}, rec.State) {
		return ck, fmt.Errorf("%s: it is %s: %w", what, rec.State, supervisor.ErrWrongState)
	}
	if slices.ContainsFunc(rec.Checkpoints, func(c Checkpoint) bool { return c.Name == name }) {
		return ck, fmt.Errorf("%s: it exists; delete it first or pick another name: %w", what, supervisor.ErrExists)
	}
	if limit := c.maxCheckpoints(); len(rec.Checkpoints) >= limit {
		return ck, fmt.Errorf("%s: the sandbox has %d checkpoints, the most it may keep (limits.max_checkpoints); delete one first: %w", what, len(rec.Checkpoints), supervisor.ErrLimitReached)
	}
	if rec.Runs() { // a frozen or stopped sandbox writes nothing meanwhile
		if err := c.h.Units().Freeze(ctx, rec.Unit); err != nil {
			return ck, fmt.Errorf("%s: freezing it for the snapshots: %w", what, err)
		}
		defer func() {
			if terr := c.h.Units().Thaw(context.WithoutCancel(ctx), rec.Unit); terr != nil && err == nil {
				err = fmt.Errorf("%s: thawing it after the snapshots: %w", what, terr)
			}
		}()
	}
	crashpoint.Hit(crashpoint.CheckpointFrozen)
	b := c.h.Backend()
	undo := revert.New()
	defer func() { _ = undo.Fail(ctx) }()
	var made []cowfs.Volume
	pairs := [][2]string{{rec.Volume, volname.Checkpoint(id, name)}}
	if rec.Layer != "" {
		pairs = append(pairs, [2]string{rec.Layer, volname.CheckpointLayer(id, name)})
	}
	for _, p := range pairs {
		src, err := b.Get(ctx, p[0])
		if err != nil {
			return ck, fmt.Errorf("%s: %w", what, err)
		}
		v, err := b.Snapshot(ctx, src, p[1], true)
		if err != nil {
			return ck, fmt.Errorf("%s: %w", what, err)
		}
		undo.AddFunc(func() { _ = b.Delete(context.WithoutCancel(ctx), v) })
		made = append(made, v)
		if len(made) == 1 {
			crashpoint.Hit(crashpoint.CheckpointFirst)
		}
	}
	crashpoint.Hit(crashpoint.CheckpointSnapshots)
	if err := c.h.BoundDisk(ctx, rec, made...); err != nil {
		return ck, fmt.Errorf("%s: %w", what, err)
	}
	ck = Checkpoint{Name: name, Created: time.Now().UTC(), Layer: rec.Layer != ""}
	rec, err = c.h.Store().Update(id, func(r *state.Record) error {
		r.Checkpoints = append(r.Checkpoints, ck)
		return nil
	})
	if err != nil {
		return ck, fmt.Errorf("%s: %w", what, err)
	}
	undo.Success()
	crashpoint.Hit(crashpoint.CheckpointRecorded)
	c.h.Log().Info("checkpoint taken", "SANDBOX_ID", id, "ACTION", "checkpoint", "checkpoint", name, "CALLER_UID", uidField(ctx))
	return ck, nil
}

// List lists sandbox id's checkpoints, oldest first.
func (c *Checkpoints) List(ctx context.Context, id string) ([]Checkpoint, error) {
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return nil, err
	}
	return rec.Checkpoints, nil
}

// Delete deletes checkpoint name of sandbox id.
func (c *Checkpoints) Delete(ctx context.Context, id, name string) (err error) {
	defer c.h.Lock(id)()
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return err
	}
	defer func() { c.h.Audit(ctx, "checkpoint-delete", rec, err) }()
	if !slices.ContainsFunc(rec.Checkpoints, func(c Checkpoint) bool { return c.Name == name }) {
		return fmt.Errorf("deleting checkpoint %q of sandbox %s: %w", name, id, ErrNoCheckpoint)
	}
	// The record first: a crash between leaves volumes that Reconcile
	// removes as orphans, never a listed checkpoint without its volumes.
	rec, err = c.h.Store().Update(id, func(r *state.Record) error {
		r.Checkpoints = slices.DeleteFunc(r.Checkpoints, func(c Checkpoint) bool { return c.Name == name })
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting checkpoint %q of sandbox %s: %w", name, id, err)
	}
	for _, v := range []string{volname.CheckpointLayer(id, name), volname.Checkpoint(id, name)} {
		if err := volname.Delete(ctx, c.h.Backend(), v); err != nil {
			return fmt.Errorf("deleting checkpoint %q of sandbox %s: %w", name, id, err)
		}
	}
	return nil
}

// uidField is the caller's uid for the journal, or "daemon" (as the
// core's journal lines have it).
func uidField(ctx context.Context) string {
	if uid, ok := supervisor.CallerUID(ctx); ok {
		return fmt.Sprint(uid)
	}
	return "daemon"
}

// newTag is a short random name part, which makes a volume's name
// unique.
func newTag() string {
	return randid.Hex(4)
}

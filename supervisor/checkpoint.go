package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/promote/unidiff"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// ErrNoCheckpoint: the sandbox has no checkpoint of that name.
var ErrNoCheckpoint = errors.New("no such checkpoint")

// Checkpoint is a named, read-only snapshot of a sandbox: its copy of the
// project and, where the layer is a volume, its system layer.
type Checkpoint = state.Checkpoint

// Volumes of checkpoint name of sandbox id: its project copy's and its
// system layer's.
func checkpointName(id, name string) string      { return prefixCheckpoint + id + "-" + name }
func checkpointLayerName(id, name string) string { return prefixCheckpointLayer + id + "-" + name }

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

func (s *Supervisor) maxCheckpoints() int {
	if s.cfg.MaxCheckpoints > 0 {
		return s.cfg.MaxCheckpoints
	}
	return DefaultMaxCheckpoints
}

// Checkpoint takes checkpoint name of sandbox id. The sandbox is frozen
// for the moment of the snapshots, so that its project and its system
// layer are taken at the same instant; it runs on after.
func (s *Supervisor) Checkpoint(ctx context.Context, id, name string) (ck Checkpoint, err error) {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return ck, err
	}
	defer func() { s.audit(ctx, "checkpoint", rec, err) }()
	what := fmt.Sprintf("checkpoint %q of sandbox %s", name, id)
	if err := cowfs.ValidateName(name); err != nil || len(name) > maxCheckpointName {
		return ck, fmt.Errorf("%s: a name is letters, digits, '-', '_' and '.', not starting with '.' or '-', at most %d bytes: %w", what, maxCheckpointName, ErrInvalid)
	}
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen}, rec.State) {
		return ck, fmt.Errorf("%s: it is %s: %w", what, rec.State, ErrWrongState)
	}
	if slices.ContainsFunc(rec.Checkpoints, func(c Checkpoint) bool { return c.Name == name }) {
		return ck, fmt.Errorf("%s: it exists; delete it first or pick another name: %w", what, ErrExists)
	}
	if limit := s.maxCheckpoints(); len(rec.Checkpoints) >= limit {
		return ck, fmt.Errorf("%s: the sandbox has %d checkpoints, the most it may keep (limits.max_checkpoints); delete one first: %w", what, len(rec.Checkpoints), ErrLimitReached)
	}
	if rec.State != state.Frozen {
		if err := s.cfg.Units.Freeze(ctx, rec.Unit); err != nil {
			return ck, fmt.Errorf("%s: freezing it for the snapshots: %w", what, err)
		}
		defer func() {
			if terr := s.cfg.Units.Thaw(context.WithoutCancel(ctx), rec.Unit); terr != nil && err == nil {
				err = fmt.Errorf("%s: thawing it after the snapshots: %w", what, terr)
			}
		}()
	}
	crashpoint.Hit(crashpoint.CheckpointFrozen)
	var made []cowfs.Volume
	defer func() {
		if err != nil {
			for _, v := range slices.Backward(made) {
				_ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), v)
			}
		}
	}()
	pairs := [][2]string{{rec.Volume, checkpointName(id, name)}}
	if rec.Layer != "" {
		pairs = append(pairs, [2]string{rec.Layer, checkpointLayerName(id, name)})
	}
	for _, p := range pairs {
		src, err := s.cfg.Backend.Get(ctx, p[0])
		if err != nil {
			return ck, fmt.Errorf("%s: %w", what, err)
		}
		v, err := s.cfg.Backend.Snapshot(ctx, src, p[1], true)
		if err != nil {
			return ck, fmt.Errorf("%s: %w", what, err)
		}
		made = append(made, v)
		if len(made) == 1 {
			crashpoint.Hit(crashpoint.CheckpointFirst)
		}
	}
	crashpoint.Hit(crashpoint.CheckpointSnapshots)
	if err := s.boundDisk(ctx, rec, made...); err != nil {
		return ck, fmt.Errorf("%s: %w", what, err)
	}
	ck = Checkpoint{Name: name, Created: time.Now().UTC(), Layer: rec.Layer != ""}
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error {
		r.Checkpoints = append(r.Checkpoints, ck)
		return nil
	})
	if err != nil {
		return ck, fmt.Errorf("%s: %w", what, err)
	}
	crashpoint.Hit(crashpoint.CheckpointRecorded)
	s.log.Info("checkpoint taken", "SANDBOX_ID", id, "ACTION", "checkpoint", "checkpoint", name, "CALLER_UID", uidField(ctx))
	return ck, nil
}

// Checkpoints lists sandbox id's checkpoints, oldest first.
func (s *Supervisor) Checkpoints(ctx context.Context, id string) ([]Checkpoint, error) {
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return nil, err
	}
	return rec.Checkpoints, nil
}

// DeleteCheckpoint deletes checkpoint name of sandbox id.
func (s *Supervisor) DeleteCheckpoint(ctx context.Context, id, name string) (err error) {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return err
	}
	defer func() { s.audit(ctx, "checkpoint-delete", rec, err) }()
	if !slices.ContainsFunc(rec.Checkpoints, func(c Checkpoint) bool { return c.Name == name }) {
		return fmt.Errorf("deleting checkpoint %q of sandbox %s: %w", name, id, ErrNoCheckpoint)
	}
	// The record first: a crash between leaves volumes that Reconcile
	// removes as orphans, never a listed checkpoint without its volumes.
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error {
		r.Checkpoints = slices.DeleteFunc(r.Checkpoints, func(c Checkpoint) bool { return c.Name == name })
		return nil
	})
	if err != nil {
		return fmt.Errorf("deleting checkpoint %q of sandbox %s: %w", name, id, err)
	}
	for _, v := range []string{checkpointLayerName(id, name), checkpointName(id, name)} {
		if err := s.deleteVolume(ctx, v); err != nil {
			return fmt.Errorf("deleting checkpoint %q of sandbox %s: %w", name, id, err)
		}
	}
	return nil
}

// deleteVolume deletes sandboxd's volume name if it exists.
func (s *Supervisor) deleteVolume(ctx context.Context, name string) error {
	v, err := s.cfg.Backend.Get(ctx, name)
	if errors.Is(err, cowfs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.cfg.Backend.Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
		return err
	}
	return nil
}

// Rollback brings sandbox id back to checkpoint name. A running sandbox
// is stopped first (its processes end: they could hold files of the state
// being replaced), its volumes are swapped for the checkpoint's, and its
// init starts again on them; the sandbox is ready after, with the same id,
// limits and time to live. Later checkpoints stay.
func (s *Supervisor) Rollback(ctx context.Context, id, name string) (sb Sandbox, err error) {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return sb, err
	}
	defer func() { s.audit(ctx, "rollback", rec, err) }()
	what := fmt.Sprintf("rolling sandbox %s back to checkpoint %q", id, name)
	i := slices.IndexFunc(rec.Checkpoints, func(c Checkpoint) bool { return c.Name == name })
	if i < 0 {
		return sb, fmt.Errorf("%s: %w", what, ErrNoCheckpoint)
	}
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen}, rec.State) {
		return sb, fmt.Errorf("%s: it is %s: %w", what, rec.State, ErrWrongState)
	}
	var limits units.Limits
	if err := unmarshalLimits(rec.Limits, &limits); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	if err := s.stopScope(ctx, rec.Unit); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RollbackStopped)
	restarted := false
	defer func() {
		// A failure after the stop: the sandbox starts again on what its
		// volumes hold, rather than stay listed without an init.
		if err != nil && !restarted {
			if serr := s.startScope(context.WithoutCancel(ctx), rec, limits, nil, nil); serr != nil {
				s.log.Error("restarting a sandbox after a failed rollback", "SANDBOX_ID", id, "error", serr)
			}
		}
	}()
	if err := s.removeWorld(id); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RollbackWorldRemoved)
	pairs := rollbackPairs(rec, i)
	// The volumes are swapped one at a time: a crash between two swaps
	// would leave the checkpoint's files under the system layer of
	// before. A marker volume, there from before the first swap to after
	// the last, has the daemon's next start finish the rollback.
	var marker cowfs.Volume
	if len(pairs) > 1 {
		if marker, err = s.cfg.Backend.Create(ctx, rollbackMarkerName(id, name)); err != nil {
			return sb, fmt.Errorf("%s: marking it under way: %w", what, err)
		}
		defer func() {
			if err != nil { // a failure is not finished later: the sandbox runs on
				_ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), marker)
			}
		}()
	}
	for _, p := range pairs {
		v, err := s.cfg.Backend.Get(ctx, p[0])
		if err != nil {
			return sb, fmt.Errorf("%s: %w", what, err)
		}
		to, err := s.cfg.Backend.Get(ctx, p[1])
		if err != nil {
			return sb, fmt.Errorf("%s: %w", what, err)
		}
		if err := s.cfg.Backend.Rollback(ctx, v, to); err != nil {
			return sb, fmt.Errorf("%s: %w", what, err)
		}
		if p == pairs[0] {
			crashpoint.Hit(crashpoint.RollbackVolume)
		}
	}
	if marker.Name != "" {
		if err := s.cfg.Backend.Delete(ctx, marker); err != nil {
			return sb, fmt.Errorf("%s: removing its marker: %w", what, err)
		}
	}
	crashpoint.Hit(crashpoint.RollbackSwapped)
	// Started again as after a reboot: Reconcile would do the same if the
	// daemon died here.
	restarted = true // whatever happens now: one start only
	if err := s.startScope(ctx, rec, limits, nil, nil); err != nil {
		return sb, fmt.Errorf("%s: starting it again: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RollbackRestarted)
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error { r.State = state.Ready; return nil })
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	s.log.Info("sandbox rolled back", "SANDBOX_ID", id, "ACTION", "rollback", "checkpoint", name, "CALLER_UID", uidField(ctx))
	return s.sandbox(ctx, rec), nil
}

// rollbackPairs pairs each volume of sandbox rec that a rollback to its
// checkpoint i swaps with the checkpoint's volume it takes.
func rollbackPairs(rec state.Record, i int) [][2]string {
	c := rec.Checkpoints[i]
	pairs := [][2]string{{rec.Volume, checkpointName(rec.ID, c.Name)}}
	if rec.Layer != "" && c.Layer {
		pairs = append(pairs, [2]string{rec.Layer, checkpointLayerName(rec.ID, c.Name)})
	}
	return pairs
}

// rollbackMarkerName is the volume that says a rollback of sandbox id to
// its checkpoint name is under way; rollbackOf reads it back.
func rollbackMarkerName(id, name string) string { return prefixRollbackMarker + id + "-" + name }

func rollbackOf(volume string) (id, name string, ok bool) {
	rest, found := strings.CutPrefix(volume, prefixRollbackMarker)
	if !found {
		return "", "", false
	}
	return strings.Cut(rest, "-")
}

// Diff lists what sandbox id changed in its copy of the project since its
// base, from the backend's change list (its cost follows the change, not
// the project, where the backend has FastChanges), less what the
// project's ignore rules leave out (ignore.go).
func (s *Supervisor) Diff(ctx context.Context, id string) ([]cowfs.Change, error) {
	changes, _, err := s.DiffCounted(ctx, id)
	return changes, err
}

// DiffCounted is Diff, and how many paths the ignore rules left out.
func (s *Supervisor) DiffCounted(ctx context.Context, id string) (changes []cowfs.Change, ignored int, err error) {
	err = s.withChanges(ctx, id, "listing the changes of sandbox "+id, func(_, _ cowfs.Volume, c []cowfs.Change, n int) error {
		changes, ignored = c, n
		return nil
	})
	return changes, ignored, err
}

// UnifiedDiff writes what sandbox id changed since its base as a unified
// text diff (unidiff.Write): the change list's files only, less what
// the ignore rules leave out.
func (s *Supervisor) UnifiedDiff(ctx context.Context, id string, w io.Writer, o unidiff.Options) error {
	return s.withChanges(ctx, id, "diffing sandbox "+id, func(base, now cowfs.Volume, changes []cowfs.Change, _ int) error {
		return unidiff.Write(ctx, w, changes, base.Path, now.Path, o)
	})
}

// withChanges calls fn with sandbox id's base, a moment's read-only
// snapshot of it (btrfs sends from read-only snapshots), and the change
// list between the two less what the project's ignore rules leave out
// (and how many that was); the snapshot goes after.
func (s *Supervisor) withChanges(ctx context.Context, id, what string, fn func(base, now cowfs.Volume, changes []cowfs.Change, ignored int) error) error {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return err
	}
	base, err := s.cfg.Backend.Get(ctx, rec.Base)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	vol, err := s.cfg.Backend.Get(ctx, rec.Volume)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	now, err := s.cfg.Backend.Snapshot(ctx, vol, prefixDiff+id+"-"+newCommandID(), true)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), now) }()
	changes, err := s.sandboxChanges(ctx, base, now)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	changes, ignored, err := s.filterChanges(ctx, rec.Project, base, now, changes)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := fn(base, now, changes, ignored); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// checkpointOf tells a checkpoint's (or diff's) volume name's sandbox id,
// for Reconcile: ck-ID-NAME, cks-ID-NAME, diff-ID-X.
func checkpointOf(volume string) (id, name string, ok bool) {
	for _, prefix := range []string{prefixCheckpointLayer, prefixCheckpoint, prefixDiff} {
		if rest, found := strings.CutPrefix(volume, prefix); found {
			id, name, ok = strings.Cut(rest, "-")
			if prefix == prefixDiff {
				name = ""
			}
			return id, name, ok
		}
	}
	return "", "", false
}

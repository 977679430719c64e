package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/promote"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units"
)

// ErrProjectMoved: a sandbox's project is no longer where it was when
// the sandbox was made (removed and added again elsewhere, or moved in
// sandboxd.toml); the sandbox's base is of the old volume.
var ErrProjectMoved = fmt.Errorf("project moved: %w", ErrWrongState)

// projectLocation is where sandbox rec's project is now, for a call that
// reads the project or writes into it for the caller of ctx (a rebase,
// its change list, a promotion): refused when the project is gone, when
// the caller may no longer use it (as Create checks), and when the
// project is no longer where the sandbox was made of it.
func (s *Supervisor) projectLocation(ctx context.Context, rec state.Record) (string, error) {
	location := s.projects.location(rec.Project)
	if location == "" {
		return "", fmt.Errorf("its project %q is gone: %w", rec.Project, ErrUnknownProject)
	}
	if err := s.mayUseProject(ctx, rec.Project); err != nil {
		return "", err
	}
	if rec.ProjectLocation != "" && rec.ProjectLocation != location {
		return "", fmt.Errorf("its project %q is now at %s, not at %s where the sandbox was made of it, so the sandbox's base is of another volume; "+
			"make a new sandbox of the project: %w", rec.Project, location, rec.ProjectLocation, ErrProjectMoved)
	}
	return location, nil
}

// ProjectMove is how far a sandbox's project moved on since its base.
type ProjectMove struct {
	// Paths the project changed since the base, metadata-only changes
	// (access times of a read) left out.
	Paths []string
	// Base is when the base was taken.
	Base time.Time
}

// ProjectMoves lists what sandbox id's project changed since the
// sandbox's base. Its cost follows the change (a snapshot of the project
// and the backend's change list), not the project.
func (s *Supervisor) ProjectMoves(ctx context.Context, id string) (ProjectMove, error) {
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return ProjectMove{}, err
	}
	return s.projectMoves(ctx, rec)
}

func (s *Supervisor) projectMoves(ctx context.Context, rec state.Record) (ProjectMove, error) {
	what := "reading how the project of sandbox " + rec.ID + " moved"
	m := ProjectMove{}
	location, err := s.projectLocation(ctx, rec)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	project, err := s.cfg.Backend.Project(ctx, location)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	base, err := s.cfg.Backend.Get(ctx, rec.Base)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	m.Base = base.Created
	now, err := s.cfg.Backend.Snapshot(ctx, project, prefixDiff+rec.ID+"-p"+newCommandID(), true)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), now) }()
	changes, err := s.cfg.Backend.Changes(ctx, base, now)
	if err != nil {
		return m, fmt.Errorf("%s: %w", what, err)
	}
	for _, c := range changes {
		if c.Kind == cowfs.Metadata || c.Type == cowfs.TypeDir && c.Kind == cowfs.Modified {
			continue
		}
		m.Paths = append(m.Paths, c.Path)
	}
	return m, nil
}

// Rebase brings sandbox id onto its project as it is now: a new base is
// taken of the project, and the sandbox's own changes are applied onto a
// copy of it, unless the project changed any of the same paths (a
// conflict, refused by name). Like a rollback, the sandbox's processes
// are stopped and it starts again on the new copy; its system layer and
// checkpoints stay.
func (s *Supervisor) Rebase(ctx context.Context, id string) (sb Sandbox, err error) {
	defer s.lock(id)()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return sb, err
	}
	defer func() { s.audit(ctx, "rebase", rec, err) }()
	what := "rebasing sandbox " + id
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen, state.Stopped}, rec.State) {
		return sb, fmt.Errorf("%s: it is %s: %w", what, rec.State, ErrWrongState)
	}
	var limits units.Limits
	if err := unmarshalLimits(rec.Limits, &limits); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	location, err := s.projectLocation(ctx, rec)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	project, err := s.cfg.Backend.Project(ctx, location)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	oldBase, err := s.cfg.Backend.Get(ctx, rec.Base)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	oldVol, err := s.cfg.Backend.Get(ctx, rec.Volume)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	var made []cowfs.Volume
	defer func() {
		if err != nil {
			for _, v := range slices.Backward(made) {
				_ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), v)
			}
		}
	}()
	// What the sandbox changed, read from a moment's read-only copy; the
	// sandbox is frozen for it, as for a checkpoint.
	src, err := s.frozenSnapshot(ctx, rec, oldVol, prefixDiff+id+"-r"+newCommandID())
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	defer func() { _ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), src) }()
	crashpoint.Hit(crashpoint.RebaseSource)
	changes, err := s.cfg.Backend.Changes(ctx, oldBase, src)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	gen := newCommandID()
	newBase, err := s.snapshotProject(ctx, rec.Project, project, baseName(id)+"-"+gen)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	made = append(made, newBase)
	crashpoint.Hit(crashpoint.RebaseNewBase)
	theirs, err := s.cfg.Backend.Changes(ctx, oldBase, newBase)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	conflicts, err := promote.RealConflicts(promote.Conflicts(changes, theirs), newBase.Path, oldBase.Path, src.Path)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	if len(conflicts) > 0 {
		return sb, fmt.Errorf("%s: the project changed these paths since the sandbox's base, and so did the sandbox: %s: %w",
			what, strings.Join(conflicts, ", "), ErrConflict)
	}
	newVol, err := s.cfg.Backend.Snapshot(ctx, newBase, volumeName(id)+"-"+gen, false)
	if err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	made = append(made, newVol)
	if err := s.boundDisk(ctx, rec, newVol); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := promote.Apply(ctx, changes, src.Path, newVol.Path); err != nil {
		return sb, fmt.Errorf("%s: applying its changes onto the project: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RebaseApplied)

	// The swap: stop, record the new volumes (one transaction: a crash
	// leaves the old pair or the new one named, and Reconcile removes the
	// other), start again, delete the old pair.
	if err := s.stopScope(ctx, rec.Unit); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RebaseStopped)
	if err := s.removeWorld(id); err != nil {
		s.restartAfterFailure(ctx, rec, limits)
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	rec, err = s.cfg.Store.Update(id, func(r *state.Record) error {
		r.Base, r.Volume = newBase.Name, newVol.Name
		return nil
	})
	if err != nil {
		s.restartAfterFailure(ctx, rec, limits)
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	made = nil // named by the record now
	crashpoint.Hit(crashpoint.RebaseRecorded)
	if err := s.startScope(ctx, rec, limits, nil, nil); err != nil {
		return sb, fmt.Errorf("%s: starting it again: %w", what, err)
	}
	if rec, err = s.cfg.Store.Update(id, func(r *state.Record) error { r.State = state.Ready; return nil }); err != nil {
		return sb, fmt.Errorf("%s: %w", what, err)
	}
	crashpoint.Hit(crashpoint.RebaseRestarted)
	for _, v := range []cowfs.Volume{oldVol, oldBase} {
		if err := s.cfg.Backend.Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
			s.log.Warn("deleting a rebased sandbox's old volume", "SANDBOX_ID", id, "volume", v.Name, "error", err)
		}
	}
	crashpoint.Hit(crashpoint.RebaseOldDeleted)
	s.log.Info("sandbox rebased", "SANDBOX_ID", id, "ACTION", "rebase", "changes", len(changes), "CALLER_UID", uidField(ctx))
	return s.sandbox(ctx, rec), nil
}

// restartAfterFailure starts a sandbox again on what its volumes hold,
// after a failure once it was stopped.
func (s *Supervisor) restartAfterFailure(ctx context.Context, rec state.Record, limits units.Limits) {
	if err := s.startScope(context.WithoutCancel(ctx), rec, limits, nil, nil); err != nil {
		s.log.Error("restarting a sandbox after a failure", "SANDBOX_ID", rec.ID, "error", err)
	}
}

// frozenSnapshot takes a read-only snapshot of vol, sandbox rec's copy of
// its project, with the sandbox frozen for the instant.
func (s *Supervisor) frozenSnapshot(ctx context.Context, rec state.Record, vol cowfs.Volume, name string) (v cowfs.Volume, err error) {
	if rec.Runs() {
		if err := s.cfg.Units.Freeze(ctx, rec.Unit); err != nil {
			return v, fmt.Errorf("freezing it for a snapshot: %w", err)
		}
		defer func() {
			if terr := s.cfg.Units.Thaw(context.WithoutCancel(ctx), rec.Unit); terr != nil && err == nil {
				err = fmt.Errorf("thawing it after a snapshot: %w", terr)
			}
		}()
	}
	return s.cfg.Backend.Snapshot(ctx, vol, name, true)
}

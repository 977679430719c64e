package promotion

// The project stage: the change set written into the project in place,
// its checks run in a sandbox of the project as applied, undone path by
// path if they fail.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/promote"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// projectStage is a stage whose target is the project itself.
type projectStage struct {
	r   *Promotions
	cfg StageConfig
	// keepPromoted: replica stages follow, which receive the project as
	// this stage leaves it (its promoted snapshot).
	keepPromoted bool
}

func (s *projectStage) Config() StageConfig { return s.cfg }
func (s *projectStage) Kind() Kind          { return KindProject }

// Apply takes the rollback point (unless Promote took it: the first
// stage, without approval), marks the project staged (the core's gate:
// creates take the rollback point meanwhile) and writes the change set.
func (s *projectStage) Apply(ctx context.Context, run *stageRun) error {
	r, p, st := s.r, run.p, run.st()
	loc, _ := r.h.Project(p.Project)
	project, err := r.h.Backend().Project(ctx, loc.Location)
	if err != nil {
		return err
	}
	var rp cowfs.Volume
	if st.RollbackPoint != "" {
		if rp, err = r.h.Backend().Get(ctx, st.RollbackPoint); err != nil {
			return err
		}
	} else {
		st.RollbackPoint = volname.PromotionRollback(p.ID, run.i)
		st.State = state.StageApplying
		r.put(p)
		base, err := r.h.Backend().Get(ctx, p.Base)
		if err != nil {
			return err
		}
		source, err := r.h.Backend().Get(ctx, p.Source)
		if err != nil {
			return err
		}
		var conflicts []string
		if rp, conflicts, err = r.projectRollbackPoint(ctx, project, base, source, r.earlierSource(ctx, p.Sandbox), run.changes, st.RollbackPoint); err != nil {
			return err
		}
		if len(conflicts) > 0 && !p.Force {
			return fmt.Errorf("the project changed these paths while the stage waited, and so did the sandbox: %s: %w", strings.Join(conflicts, ", "), supervisor.ErrConflict)
		}
		p.Conflicts = conflicts
	}
	st.State = state.StageApplying
	r.put(p)
	crashpoint.Hit(crashpoint.PromoteRollbackPoint)
	// From here until the stage passed or was undone, creates of the
	// project's sandboxes take the rollback point as their base, without
	// waiting for the checks (the core's project gate). Settled after
	// the undo, if any, or once passed (Done).
	run.project, run.rollbackPoint = project, rp
	run.settle = r.h.StageProject(p.Project, rp)
	run.undo.AddFunc(run.settle)
	source, err := r.h.Backend().Get(ctx, p.Source)
	if err != nil {
		return err
	}
	run.onFail(func(ctx context.Context, cause error) error {
		crashpoint.Hit(crashpoint.PromoteRollingBack)
		return r.undoStage(ctx, p, project, rp, source, run.changes, cause)
	})
	applied, err := promote.ApplyWith(ctx, run.changes, source.Path, project.Path, promote.ApplyOptions{RefusePrivileged: !p.AllowPrivileged, Expected: rp.Path})
	if err != nil {
		return err
	}
	crashpoint.Hit(crashpoint.PromoteApplied)
	r.h.Log().Info("promotion applied", "promotion", p.ID, "stage", st.Name, "removed", applied.Removed,
		"written", applied.Written, "cloned_bytes", applied.Cloned, "copied_bytes", applied.Copied)
	return nil
}

// Check runs the stage's checks in a sandbox of the project as applied.
func (s *projectStage) Check(ctx context.Context, run *stageRun) error {
	st := run.st()
	st.State = state.StageChecking
	s.r.put(run.p)
	if len(s.cfg.Checks) == 0 {
		return nil
	}
	results, err := s.r.checkInSandbox(ctx, run.p, s.cfg)
	st.Checks = results
	if err == nil {
		err = failedCheck(results)
	}
	return err
}

// Keep snapshots the project as promoted, if replicas follow: they
// receive it.
func (s *projectStage) Keep(ctx context.Context, run *stageRun) error {
	if !s.keepPromoted {
		return nil
	}
	if _, err := s.r.h.Backend().Snapshot(ctx, run.project, volname.PromotionOut(run.p.ID), true); err != nil {
		return fmt.Errorf("snapshotting the promoted project for the next stages: %w", err)
	}
	return nil
}

// Done settles the project (creates take it again) and deletes the
// rollback point.
func (s *projectStage) Done(ctx context.Context, run *stageRun) {
	run.settle() // before the rollback point goes: no create snapshots it now
	st := run.st()
	if err := volname.Delete(ctx, s.r.h.Backend(), st.RollbackPoint); err != nil {
		s.r.h.Log().Warn("deleting a passed stage's rollback point", "promotion", run.p.ID, "volume", st.RollbackPoint, "error", err)
	}
}

// Revert rolls the whole project back to the stage's rollback point, if
// it is still there.
func (s *projectStage) Revert(ctx context.Context, p *Promotion, i int) error {
	rp, err := s.r.h.Backend().Get(ctx, p.Stages[i].RollbackPoint)
	if errors.Is(err, cowfs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	loc, _ := s.r.h.Project(p.Project)
	project, err := s.r.h.Backend().Project(ctx, loc.Location)
	if err != nil {
		return err
	}
	if err := s.r.h.Backend().RollbackProject(ctx, project, rp); err != nil {
		return fmt.Errorf("rolling project %s back to %s: %w", p.Project, rp.Name, err)
	}
	return nil
}

// undoStage takes the promotion's change back out of the project after
// cause (a failed apply or check): only the paths the change set touched
// are put back as the rollback point has them, and only the entries the
// promotion wrote are taken out (promote.Restore), so that what others
// wrote to the project since stays. If that fails, the whole project goes
// back to the rollback point (an atomic swap) only if no one else changed
// it since (promote.ChangedByOthers); otherwise the project is left as it
// is, and the error says it may hold part of the change and where.
func (r *Promotions) undoStage(ctx context.Context, p *Promotion, project, rp, source cowfs.Volume, changes []cowfs.Change, cause error) error {
	ctx = context.WithoutCancel(ctx)
	res, err := promote.Restore(ctx, changes, source.Path, rp.Path, project.Path)
	if err == nil {
		if len(res.Kept) > 0 {
			r.h.Log().Warn("undoing a promotion left paths that others wrote into", "promotion", p.ID, "paths", strings.Join(res.Kept, ", "))
			return fmt.Errorf("%w; the promotion's paths were put back, except these, left because others made entries in them since: %s", cause, strings.Join(res.Kept, ", "))
		}
		return cause
	}
	others, oerr := promote.ChangedByOthers(ctx, changes, source.Path, rp.Path, project.Path)
	if oerr == nil && len(others) == 0 {
		r.h.Log().Warn("putting back a promotion's paths failed; no one else changed the project, rolling it back whole", "promotion", p.ID, "error", err)
		oerr = r.h.Backend().RollbackProject(ctx, project, rp)
		if oerr == nil {
			return fmt.Errorf("%w; putting its paths back failed (%w), and as no one else had changed the project, it was rolled back whole to %s", cause, err, rp.Name)
		}
	}
	if len(others) > 20 {
		others = append(others[:20], fmt.Sprintf("and %d more", len(others)-20))
	}
	why := fmt.Sprintf("others changed it since the apply (%s)", strings.Join(others, ", "))
	if oerr != nil {
		why = fmt.Sprintf("it could not be rolled back whole: %v", oerr)
	}
	r.h.Log().Error("undoing a promotion failed; the project may hold part of it", "promotion", p.ID, "error", err, "reason", why)
	return fmt.Errorf("%w; putting its paths back failed: %w: the project may hold part of the change, at these paths: %s; the rest of the project is as it was, and it was not rolled back whole because %s",
		cause, err, promote.ChangePaths(changes, 20), why)
}

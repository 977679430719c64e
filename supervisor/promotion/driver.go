package promotion

// The driver: a promotion's stages run in order, each through its
// Stage's steps, recorded before each is taken, undone by the run's
// reverter when one fails.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/revert"
	"github.com/sandboxd/sandboxd/promote/replica"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// run runs the promotion's stages from the first that is not passed,
// until one fails, waits for approval, or all are passed. ctx ends when
// the daemon stops (runs): the stage under way then fails and is
// undone, and the record and the audit log say why. The project, which
// Promote or Approve claimed, is released at the end.
func (r *Promotions) run(ctx context.Context, pid string, changes []cowfs.Change) {
	p, err := r.h.Store().Promotion(pid)
	if err != nil {
		r.h.Log().Error("running a promotion", "promotion", pid, "error", err)
		return
	}
	released := false
	defer func() {
		if !released {
			r.h.ReleaseProject(p.Project)
		}
	}()
	for i := range p.Stages {
		st := &p.Stages[i]
		if st.State == state.StagePassed {
			continue
		}
		if st.State == state.StageSkipped {
			break
		}
		if st.Approval == "admin" && !st.Approved {
			// The project is free before the record says waiting: an
			// approval that reads it may claim the project at once.
			r.h.ReleaseProject(p.Project)
			released = true
			st.State = state.StageWaiting
			p.State = state.PromotionWaiting
			r.put(&p)
			r.auditRun(ctx, "promote-waiting", p, i, nil)
			r.h.Log().Info("promotion waits for an admin's approval", "promotion", pid, "stage", st.Name)
			return
		}
		if err := r.runStage(ctx, &p, i, changes); err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
				err = fmt.Errorf("%w (%w)", err, cause)
			}
			ctx := context.WithoutCancel(ctx) // to record the failure
			st.State, st.Error, st.Ended = state.StageFailed, err.Error(), time.Now().UTC()
			p.State, p.Error = state.PromotionFailed, fmt.Sprintf("stage %s: %v", st.Name, err)
			r.put(&p)
			r.auditRun(ctx, "promote-stage", p, i, err)
			_, _ = r.prune(ctx)
			r.h.Log().Warn("promotion failed", "promotion", pid, "stage", st.Name, "error", err)
			return
		}
		r.auditRun(ctx, "promote-stage", p, i, nil)
	}
	p.State = state.PromotionDone
	r.put(&p)
	r.auditRun(ctx, "promote-done", p, -1, nil)
	_, _ = r.prune(ctx)
	r.h.Log().Info("promotion done", "promotion", pid, "SANDBOX_ID", p.Sandbox)
}

// stageRun is one stage of a promotion as it runs: what its steps read
// and record, and how it is undone.
type stageRun struct {
	p       *Promotion
	i       int
	changes []cowfs.Change
	undo    *revert.Reverter
	// err is why the stage failed, as its undo tells it on: each undo
	// step adds to it what it did, or could not do.
	err error

	// The project stage's: the project, its rollback point, and what
	// ends the project's staged state (the core's gate).
	project, rollbackPoint cowfs.Volume
	settle                 func()
	// The replica stages': the replica, the promoted snapshot it
	// receives, the parent of the stream, and its tree from before.
	replica *replica.Replica
	out     cowfs.Volume
	parent  *cowfs.Volume
	prev    string
}

// st is the run's record of its stage.
func (r *stageRun) st() *state.StageRun { return &r.p.Stages[r.i] }

// onFail adds to the stage's undo a step that, given why the stage
// failed, undoes what was done and says how it went.
func (r *stageRun) onFail(undo func(ctx context.Context, cause error) error) {
	r.undo.Add(func(ctx context.Context) error {
		r.err = undo(ctx, r.err)
		return nil // each step tells its own failure in r.err, and the next still runs
	})
}

// fail undoes the stage after err, last step first, and returns the
// stage's error.
func (r *stageRun) fail(ctx context.Context, err error) error {
	r.err = err
	_ = r.undo.Fail(ctx)
	return r.err
}

// runStage applies the change set to stage i, runs its checks, and rolls
// it back if they fail. Each step is recorded before it is taken.
func (r *Promotions) runStage(ctx context.Context, p *Promotion, i int, changes []cowfs.Change) error {
	stage := r.plan[i]
	run := &stageRun{p: p, i: i, changes: changes, undo: revert.New()}
	st := run.st()
	st.Started, st.Error = time.Now().UTC(), ""
	if err := stage.Apply(ctx, run); err != nil {
		return run.fail(ctx, err)
	}
	if err := stage.Check(ctx, run); err != nil {
		return run.fail(ctx, err)
	}
	crashpoint.Hit(crashpoint.PromoteChecked)
	if err := stage.Keep(ctx, run); err != nil {
		return run.fail(ctx, err)
	}
	run.undo.Success()
	st.State, st.Ended = state.StagePassed, time.Now().UTC()
	r.put(p)
	crashpoint.Hit(crashpoint.PromotePassed)
	stage.Done(ctx, run)
	return nil
}

package promotion

// After a crash: promotions cut short are rolled back and failed, and the
// volumes of finished promotions are collected (what keptVolumes keeps
// stays).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// reconcilePromotions finishes what a crash left of promotions (I1, I5):
// a stage that was being applied or checked is rolled back to its
// rollback point and the promotion fails, saying so; a promotion whose
// stages all passed is done. Then the volumes of finished promotions go,
// except the newest promoted snapshot of each project, which replicas
// hold as the parent of their next stream.
func (r *Promotions) reconcile(ctx context.Context, rep *supervisor.Report) error {
	ps, err := r.h.Store().Promotions()
	if err != nil {
		return fmt.Errorf("reconciling promotions: %w", err)
	}
	var errs []error
	for _, p := range ps {
		if p.State != state.PromotionRunning {
			continue
		}
		if err := r.reconcileOne(ctx, &p); err != nil {
			errs = append(errs, fmt.Errorf("promotion %s: %w", p.ID, err))
			continue
		}
		rep.Promotions = append(rep.Promotions, p.ID)
	}
	pruned, err := r.prune(ctx)
	rep.OrphanVolumes = append(rep.OrphanVolumes, pruned...)
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reconcileOne settles one promotion that was running at a crash.
func (r *Promotions) reconcileOne(ctx context.Context, p *Promotion) error {
	// Its check sandbox, if any, goes first: on ZFS a sandbox's base is a
	// snapshot of the project, which a rollback would have to destroy.
	if recs, err := r.h.Store().List(); err == nil {
		for _, rec := range recs {
			if rec.Name == volname.PromotionCheckSandbox(p.ID) {
				err := r.h.DestroyFor(ctx, rec.ID, "promote-interrupted")
				if err != nil && !errors.Is(err, supervisor.ErrNotFound) {
					return fmt.Errorf("destroying its check sandbox %s: %w", rec.ID, err)
				}
			}
		}
	}
	i := slices.IndexFunc(p.Stages, func(st state.StageRun) bool {
		return st.State != state.StagePassed && st.State != state.StageSkipped
	})
	if i < 0 {
		p.State = state.PromotionDone
		r.put(p)
		r.auditPromotion(ctx, "promote-done", *p, -1, nil)
		return nil
	}
	st := &p.Stages[i]
	cause := fmt.Sprintf("interrupted by a restart of the daemon before stage %s began; nothing of it was applied", st.Name)
	if st.State == state.StageApplying || st.State == state.StageChecking {
		if err := r.rollbackStage(ctx, p, i); err != nil {
			return err
		}
		cause = fmt.Sprintf("interrupted by a restart of the daemon while stage %s was %s; rolled back", st.Name, st.State)
	}
	st.State, st.Error, st.Ended = state.StageFailed, cause, time.Now().UTC()
	p.State, p.Error = state.PromotionFailed, cause
	r.put(p)
	r.auditPromotion(ctx, "promote-interrupted", *p, i, errors.New(cause))
	r.h.Log().Warn("promotion interrupted", "promotion", p.ID, "stage", st.Name, "ACTION", "reconcile", "result", cause)
	return nil
}

// rollbackStage puts stage i of p back to its rollback point, if that
// point was taken (if not, nothing was written to the stage).
func (r *Promotions) rollbackStage(ctx context.Context, p *Promotion, i int) error {
	if p.Stages[i].RollbackPoint == "" {
		return nil
	}
	return r.plan[i].Revert(ctx, p, i)
}

// keptVolumes names the volumes of finished promotions that are still
// needed: for each project and replica stage, the promoted snapshot of the
// newest promotion that passed the stage (the replica holds it: the parent
// of the next stream); for each live sandbox, the source of its newest
// promotion that passed the project (the next promotion of that sandbox
// tells its own earlier change in the project from another's by it).
func keptVolumes(ps []Promotion, live map[string]bool) map[string]bool {
	newest := map[string]string{} // project/stage or sandbox -> promotion id
	for _, p := range ps {        // oldest first
		for i, st := range p.Stages {
			if st.State != state.StagePassed {
				continue
			}
			if i == 0 && live[p.Sandbox] {
				newest["src/"+p.Sandbox] = volname.PromotionSource(p.ID)
			}
			if i > 0 {
				newest[fmt.Sprintf("out/%s/%d", p.Project, i)] = volname.PromotionOut(p.ID)
			}
		}
	}
	keep := map[string]bool{}
	for _, name := range newest {
		keep[name] = true
	}
	return keep
}

// prune deletes the volumes of finished promotions (and of promotions
// no record names) that keptVolumes does not keep, and says which.
func (r *Promotions) prune(ctx context.Context) ([]string, error) {
	ps, err := r.h.Store().Promotions()
	if err != nil {
		return nil, err
	}
	recs, err := r.h.Store().List()
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, rec := range recs {
		live[rec.ID] = true
	}
	vols, err := r.h.Backend().List(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]Promotion{}
	for _, p := range ps {
		byID[p.ID] = p
	}
	keep := keptVolumes(ps, live)
	var deleted []string
	var errs []error
	for _, v := range vols {
		pid, ok := volname.PromotionOf(v.Name)
		if !ok || !v.Ours || keep[v.Name] {
			continue
		}
		if p, known := byID[pid]; known && !p.State.Finished() {
			continue
		}
		if err := r.h.Backend().Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
			errs = append(errs, fmt.Errorf("removing promotion volume %s: %w", v.Name, err))
			continue
		}
		deleted = append(deleted, v.Name)
	}
	return deleted, errors.Join(errs...)
}

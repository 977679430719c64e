package supervisor

// Replica stages: a path or ssh target kept as a btrfs replica of the
// promoted project (replica.Replica), sent, switched in, and reverted.

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
	"github.com/sandboxd/sandboxd/promote/replica"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// ReplicaChecksProblem says why stage st may not have checks (nil: it may):
// only a project stage's checks run in a sandbox.
func ReplicaChecksProblem(st Stage) error {
	if st.Target == "project" || len(st.Checks) == 0 {
		return nil
	}
	return fmt.Errorf("the checks of stage %s (target %s) would run outside a sandbox: not supported; put checks on the project stage: %w",
		st.Name, st.Target, ErrChecksOutsideSandbox)
}

func (s *Supervisor) hasReplicas() bool {
	return slices.ContainsFunc(s.stages(), func(st Stage) bool { return st.Target != "project" })
}

// replica is stage i's target as a replica, for project.
func (s *Supervisor) replica(cfg Stage, project string) (*replica.Replica, error) {
	t, err := replica.ParseTarget(s.stageTarget(cfg, project))
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w: %w", cfg.Name, ErrInvalid, err)
	}
	return &replica.Replica{Target: t, SSHOptions: cfg.SSHOptions, Backend: s.cfg.Backend.Info().Backend}, nil
}

// runReplicaStage carries the project as the promotion left it (its
// promoted snapshot) to stage i's replica: an incremental send stream
// from the newest snapshot the replica holds (a full one the first
// time), received there, switched in by rename, checked there, and
// switched back if a check fails.
func (s *Supervisor) runReplicaStage(ctx context.Context, p *Promotion, i int, cfg Stage) error {
	st := &p.Stages[i]
	if err := ReplicaChecksProblem(cfg); err != nil {
		return err
	}
	r, err := s.replica(cfg, p.Project)
	if err != nil {
		return err
	}
	out, err := s.cfg.Backend.Get(ctx, promotedName(p.ID))
	if err != nil {
		return fmt.Errorf("the promoted project's snapshot: %w", err)
	}
	parent, err := s.replicaParent(ctx, r, p, i)
	if err != nil {
		return err
	}
	// The rollback point is the replica's previous tree, named before the
	// switch makes it (Reconcile reverts to it).
	st.RollbackPoint = "prev:" + out.Name
	st.State = state.StageApplying
	s.putPromotion(p)
	crashpoint.Hit(crashpoint.PromoteRollbackPoint)
	err = r.Receive(ctx, out.Name, func(w io.Writer) error { return s.cfg.Backend.Send(ctx, w, parent, out) })
	if err != nil && !errors.Is(err, cowfs.ErrExists) { // received by a run a crash cut short
		return fmt.Errorf("sending to %s: %w", r.Target, err)
	}
	// A switch cut short leaves the target missing until it is run
	// again: once begun, it finishes (it is two renames).
	sctx, scancel := finishing(ctx)
	prev, err := r.Switch(sctx, out.Name)
	scancel()
	if err != nil {
		return fmt.Errorf("switching %s: %w", r.Target, err)
	}
	crashpoint.Hit(crashpoint.PromoteApplied)
	st.State = state.StageChecking
	s.putPromotion(p)
	timeout := cfg.CheckTimeout
	if timeout == 0 {
		timeout = defaultCheckTimeout
	}
	for _, check := range cfg.Checks {
		res := state.CheckResult{Command: check, How: "exited"}
		buf := tailBuffer{max: checkOutput}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		res.Status, err = r.Check(cctx, check, &buf)
		res.Duration, res.Output = time.Since(start), buf.String()
		timedOut := cctx.Err() != nil && ctx.Err() == nil
		cancel()
		if ctx.Err() != nil && err == nil { // cut short by the daemon's stop
			err = context.Cause(ctx)
		}
		if timedOut {
			res.How, err = string(nsinit.TimedOut), nil
		}
		if err != nil {
			res.How = "lost"
			res.Output += err.Error()
		}
		st.Checks = append(st.Checks, res)
		if res.How != nsinit.Exited || res.Status != 0 {
			crashpoint.Hit(crashpoint.PromoteRollingBack)
			rctx, rcancel := finishing(ctx)
			defer rcancel()
			if rerr := r.Revert(rctx, prev); rerr != nil {
				return fmt.Errorf("check %q failed; and switching %s back failed: %w", check, r.Target, rerr)
			}
			_ = r.Forget(rctx, out.Name)
			return failedCheck(st.Checks)
		}
	}
	crashpoint.Hit(crashpoint.PromoteChecked)
	st.State, st.Ended = state.StagePassed, time.Now().UTC()
	s.putPromotion(p)
	crashpoint.Hit(crashpoint.PromotePassed)
	// The replica keeps what it now holds, as the next stream's parent.
	forget := []string{prev}
	if parent != nil {
		forget = append(forget, parent.Name)
	}
	if err := r.Forget(ctx, forget...); err != nil {
		s.log.Warn("forgetting a replica's previous trees", "promotion", p.ID, "stage", st.Name, "error", err)
	}
	return nil
}

// replicaParent is the newest promoted snapshot that stage i's replica
// holds and this host still has: the parent of an incremental stream
// (nil: send it whole).
func (s *Supervisor) replicaParent(ctx context.Context, r *replica.Replica, p *Promotion, i int) (*cowfs.Volume, error) {
	ps, err := s.cfg.Store.Promotions()
	if err != nil {
		return nil, err
	}
	for _, old := range slices.Backward(ps) {
		if old.ID == p.ID || old.Project != p.Project || i >= len(old.Stages) || old.Stages[i].State != state.StagePassed {
			continue
		}
		v, err := s.cfg.Backend.Get(ctx, promotedName(old.ID))
		if err != nil {
			continue
		}
		if has, err := r.Has(ctx, v.Name); err != nil {
			return nil, fmt.Errorf("asking %s what it holds: %w", r.Target, err)
		} else if has {
			return &v, nil
		}
	}
	return nil, nil
}

// revertReplica puts stage i's replica back to its tree from before the
// promotion, after a crash: a switch a crash cut short is finished first.
func (s *Supervisor) revertReplica(ctx context.Context, p *Promotion, i int) error {
	r, err := s.replica(s.stages()[i], p.Project)
	if err != nil {
		return err
	}
	prev := p.Stages[i].RollbackPoint
	name := strings.TrimPrefix(prev, "prev:")
	err = r.Revert(ctx, prev)
	if errors.Is(err, replica.ErrInterrupted) {
		if _, serr := r.Switch(ctx, name); serr != nil {
			return fmt.Errorf("finishing an interrupted switch of %s: %w", r.Target, serr)
		}
		err = r.Revert(ctx, prev)
	}
	if err != nil && !errors.Is(err, cowfs.ErrNotFound) { // not found: the switch never happened
		return fmt.Errorf("reverting %s: %w", r.Target, err)
	}
	if err := r.Forget(ctx, name); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
		s.log.Warn("forgetting an interrupted promotion's snapshot on a replica", "promotion", p.ID, "error", err)
	}
	return nil
}

// replicaStepTimeout bounds a replica step that runs to its end even as
// the daemon stops (a switch, a revert: two renames, over ssh), so that
// the stop stays within systemd's stop timeout; one cut short by it is
// finished by the next start's reconcile.
const replicaStepTimeout = 30 * time.Second

// finishing is ctx without its cancel (the daemon's stop) but with
// replicaStepTimeout.
func finishing(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), replicaStepTimeout)
}

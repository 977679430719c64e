package promotion

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
	"github.com/sandboxd/sandboxd/internal/tailbuf"
	"github.com/sandboxd/sandboxd/promote/replica"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// replicaStage is a stage whose target is a replica of the promoted
// project over ssh; pathStage, one in a directory of this host. Both
// carry the project as the promotion left it (its promoted snapshot):
// an incremental send stream from the newest snapshot the replica holds
// (a full one the first time), received there, switched in by rename,
// checked there, and switched back if a check fails.
type replicaStage struct {
	r    *Promotions
	cfg  StageConfig
	kind Kind
}

// pathStage is a replica stage on a path of this host (the same
// transport, its target a local directory).
type pathStage struct{ replicaStage }

func (s *replicaStage) Config() StageConfig { return s.cfg }
func (s *replicaStage) Kind() Kind          { return s.kind }

// replica is the stage's target as a replica, for project.
func (s *replicaStage) replica(project string) (*replica.Replica, error) {
	t, err := replica.ParseTarget(stageTarget(s.cfg, project))
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w: %w", s.cfg.Name, supervisor.ErrInvalid, err)
	}
	return &replica.Replica{Target: t, SSHOptions: s.cfg.SSHOptions, Backend: s.r.h.Backend().Info().Backend}, nil
}

// Apply sends the promoted snapshot to the replica and switches it in.
func (s *replicaStage) Apply(ctx context.Context, run *stageRun) error {
	r, p, st := s.r, run.p, run.st()
	if err := ReplicaChecksProblem(s.cfg); err != nil {
		return err
	}
	rep, err := s.replica(p.Project)
	if err != nil {
		return err
	}
	out, err := r.h.Backend().Get(ctx, volname.PromotionOut(p.ID))
	if err != nil {
		return fmt.Errorf("the promoted project's snapshot: %w", err)
	}
	parent, err := s.parent(ctx, rep, p, run.i)
	if err != nil {
		return err
	}
	run.replica, run.out, run.parent = rep, out, parent
	// The rollback point is the replica's previous tree, named before the
	// switch makes it (Reconcile reverts to it).
	st.RollbackPoint = "prev:" + out.Name
	st.State = state.StageApplying
	r.put(p)
	crashpoint.Hit(crashpoint.PromoteRollbackPoint)
	err = rep.Receive(ctx, out.Name, func(w io.Writer) error { return r.h.Backend().Send(ctx, w, parent, out) })
	if err != nil && !errors.Is(err, cowfs.ErrExists) { // received by a run a crash cut short
		return fmt.Errorf("sending to %s: %w", rep.Target, err)
	}
	// A switch cut short leaves the target missing until it is run
	// again: once begun, it finishes (it is two renames).
	sctx, scancel := finishing(ctx)
	prev, err := rep.Switch(sctx, out.Name)
	scancel()
	if err != nil {
		return fmt.Errorf("switching %s: %w", rep.Target, err)
	}
	run.prev = prev
	run.onFail(func(ctx context.Context, cause error) error {
		crashpoint.Hit(crashpoint.PromoteRollingBack)
		rctx, rcancel := finishing(ctx)
		defer rcancel()
		if rerr := rep.Revert(rctx, prev); rerr != nil {
			return fmt.Errorf("check %q failed; and switching %s back failed: %w", st.Checks[len(st.Checks)-1].Command, rep.Target, rerr)
		}
		_ = rep.Forget(rctx, out.Name)
		return cause
	})
	crashpoint.Hit(crashpoint.PromoteApplied)
	return nil
}

// Check runs the stage's checks on the replica, the first failure
// deciding.
func (s *replicaStage) Check(ctx context.Context, run *stageRun) error {
	st := run.st()
	st.State = state.StageChecking
	s.r.put(run.p)
	timeout := checkTimeout(s.cfg)
	for _, check := range s.cfg.Checks {
		res := state.CheckResult{Command: check, How: "exited"}
		buf := tailbuf.Buffer{Max: checkOutput}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		var err error
		res.Status, err = run.replica.Check(cctx, check, &buf)
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
			return failedCheck(st.Checks)
		}
	}
	return nil
}

// Keep: the replica keeps what it received; nothing else is needed.
func (s *replicaStage) Keep(context.Context, *stageRun) error { return nil }

// Done lets the replica forget its trees from before: it keeps what it
// now holds, as the next stream's parent.
func (s *replicaStage) Done(ctx context.Context, run *stageRun) {
	forget := []string{run.prev}
	if run.parent != nil {
		forget = append(forget, run.parent.Name)
	}
	if err := run.replica.Forget(ctx, forget...); err != nil {
		s.r.h.Log().Warn("forgetting a replica's previous trees", "promotion", run.p.ID, "stage", run.st().Name, "error", err)
	}
}

// parent is the newest promoted snapshot that stage i's replica holds
// and this host still has: the parent of an incremental stream (nil:
// send it whole).
func (s *replicaStage) parent(ctx context.Context, rep *replica.Replica, p *Promotion, i int) (*cowfs.Volume, error) {
	ps, err := s.r.h.Store().Promotions()
	if err != nil {
		return nil, err
	}
	for _, old := range slices.Backward(ps) {
		if old.ID == p.ID || old.Project != p.Project || i >= len(old.Stages) || old.Stages[i].State != state.StagePassed {
			continue
		}
		v, err := s.r.h.Backend().Get(ctx, volname.PromotionOut(old.ID))
		if err != nil {
			continue
		}
		if has, err := rep.Has(ctx, v.Name); err != nil {
			return nil, fmt.Errorf("asking %s what it holds: %w", rep.Target, err)
		} else if has {
			return &v, nil
		}
	}
	return nil, nil
}

// Revert puts stage i's replica back to its tree from before the
// promotion, after a crash: a switch a crash cut short is finished first.
func (s *replicaStage) Revert(ctx context.Context, p *Promotion, i int) error {
	rep, err := s.replica(p.Project)
	if err != nil {
		return err
	}
	prev := p.Stages[i].RollbackPoint
	name := strings.TrimPrefix(prev, "prev:")
	err = rep.Revert(ctx, prev)
	if errors.Is(err, replica.ErrInterrupted) {
		if _, serr := rep.Switch(ctx, name); serr != nil {
			return fmt.Errorf("finishing an interrupted switch of %s: %w", rep.Target, serr)
		}
		err = rep.Revert(ctx, prev)
	}
	if err != nil && !errors.Is(err, cowfs.ErrNotFound) { // not found: the switch never happened
		return fmt.Errorf("reverting %s: %w", rep.Target, err)
	}
	if err := rep.Forget(ctx, name); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
		s.r.h.Log().Warn("forgetting an interrupted promotion's snapshot on a replica", "promotion", p.ID, "error", err)
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

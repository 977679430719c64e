package supervisor

// An admin's decision on a stage that waits for approval.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Approve lets a promotion that waits for an admin go on to its stage.
// The caller must be an admin (the API checks).
func (s *Supervisor) Approve(ctx context.Context, pid string, uid uint32) (p Promotion, err error) {
	return s.decide(ctx, pid, uid, true, "")
}

// Reject ends a promotion that waits for an admin; the stages it passed
// keep its change.
func (s *Supervisor) Reject(ctx context.Context, pid string, uid uint32, reason string) (p Promotion, err error) {
	return s.decide(ctx, pid, uid, false, reason)
}

func (s *Supervisor) decide(ctx context.Context, pid string, uid uint32, approve bool, reason string) (p Promotion, err error) {
	action := "promote-approve"
	if !approve {
		action = "promote-reject"
	}
	i := -1
	defer func() { s.auditPromotion(ctx, action, p, i, err) }()
	p, err = s.cfg.Store.Promotion(pid)
	if err != nil {
		return p, err
	}
	i = slices.IndexFunc(p.Stages, func(st state.StageRun) bool { return st.State == state.StageWaiting })
	if p.State != state.PromotionWaiting || i < 0 {
		return p, fmt.Errorf("deciding on promotion %s: it is %s, not waiting for an approval: %w", pid, p.State, ErrWrongState)
	}
	p.Stages[i].DecidedBy, p.Stages[i].Decided = &uid, time.Now().UTC()
	if !approve {
		p.Stages[i].State, p.Stages[i].Reason = state.StageRejected, reason
		p.State, p.Error = state.PromotionRejected, fmt.Sprintf("stage %s rejected by uid %d: %s", p.Stages[i].Name, uid, reason)
		s.putPromotion(&p)
		_, _ = s.prunePromotions(ctx)
		return p, nil
	}
	if other, ok := s.gate.claim(p.Project, pid); !ok {
		return p, fmt.Errorf("approving promotion %s: %s; approve again after it: %w", pid, s.busyWith(actorOr(ctx), other, p.Project), ErrBusy)
	}
	// The change list again, from the recorded source and base.
	changes, err := s.promotionChanges(ctx, p)
	if err != nil {
		s.gate.release(p.Project)
		return p, fmt.Errorf("approving promotion %s: %w", pid, err)
	}
	p.Stages[i].Approved = true
	p.Stages[i].State, p.State = state.StagePending, state.PromotionRunning
	s.putPromotion(&p)
	if !s.promos.start(func(ctx context.Context) { s.runPromotion(ctx, pid, changes) }) {
		// Nothing of the stage was applied: the promotion waits again,
		// so that the approval can be given once the daemon is back.
		p.Stages[i].Approved, p.Stages[i].DecidedBy, p.Stages[i].Decided = false, nil, time.Time{}
		p.Stages[i].State, p.State = state.StageWaiting, state.PromotionWaiting
		s.putPromotion(&p)
		s.gate.release(p.Project)
		return p, fmt.Errorf("approving promotion %s: %w; it still waits: approve it again once the daemon is back", pid, errDaemonStopping)
	}
	return p, nil
}

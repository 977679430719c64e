package promotion

// An admin's decision on a stage that waits for approval.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/internal/revert"
	"github.com/sandboxd/sandboxd/promote/unidiff"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// ErrChangeDiffers: an approval named a digest that is not the
// promotion's: what the approver saw is not what would be applied.
var ErrChangeDiffers = errors.New("the change differs from what you saw")

// Approve lets a promotion that waits for an admin go on to its stage.
// The caller must be an admin (the API checks).
func (r *Promotions) Approve(ctx context.Context, pid string, uid uint32) (p Promotion, err error) {
	return r.decide(ctx, pid, uid, true, "", "")
}

// ApproveDigest is Approve of the change whose digest the approver saw
// (Diff's, the record's): refused with ErrChangeDiffers when the
// promotion's is another.
func (r *Promotions) ApproveDigest(ctx context.Context, pid string, uid uint32, digest string) (p Promotion, err error) {
	if digest == "" {
		return p, fmt.Errorf("approving promotion %s: no digest given (the digest of the change you saw: sandboxctl promotions --diff shows it): %w", pid, supervisor.ErrInvalid)
	}
	return r.decide(ctx, pid, uid, true, "", digest)
}

// Reject ends a promotion that waits for an admin; the stages it passed
// keep its change.
func (r *Promotions) Reject(ctx context.Context, pid string, uid uint32, reason string) (p Promotion, err error) {
	return r.decide(ctx, pid, uid, false, reason, "")
}

// Diff writes promotion pid's change as a unified diff (unidiff.Write,
// for the reader of ctx) and returns its record: its Digest is that of
// the change shown, verified against the source it was read from.
func (r *Promotions) Diff(ctx context.Context, pid string, w io.Writer, o unidiff.Options) (Promotion, error) {
	p, err := r.h.Store().Promotion(pid)
	if err != nil {
		return p, err
	}
	if p.State.Finished() {
		return p, fmt.Errorf("diffing promotion %s: it is %s, and its source is gone: %w", pid, p.State, supervisor.ErrWrongState)
	}
	base, source, changes, err := r.changeSet(ctx, p)
	if err != nil {
		return p, fmt.Errorf("diffing promotion %s: %w", pid, err)
	}
	return p, unidiff.Write(ctx, w, changes, base.Path, source.Path, o)
}

func (r *Promotions) decide(ctx context.Context, pid string, uid uint32, approve bool, reason, digest string) (p Promotion, err error) {
	action := "promote-approve"
	if !approve {
		action = "promote-reject"
	}
	i := -1
	defer func() { r.auditPromotion(ctx, action, p, i, err) }()
	p, err = r.h.Store().Promotion(pid)
	if err != nil {
		return p, err
	}
	i = slices.IndexFunc(p.Stages, func(st state.StageRun) bool { return st.State == state.StageWaiting })
	if p.State != state.PromotionWaiting || i < 0 {
		return p, fmt.Errorf("deciding on promotion %s: it is %s, not waiting for an approval: %w", pid, p.State, supervisor.ErrWrongState)
	}
	if digest != "" && digest != p.Digest {
		return p, fmt.Errorf("approving promotion %s: %w (digest %s; it is %s): look again with sandboxctl promotions --diff %s", pid, ErrChangeDiffers, digest, p.Digest, pid)
	}
	p.Stages[i].DecidedBy, p.Stages[i].Decided = &uid, time.Now().UTC()
	if !approve {
		p.Stages[i].State, p.Stages[i].Reason = state.StageRejected, reason
		p.State, p.Error = state.PromotionRejected, fmt.Sprintf("stage %s rejected by uid %d: %s", p.Stages[i].Name, uid, reason)
		r.put(&p)
		_, _ = r.prune(ctx)
		return p, nil
	}
	if other, ok := r.h.ClaimProject(p.Project, pid); !ok {
		return p, fmt.Errorf("approving promotion %s: %s; approve again after it: %w", pid, r.busyWith(actorOr(ctx), other, p.Project), supervisor.ErrBusy)
	}
	// The project is the run's once it is handed on; until then, undo
	// releases it.
	undo := revert.New()
	defer func() { _ = undo.Fail(ctx) }()
	undo.AddFunc(func() { r.h.ReleaseProject(p.Project) })
	// The change list again, from the recorded source and base.
	changes, err := r.changes(ctx, p)
	if err != nil {
		return p, fmt.Errorf("approving promotion %s: %w", pid, err)
	}
	p.Stages[i].Approved = true
	p.Stages[i].State, p.State = state.StagePending, state.PromotionRunning
	r.put(&p)
	if !r.runs.start(func(ctx context.Context) { r.run(ctx, pid, changes) }) {
		// Nothing of the stage was applied: the promotion waits again,
		// so that the approval can be given once the daemon is back.
		p.Stages[i].Approved, p.Stages[i].DecidedBy, p.Stages[i].Decided = false, nil, time.Time{}
		p.Stages[i].State, p.State = state.StageWaiting, state.PromotionWaiting
		r.put(&p)
		return p, fmt.Errorf("approving promotion %s: %w; it still waits: approve it again once the daemon is back", pid, errDaemonStopping)
	}
	undo.Success() // the run releases the project
	return p, nil
}

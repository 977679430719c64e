package promotion

// A promotion's record (state.Promotion): reading it, writing it, its
// change set's digest and its entries in the audit log.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Promotion is the record of a promotion, as callers see it.
type Promotion = state.Promotion

// put records p, logging a failure (the daemon's start rolls back a
// stage whose record did not move on).
func (r *Promotions) put(p *Promotion) {
	p.Updated = time.Now().UTC()
	if err := r.h.Store().PutPromotion(*p); err != nil {
		r.h.Log().Error("recording a promotion", "promotion", p.ID, "error", err)
	}
}

// List lists every recorded promotion, oldest first.
func (r *Promotions) List(ctx context.Context) ([]Promotion, error) {
	return r.h.Store().Promotions()
}

// Get returns promotion pid's record.
func (r *Promotions) Get(ctx context.Context, pid string) (Promotion, error) {
	return r.h.Store().Promotion(pid)
}

// changes lists p's change set again, from its recorded base and
// source, and refuses it unless its digest is the one recorded.
func (r *Promotions) changes(ctx context.Context, p Promotion) ([]cowfs.Change, error) {
	_, _, changes, err := r.changeSet(ctx, p)
	return changes, err
}

// changeSet is changes, with the base and the source it compares.
func (r *Promotions) changeSet(ctx context.Context, p Promotion) (base, source cowfs.Volume, changes []cowfs.Change, err error) {
	if base, err = r.h.Backend().Get(ctx, p.Base); err != nil {
		return base, source, nil, fmt.Errorf("the sandbox's base: %w", err)
	}
	if source, err = r.h.Backend().Get(ctx, p.Source); err != nil {
		return base, source, nil, fmt.Errorf("the promotion's source: %w", err)
	}
	if changes, err = r.h.SandboxChanges(ctx, base, source); err != nil {
		return base, source, nil, err
	}
	if changes, _, err = r.h.FilterChanges(ctx, p.Project, base, source, changes); err != nil {
		return base, source, nil, err
	}
	d, err := digest(ctx, changes, source.Path)
	if err != nil {
		return base, source, nil, err
	}
	// A record from before digests covered content has the digest of
	// the list alone.
	if d != p.Digest && listDigest(changes) != p.Digest {
		return base, source, nil, fmt.Errorf("%w: the source's change hashes to %s, not to the recorded %s: look again with sandboxctl promotions --diff %s", ErrChangeDiffers, d, p.Digest, p.ID)
	}
	return base, source, changes, nil
}

// auditPromotion writes a promotion's step to the audit log: stage i's
// checks and approval (i < 0: the promotion as a whole).
func (r *Promotions) auditPromotion(ctx context.Context, action string, p Promotion, i int, err error) {
	e := audit.Entry{Action: action, Promotion: &audit.Promotion{
		ID: p.ID, State: string(p.State), Changes: p.Changes, Digest: p.Digest, Conflicts: p.Conflicts, Forced: p.Force,
	}}
	if i >= 0 && i < len(p.Stages) {
		st := p.Stages[i]
		e.Promotion.Stage, e.Promotion.Target, e.Promotion.StageState = st.Name, st.Target, string(st.State)
		e.Promotion.Approved, e.Promotion.DecidedBy = st.Approved, st.DecidedBy
		for _, c := range st.Checks {
			e.Promotion.Checks = append(e.Promotion.Checks, audit.Check{Command: c.Command, How: c.How, Status: c.Status, Duration: c.Duration.String()})
		}
	}
	r.h.AuditEntry(ctx, e, state.Record{ID: p.Sandbox, Project: p.Project}, err)
}

// auditRun is auditPromotion for a step of the run in the background:
// the daemon's work (its context's actor), done for the promotion's
// requester, whom the line names as its caller.
func (r *Promotions) auditRun(ctx context.Context, action string, p Promotion, i int, err error) {
	r.auditPromotion(supervisor.WithCaller(ctx, p.Owner), action, p, i, err)
}

// earlierSource is the source of sandbox id's newest promotion that
// passed the project stage, if it is still there.
func (r *Promotions) earlierSource(ctx context.Context, id string) *cowfs.Volume {
	ps, err := r.h.Store().Promotions()
	if err != nil {
		return nil
	}
	for _, p := range slices.Backward(ps) {
		if p.Sandbox == id && len(p.Stages) > 0 && p.Stages[0].State == state.StagePassed {
			if v, err := r.h.Backend().Get(ctx, p.Source); err == nil {
				return &v
			}
			return nil
		}
	}
	return nil
}

// busyWith says that promotion other of project is under way, naming it
// only to its owner, root and admins: another user's promotion id is
// theirs to show.
func (r *Promotions) busyWith(a supervisor.Actor, other, project string) string {
	if !a.Privileged() {
		if p, err := r.h.Store().Promotion(other); err != nil || p.Owner != a.UID {
			return fmt.Sprintf("another promotion of project %s is under way", project)
		}
	}
	return fmt.Sprintf("promotion %s of project %s is under way", other, project)
}

// actorOr is the actor of ctx, or the zero Actor (who may nothing).
func actorOr(ctx context.Context) supervisor.Actor {
	a, _ := supervisor.ActorOf(ctx)
	return a
}

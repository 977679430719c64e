package promotion

// Promote: the change set, its conflicts with the project and the first
// rollback point, recorded, then handed to the driver (driver.go).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/revert"
	"github.com/sandboxd/sandboxd/promote"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

var (
	// ErrNoPromotion: no promotion with that id.
	ErrNoPromotion = state.ErrNoPromotion
	// ErrNothingToPromote: the sandbox changed nothing since its base.
	ErrNothingToPromote = errors.New("nothing to promote")
	// ErrPrivileged: the change set would put set-id files, device nodes
	// or file capabilities in the project, and no admin allowed them. The
	// error (a *promote.PrivilegedError) names each path and why.
	ErrPrivileged = promote.ErrPrivileged
	// ErrChecksOutsideSandbox: a stage on a path or over ssh has checks,
	// which would run outside any sandbox (as root here, or as the ssh
	// user there) executing files the sandbox wrote.
	ErrChecksOutsideSandbox = errors.New("checks would run outside a sandbox")
)

// PromoteOptions are what a caller asks of a promotion.
type PromoteOptions struct {
	// Force applies the change set over conflicts (they are audited).
	Force bool
	// To is the last stage to go to ("": all of them).
	To string
	// Owner is the caller's uid; the checks run as that user.
	Owner uint32
	// AllowPrivileged lets set-id files, device nodes and files with
	// capabilities through (only an admin may ask: the API checks). File
	// capabilities are dropped all the same: Apply copies no xattrs.
	AllowPrivileged bool
}

// Promote starts promoting what sandbox id changed through the stages. It
// returns once the change set is known and found free of conflicts with
// the project (or forced), with the promotion's record; the stages then
// run in the background, and the record (Promotion) says where they are.
// A conflict is refused here, with ErrConflict naming every path.
func (r *Promotions) Promote(ctx context.Context, id string, o PromoteOptions) (p Promotion, err error) {
	unlock := r.h.Lock(id)
	defer unlock()
	rec, err := r.h.Store().Get(id)
	if err != nil {
		return p, err
	}
	what := "promoting sandbox " + id
	defer func() { r.auditPromotion(ctx, "promote", p, -1, err) }()
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen, state.Stopped}, rec.State) {
		return p, fmt.Errorf("%s: it is %s: %w", what, rec.State, supervisor.ErrWrongState)
	}
	stages := r.plan
	last := len(stages) - 1
	if o.To != "" {
		last = stages.index(o.To)
		if last < 0 {
			return p, fmt.Errorf("%s: no stage %q (stages: %s): %w", what, o.To, stages.names(), supervisor.ErrInvalid)
		}
	}
	for _, st := range stages[:last+1] {
		if err := ReplicaChecksProblem(st.Config()); err != nil {
			return p, fmt.Errorf("%s: %w: %w", what, err, supervisor.ErrInvalid)
		}
	}
	location, err := r.h.ProjectLocation(ctx, rec)
	if err != nil {
		return p, fmt.Errorf("%s: %w", what, err)
	}
	project, err := r.h.Backend().Project(ctx, location)
	if err != nil {
		return p, fmt.Errorf("%s: %w", what, err)
	}
	pid := newID()
	if other, ok := r.h.ClaimProject(rec.Project, pid); !ok {
		return p, fmt.Errorf("%s: %s; wait for it (sandboxctl promotions): %w", what, r.busyWith(actorOr(ctx), other, rec.Project), supervisor.ErrBusy)
	}
	// The project is the run's once it is handed on; until then, undo
	// releases it.
	undo := revert.New()
	defer func() { _ = undo.Fail(ctx) }()
	undo.AddFunc(func() { r.h.ReleaseProject(rec.Project) })
	now := time.Now().UTC()
	p = Promotion{
		ID: pid, Sandbox: id, SandboxName: rec.Name, Project: rec.Project, Owner: o.Owner,
		State: state.PromotionRunning, Source: volname.PromotionSource(pid), Base: rec.Base, Force: o.Force,
		Created: now, Updated: now,
	}
	for i, stage := range stages {
		st := stage.Config()
		run := state.StageRun{Name: st.Name, Target: stageTarget(st, rec.Project), State: state.StagePending, Approval: "auto"}
		if st.Admin {
			run.Approval = "admin"
		}
		if i > last {
			run.State = state.StageSkipped
		}
		p.Stages = append(p.Stages, run)
	}
	// The record first (I5: every volume made after is named by it).
	if err := r.h.Store().PutPromotion(p); err != nil {
		return p, fmt.Errorf("%s: %w", what, err)
	}
	crashpoint.Hit(crashpoint.PromoteRecorded)
	fail := func(err error) (Promotion, error) {
		p.State, p.Error, p.Updated = state.PromotionFailed, err.Error(), time.Now().UTC()
		_ = r.h.Store().PutPromotion(p)
		_, _ = r.prune(context.WithoutCancel(ctx))
		return p, err
	}

	// The source: what the sandbox holds now, read-only (I2).
	vol, err := r.h.Backend().Get(ctx, rec.Volume)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	source, err := r.h.FrozenSnapshot(ctx, rec, vol, p.Source)
	if err != nil {
		return fail(fmt.Errorf("%s: its source snapshot: %w", what, err))
	}
	crashpoint.Hit(crashpoint.PromoteSource)
	base, err := r.h.Backend().Get(ctx, rec.Base)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	changes, err := r.h.SandboxChanges(ctx, base, source)
	if err != nil {
		return fail(fmt.Errorf("%s: listing its changes: %w", what, err))
	}
	// What the project's ignore rules leave out never leaves the sandbox
	// (ignore.go); the rules are the base's, so a resumption finds the same.
	changes, p.Ignored, err = r.h.FilterChanges(ctx, rec.Project, base, source, changes)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	if len(changes) == 0 {
		// Nothing failed: the record and its source go, and the caller
		// hears that there is nothing to do.
		err := fmt.Errorf("%w: sandbox %s has no changes", ErrNothingToPromote, sandboxLabel(rec))
		if p.Ignored > 0 {
			err = fmt.Errorf("%w but %d paths the project's ignore rules leave out", err, p.Ignored)
		}
		return p, r.forget(context.WithoutCancel(ctx), p, source, err)
	}
	p.Changes = len(changes)
	for _, c := range changes[:min(len(changes), state.MaxChanged)] {
		p.Changed = append(p.Changed, state.ChangedPath{Kind: string(c.Kind), Path: c.Path, NewPath: c.NewPath})
	}
	if p.Digest, err = digest(ctx, changes, source.Path); err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	if err := r.checkPrivileged(ctx, &p, changes, source, base, o.AllowPrivileged); err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}

	// Conflicts, against a snapshot of the project that is the first
	// stage's rollback point too, unless that stage waits for approval
	// (the project may move meanwhile: it is taken again then).
	rp, conflicts, err := r.projectRollbackPoint(ctx, project, base, source, r.earlierSource(ctx, id), changes, volname.PromotionRollback(pid, 0))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	p.Conflicts = conflicts
	if len(conflicts) > 0 && !o.Force {
		return fail(fmt.Errorf("%s: the project changed these paths since the sandbox's base, and so did the sandbox: %s; rebase the sandbox, or force: %w",
			what, strings.Join(conflicts, ", "), supervisor.ErrConflict))
	}
	if stages[0].Config().Admin {
		if err := r.h.Backend().Delete(ctx, rp); err != nil {
			return fail(fmt.Errorf("%s: %w", what, err))
		}
	} else {
		p.Stages[0].RollbackPoint = rp.Name
	}
	p.Updated = time.Now().UTC()
	if err := r.h.Store().PutPromotion(p); err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	r.h.Log().Info("promotion started", "SANDBOX_ID", id, "ACTION", "promote", "promotion", pid,
		"changes", len(changes), "conflicts_forced", len(conflicts), "CALLER_UID", o.Owner)
	if !r.runs.start(func(ctx context.Context) { r.run(ctx, pid, changes) }) {
		return fail(fmt.Errorf("%s: %w", what, errDaemonStopping))
	}
	undo.Success() // the run releases the project
	return p, nil
}

// projectRollbackPoint takes a read-only snapshot of project, named name,
// and lists the paths that project changed since base which changes (of
// source) touch too, and that differ between the two.
//
// A path whose version in the project is the one this same sandbox
// promoted earlier (earlier: that promotion's source) is no conflict
// either: the sandbox's later change supersedes its own.
func (r *Promotions) projectRollbackPoint(ctx context.Context, project, base, source cowfs.Volume, earlier *cowfs.Volume, changes []cowfs.Change, name string) (cowfs.Volume, []string, error) {
	rp, err := r.h.Backend().Snapshot(ctx, project, name, true)
	if err != nil {
		return rp, nil, fmt.Errorf("taking the project's rollback point: %w", err)
	}
	theirs, err := r.h.Backend().Changes(ctx, base, rp)
	if err != nil {
		_ = r.h.Backend().Delete(context.WithoutCancel(ctx), rp)
		return rp, nil, fmt.Errorf("listing the project's changes since the base: %w", err)
	}
	versions := []string{source.Path}
	if earlier != nil {
		versions = append(versions, earlier.Path)
	}
	paths, err := promote.RealConflicts(promote.Conflicts(changes, theirs), rp.Path, base.Path, versions...)
	if err != nil {
		_ = r.h.Backend().Delete(context.WithoutCancel(ctx), rp)
		return rp, nil, err
	}
	return rp, paths, nil
}

// forget deletes promotion p's source, then its record (I5: the record
// names every volume until that is gone), and returns err; failing
// that, the promotion is recorded failed, as any other, and the daemon's
// prune takes the source.
func (r *Promotions) forget(ctx context.Context, p Promotion, source cowfs.Volume, err error) error {
	if derr := r.h.Backend().Delete(ctx, source); derr != nil && !errors.Is(derr, cowfs.ErrNotFound) {
		p.State, p.Error, p.Updated = state.PromotionFailed, err.Error(), time.Now().UTC()
		_ = r.h.Store().PutPromotion(p)
		return err
	}
	if derr := r.h.Store().DeletePromotion(p.ID); derr != nil {
		r.h.Log().Warn("forgetting a promotion with nothing to promote", "promotion", p.ID, "error", derr)
	}
	return err
}

// sandboxLabel names sandbox rec as its owner knows it: its name, or
// its id.
func sandboxLabel(rec state.Record) string {
	if rec.Name != "" {
		return rec.Name
	}
	return rec.ID
}

package supervisor

// Promotion, its core flow: Promote plans a promotion (the change set,
// conflicts, the first rollback point) and records it; runPromotion then
// runs its stages in the background, each applied, checked and, if a
// check fails, undone. The other promotion_*.go files hold its parts.

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
)

var (
	// ErrConflict: the project changed, since the sandbox's base, paths
	// that the sandbox changed too. The error lists them.
	ErrConflict = errors.New("conflicting changes")
	// ErrBusy: another promotion of the same project is under way.
	ErrBusy = errors.New("busy")
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

// Promotion is the record of a promotion, as callers see it.
type Promotion = state.Promotion

// Stage is a configured stage (sandboxd.toml's [[stage]]).
type Stage struct {
	Name string
	// Target is "project", a path on this host, or an ssh:// address;
	// "{project}" is replaced by the project's name.
	Target       string
	Checks       []string
	CheckTimeout time.Duration // 0: defaultCheckTimeout
	// Admin: an admin approves the stage before anything is applied to it.
	Admin      bool
	SSHOptions []string
}

// stages are the configured stages, or the project alone.
func (s *Supervisor) stages() []Stage {
	if len(s.cfg.Stages) == 0 {
		return []Stage{{Name: "project", Target: "project"}}
	}
	return s.cfg.Stages
}

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
func (s *Supervisor) Promote(ctx context.Context, id string, o PromoteOptions) (p Promotion, err error) {
	unlock := s.lock(id)
	defer unlock()
	rec, err := s.cfg.Store.Get(id)
	if err != nil {
		return p, err
	}
	what := "promoting sandbox " + id
	defer func() { s.auditPromotion(ctx, "promote", p, -1, err) }()
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen, state.Stopped}, rec.State) {
		return p, fmt.Errorf("%s: it is %s: %w", what, rec.State, ErrWrongState)
	}
	stages := s.stages()
	last := len(stages) - 1
	if o.To != "" {
		last = slices.IndexFunc(stages, func(st Stage) bool { return st.Name == o.To })
		if last < 0 {
			return p, fmt.Errorf("%s: no stage %q (stages: %s): %w", what, o.To, stageNames(stages), ErrInvalid)
		}
	}
	for _, st := range stages[:last+1] {
		if err := ReplicaChecksProblem(st); err != nil {
			return p, fmt.Errorf("%s: %w: %w", what, err, ErrInvalid)
		}
	}
	location, err := s.projectLocation(ctx, rec)
	if err != nil {
		return p, fmt.Errorf("%s: %w", what, err)
	}
	project, err := s.cfg.Backend.Project(ctx, location)
	if err != nil {
		return p, fmt.Errorf("%s: %w", what, err)
	}
	pid := newID()
	if other, ok := s.gate.claim(rec.Project, pid); !ok {
		return p, fmt.Errorf("%s: %s; wait for it (sandboxctl promotions): %w", what, s.busyWith(actorOr(ctx), other, rec.Project), ErrBusy)
	}
	handed := false
	defer func() {
		if !handed {
			s.gate.release(rec.Project)
		}
	}()
	now := time.Now().UTC()
	p = Promotion{
		ID: pid, Sandbox: id, SandboxName: rec.Name, Project: rec.Project, Owner: o.Owner,
		State: state.PromotionRunning, Source: sourceName(pid), Base: rec.Base, Force: o.Force,
		Created: now, Updated: now,
	}
	for i, st := range stages {
		run := state.StageRun{Name: st.Name, Target: s.stageTarget(st, rec.Project), State: state.StagePending, Approval: "auto"}
		if st.Admin {
			run.Approval = "admin"
		}
		if i > last {
			run.State = state.StageSkipped
		}
		p.Stages = append(p.Stages, run)
	}
	// The record first (I5: every volume made after is named by it).
	if err := s.cfg.Store.PutPromotion(p); err != nil {
		return p, fmt.Errorf("%s: %w", what, err)
	}
	crashpoint.Hit(crashpoint.PromoteRecorded)
	fail := func(err error) (Promotion, error) {
		p.State, p.Error, p.Updated = state.PromotionFailed, err.Error(), time.Now().UTC()
		_ = s.cfg.Store.PutPromotion(p)
		_, _ = s.prunePromotions(context.WithoutCancel(ctx))
		return p, err
	}

	// The source: what the sandbox holds now, read-only (I2).
	vol, err := s.cfg.Backend.Get(ctx, rec.Volume)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	source, err := s.frozenSnapshot(ctx, rec, vol, p.Source)
	if err != nil {
		return fail(fmt.Errorf("%s: its source snapshot: %w", what, err))
	}
	crashpoint.Hit(crashpoint.PromoteSource)
	base, err := s.cfg.Backend.Get(ctx, rec.Base)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	changes, err := s.sandboxChanges(ctx, base, source)
	if err != nil {
		return fail(fmt.Errorf("%s: listing its changes: %w", what, err))
	}
	// What the project's ignore rules leave out never leaves the sandbox
	// (ignore.go); the rules are the base's, so a resumption finds the same.
	changes, p.Ignored, err = s.filterChanges(ctx, rec.Project, base, source, changes)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	if len(changes) == 0 {
		if p.Ignored > 0 {
			return fail(fmt.Errorf("%s: it changed nothing since its base but %d paths the project's ignore rules leave out: %w", what, p.Ignored, ErrNothingToPromote))
		}
		return fail(fmt.Errorf("%s: it changed nothing since its base: %w", what, ErrNothingToPromote))
	}
	p.Changes, p.Digest = len(changes), digest(changes)
	if err := s.checkPrivileged(ctx, &p, changes, source, base, o.AllowPrivileged); err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}

	// Conflicts, against a snapshot of the project that is the first
	// stage's rollback point too, unless that stage waits for approval
	// (the project may move meanwhile: it is taken again then).
	rp, conflicts, err := s.projectRollbackPoint(ctx, project, base, source, s.earlierSource(ctx, id), changes, rollbackName(pid, 0))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	p.Conflicts = conflicts
	if len(conflicts) > 0 && !o.Force {
		return fail(fmt.Errorf("%s: the project changed these paths since the sandbox's base, and so did the sandbox: %s; rebase the sandbox, or force: %w",
			what, strings.Join(conflicts, ", "), ErrConflict))
	}
	if stages[0].Admin {
		if err := s.cfg.Backend.Delete(ctx, rp); err != nil {
			return fail(fmt.Errorf("%s: %w", what, err))
		}
	} else {
		p.Stages[0].RollbackPoint = rp.Name
	}
	p.Updated = time.Now().UTC()
	if err := s.cfg.Store.PutPromotion(p); err != nil {
		return fail(fmt.Errorf("%s: %w", what, err))
	}
	s.log.Info("promotion started", "SANDBOX_ID", id, "ACTION", "promote", "promotion", pid,
		"changes", len(changes), "conflicts_forced", len(conflicts), "CALLER_UID", o.Owner)
	if !s.promos.start(func(ctx context.Context) { s.runPromotion(ctx, pid, changes) }) {
		return fail(fmt.Errorf("%s: %w", what, errDaemonStopping))
	}
	handed = true
	return p, nil
}

// busyWith says that promotion other of project is under way, naming it
// only to its owner, root and admins: another user's promotion id is
// theirs to show.
func (s *Supervisor) busyWith(a Actor, other, project string) string {
	if !a.Privileged() {
		if p, err := s.cfg.Store.Promotion(other); err != nil || p.Owner != a.UID {
			return fmt.Sprintf("another promotion of project %s is under way", project)
		}
	}
	return fmt.Sprintf("promotion %s of project %s is under way", other, project)
}

// projectRollbackPoint takes a read-only snapshot of project, named name,
// and lists the paths that project changed since base which changes (of
// source) touch too, and that differ between the two.
//
// A path whose version in the project is the one this same sandbox
// promoted earlier (earlier: that promotion's source) is no conflict
// either: the sandbox's later change supersedes its own.
func (s *Supervisor) projectRollbackPoint(ctx context.Context, project, base, source cowfs.Volume, earlier *cowfs.Volume, changes []cowfs.Change, name string) (cowfs.Volume, []string, error) {
	rp, err := s.cfg.Backend.Snapshot(ctx, project, name, true)
	if err != nil {
		return rp, nil, fmt.Errorf("taking the project's rollback point: %w", err)
	}
	theirs, err := s.cfg.Backend.Changes(ctx, base, rp)
	if err != nil {
		_ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), rp)
		return rp, nil, fmt.Errorf("listing the project's changes since the base: %w", err)
	}
	versions := []string{source.Path}
	if earlier != nil {
		versions = append(versions, earlier.Path)
	}
	paths, err := realConflicts(promote.Conflicts(changes, theirs), rp.Path, base.Path, versions...)
	if err != nil {
		_ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), rp)
		return rp, nil, err
	}
	return rp, paths, nil
}

// realConflicts are the paths of conflicts whose version in target (a
// tree) is neither one of versions' (the sandbox's own: both sides made
// the same change) nor base's (the target's change was undone since: a
// failed promotion put the file back).
func realConflicts(conflicts []promote.Conflict, target, base string, versions ...string) ([]string, error) {
	var paths []string
	all := append(versions[:len(versions):len(versions)], base)
	for _, c := range conflicts {
		same := false
		for _, v := range all {
			var err error
			if same, err = promote.Same(target, v, c.Path); err != nil {
				return nil, fmt.Errorf("comparing %s in the project and the sandbox: %w", c.Path, err)
			}
			if same {
				break
			}
		}
		if !same {
			paths = append(paths, c.Path)
		}
	}
	return paths, nil
}

// runPromotion runs the promotion's stages from the first that is not
// passed, until one fails, waits for approval, or all are passed. ctx
// ends when the daemon stops (promotionRuns): the stage under way then
// fails and is undone, and the record and the audit log say why.
func (s *Supervisor) runPromotion(ctx context.Context, pid string, changes []cowfs.Change) {
	p, err := s.cfg.Store.Promotion(pid)
	if err != nil {
		s.log.Error("running a promotion", "promotion", pid, "error", err)
		return
	}
	defer s.gate.release(p.Project)
	for i := range p.Stages {
		st := &p.Stages[i]
		if st.State == state.StagePassed {
			continue
		}
		if st.State == state.StageSkipped {
			break
		}
		if st.Approval == "admin" && !st.Approved {
			st.State = state.StageWaiting
			p.State = state.PromotionWaiting
			s.putPromotion(&p)
			s.auditPromotion(ctx, "promote-waiting", p, i, nil)
			s.log.Info("promotion waits for an admin's approval", "promotion", pid, "stage", st.Name)
			return
		}
		if err := s.runStage(ctx, &p, i, changes); err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
				err = fmt.Errorf("%w (%w)", err, cause)
			}
			ctx := context.WithoutCancel(ctx) // to record the failure
			st.State, st.Error, st.Ended = state.StageFailed, err.Error(), time.Now().UTC()
			p.State, p.Error = state.PromotionFailed, fmt.Sprintf("stage %s: %v", st.Name, err)
			s.putPromotion(&p)
			s.auditPromotion(ctx, "promote-stage", p, i, err)
			_, _ = s.prunePromotions(ctx)
			s.log.Warn("promotion failed", "promotion", pid, "stage", st.Name, "error", err)
			return
		}
		s.auditPromotion(ctx, "promote-stage", p, i, nil)
	}
	p.State = state.PromotionDone
	s.putPromotion(&p)
	s.auditPromotion(ctx, "promote-done", p, -1, nil)
	_, _ = s.prunePromotions(ctx)
	s.log.Info("promotion done", "promotion", pid, "SANDBOX_ID", p.Sandbox)
}

// runStage applies the change set to stage i, runs its checks, and rolls
// it back if they fail. It records each step before taking it.
func (s *Supervisor) runStage(ctx context.Context, p *Promotion, i int, changes []cowfs.Change) error {
	st := &p.Stages[i]
	cfg := s.stages()[i]
	st.Started, st.Error = time.Now().UTC(), ""
	if cfg.Target != "project" {
		return s.runReplicaStage(ctx, p, i, cfg)
	}
	project, err := s.cfg.Backend.Project(ctx, s.projects.Location(p.Project))
	if err != nil {
		return err
	}
	var rp cowfs.Volume
	if st.RollbackPoint != "" {
		if rp, err = s.cfg.Backend.Get(ctx, st.RollbackPoint); err != nil {
			return err
		}
	} else {
		st.RollbackPoint = rollbackName(p.ID, i)
		st.State = state.StageApplying
		s.putPromotion(p)
		base, err := s.cfg.Backend.Get(ctx, p.Base)
		if err != nil {
			return err
		}
		source, err := s.cfg.Backend.Get(ctx, p.Source)
		if err != nil {
			return err
		}
		var conflicts []string
		if rp, conflicts, err = s.projectRollbackPoint(ctx, project, base, source, s.earlierSource(ctx, p.Sandbox), changes, st.RollbackPoint); err != nil {
			return err
		}
		if len(conflicts) > 0 && !p.Force {
			return fmt.Errorf("the project changed these paths while the stage waited, and so did the sandbox: %s: %w", strings.Join(conflicts, ", "), ErrConflict)
		}
		p.Conflicts = conflicts
	}
	st.State = state.StageApplying
	s.putPromotion(p)
	crashpoint.Hit(crashpoint.PromoteRollbackPoint)
	// From here until the stage passed or was undone, creates of the
	// project's sandboxes take the rollback point as their base, without
	// waiting for the checks (projectGate).
	settle := s.gate.stage(p.Project, rp)
	defer settle()
	source, err := s.cfg.Backend.Get(ctx, p.Source)
	if err != nil {
		return err
	}
	rollback := func(cause error) error {
		crashpoint.Hit(crashpoint.PromoteRollingBack)
		return s.undoStage(ctx, p, project, rp, source, changes, cause)
	}
	applied, err := promote.ApplyWith(ctx, changes, source.Path, project.Path, promote.ApplyOptions{RefusePrivileged: !p.AllowPrivileged, Expected: rp.Path})
	if err != nil {
		return rollback(err)
	}
	crashpoint.Hit(crashpoint.PromoteApplied)
	s.log.Info("promotion applied", "promotion", p.ID, "stage", st.Name, "removed", applied.Removed,
		"written", applied.Written, "cloned_bytes", applied.Cloned, "copied_bytes", applied.Copied)

	st.State = state.StageChecking
	s.putPromotion(p)
	if len(cfg.Checks) > 0 {
		results, err := s.checkInSandbox(ctx, p, cfg)
		st.Checks = results
		if err == nil {
			err = failedCheck(results)
		}
		if err != nil {
			return rollback(err)
		}
	}
	crashpoint.Hit(crashpoint.PromoteChecked)
	// The replicas receive the project as it is now.
	if s.hasReplicas() {
		if _, err := s.cfg.Backend.Snapshot(ctx, project, promotedName(p.ID), true); err != nil {
			return rollback(fmt.Errorf("snapshotting the promoted project for the next stages: %w", err))
		}
	}
	st.State, st.Ended = state.StagePassed, time.Now().UTC()
	s.putPromotion(p)
	crashpoint.Hit(crashpoint.PromotePassed)
	settle() // before the rollback point goes: no create snapshots it now
	if err := s.deleteVolume(ctx, st.RollbackPoint); err != nil {
		s.log.Warn("deleting a passed stage's rollback point", "promotion", p.ID, "volume", st.RollbackPoint, "error", err)
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
func (s *Supervisor) undoStage(ctx context.Context, p *Promotion, project, rp, source cowfs.Volume, changes []cowfs.Change, cause error) error {
	ctx = context.WithoutCancel(ctx)
	r, err := promote.Restore(ctx, changes, source.Path, rp.Path, project.Path)
	if err == nil {
		if len(r.Kept) > 0 {
			s.log.Warn("undoing a promotion left paths that others wrote into", "promotion", p.ID, "paths", strings.Join(r.Kept, ", "))
			return fmt.Errorf("%w; the promotion's paths were put back, except these, left because others made entries in them since: %s", cause, strings.Join(r.Kept, ", "))
		}
		return cause
	}
	others, oerr := promote.ChangedByOthers(ctx, changes, source.Path, rp.Path, project.Path)
	if oerr == nil && len(others) == 0 {
		s.log.Warn("putting back a promotion's paths failed; no one else changed the project, rolling it back whole", "promotion", p.ID, "error", err)
		oerr = s.cfg.Backend.RollbackProject(ctx, project, rp)
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
	s.log.Error("undoing a promotion failed; the project may hold part of it", "promotion", p.ID, "error", err, "reason", why)
	return fmt.Errorf("%w; putting its paths back failed: %w: the project may hold part of the change, at these paths: %s; the rest of the project is as it was, and it was not rolled back whole because %s",
		cause, err, promote.ChangePaths(changes, 20), why)
}

func stageNames(stages []Stage) string {
	names := make([]string, len(stages))
	for i, st := range stages {
		names[i] = st.Name
	}
	return strings.Join(names, ", ")
}

// stageTarget is st's target for project.
func (s *Supervisor) stageTarget(st Stage, project string) string {
	return strings.ReplaceAll(st.Target, "{project}", project)
}

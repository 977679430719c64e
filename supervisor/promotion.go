package supervisor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/promote"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/audit"
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

const (
	defaultCheckTimeout = 10 * time.Minute
	// checkOutput is how much of a check's output its record keeps (the
	// end, where failures are told).
	checkOutput = 4 << 10
)

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

// privilegedAllowed holds the promotions an admin let carry privileged
// files. It is not in the record: after a restart a promotion that waited
// refuses them again, the safe side.
var privilegedAllowed sync.Map // promotion id -> true

// ReplicaChecksProblem says why stage st may not have checks (nil: it may):
// only a project stage's checks run in a sandbox.
func ReplicaChecksProblem(st Stage) error {
	if st.Target == "project" || len(st.Checks) == 0 {
		return nil
	}
	return fmt.Errorf("the checks of stage %s (target %s) would run outside a sandbox: not supported; put checks on the project stage: %w",
		st.Name, st.Target, ErrChecksOutsideSandbox)
}

// Names of a promotion's volumes: the sandbox's source snapshot, each
// stage's rollback point, and the promoted project's snapshot that the
// replica stages receive. Reconcile removes those of finished promotions.
func promotionPrefix(pid string) string { return "pv-" + pid + "-" }
func sourceName(pid string) string      { return promotionPrefix(pid) + "src" }
func rollbackName(pid string, stage int) string {
	return fmt.Sprintf("%srp%d", promotionPrefix(pid), stage)
}
func promotedName(pid string) string { return promotionPrefix(pid) + "out" }

// checkSandboxName is the name of the sandbox a promotion's checks run in.
func checkSandboxName(pid string) string { return "check-" + pid }

// promotionOf tells a promotion volume's promotion id.
func promotionOf(volume string) (string, bool) {
	rest, ok := strings.CutPrefix(volume, "pv-")
	if !ok {
		return "", false
	}
	pid, _, ok := strings.Cut(rest, "-")
	return pid, ok
}

// projectGate keeps sandbox creates from snapshotting a project while a
// promotion writes it or checks it: a new sandbox gets the project from
// before the promotion's stage or from after it, never between.
type projectGate struct {
	mu    sync.Mutex
	gates map[string]*sync.RWMutex
	busy  map[string]string // project -> the promotion under way
}

func (g *projectGate) of(project string) *sync.RWMutex {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*sync.RWMutex{}
	}
	m, ok := g.gates[project]
	if !ok {
		m = &sync.RWMutex{}
		g.gates[project] = m
	}
	return m
}

// claim marks project as being promoted by pid, or says who is.
func (g *projectGate) claim(project, pid string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy == nil {
		g.busy = map[string]string{}
	}
	if other, ok := g.busy[project]; ok {
		return other, false
	}
	g.busy[project] = pid
	return "", true
}

func (g *projectGate) release(project string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.busy, project)
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
		return p, fmt.Errorf("%s: %s; wait for it (sandboxctl promotions): %w", what, s.busyWith(ctx, other, rec.Project), ErrBusy)
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
	changes, err := s.cfg.Backend.Changes(ctx, base, source)
	if err != nil {
		return fail(fmt.Errorf("%s: listing its changes: %w", what, err))
	}
	if len(changes) == 0 {
		return fail(fmt.Errorf("%s: it changed nothing since its base: %w", what, ErrNothingToPromote))
	}
	p.Changes, p.Digest = len(changes), digest(changes)
	if err := s.checkPrivileged(ctx, &p, changes, source, o.AllowPrivileged); err != nil {
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
	handed = true
	go s.runPromotion(pid, changes)
	return p, nil
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
	var paths []string
	for _, c := range promote.Conflicts(changes, theirs) {
		same, err := promote.Same(rp.Path, source.Path, c.Path)
		if err == nil && !same && earlier != nil {
			same, err = promote.Same(rp.Path, earlier.Path, c.Path)
		}
		if err != nil {
			_ = s.cfg.Backend.Delete(context.WithoutCancel(ctx), rp)
			return rp, nil, fmt.Errorf("comparing %s in the project and the sandbox: %w", c.Path, err)
		}
		if !same {
			paths = append(paths, c.Path)
		}
	}
	return rp, paths, nil
}

// runPromotion runs the promotion's stages from the first that is not
// passed, until one fails, waits for approval, or all are passed.
func (s *Supervisor) runPromotion(pid string, changes []cowfs.Change) {
	ctx := context.Background()
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
			st.State, st.Error, st.Ended = state.StageFailed, err.Error(), time.Now().UTC()
			p.State, p.Error = state.PromotionFailed, fmt.Sprintf("stage %s: %v", st.Name, err)
			s.putPromotion(&p)
			privilegedAllowed.Delete(pid)
			s.auditPromotion(ctx, "promote-stage", p, i, err)
			_, _ = s.prunePromotions(ctx)
			s.log.Warn("promotion failed", "promotion", pid, "stage", st.Name, "error", err)
			return
		}
		s.auditPromotion(ctx, "promote-stage", p, i, nil)
	}
	p.State = state.PromotionDone
	s.putPromotion(&p)
	privilegedAllowed.Delete(pid)
	s.auditPromotion(ctx, "promote-done", p, -1, nil)
	_, _ = s.prunePromotions(ctx)
	s.log.Info("promotion done", "promotion", pid, "SANDBOX_ID", p.Sandbox)
}

// putPromotion records p, logging a failure (the daemon's start rolls
// back a stage whose record did not move on).
func (s *Supervisor) putPromotion(p *Promotion) {
	p.Updated = time.Now().UTC()
	if err := s.cfg.Store.PutPromotion(*p); err != nil {
		s.log.Error("recording a promotion", "promotion", p.ID, "error", err)
	}
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
	project, err := s.cfg.Backend.Project(ctx, s.projects.location(p.Project))
	if err != nil {
		return err
	}
	// Creates of sandboxes of the project wait for the stage's end.
	gate := s.gate.of(p.Project)
	gate.Lock()
	defer gate.Unlock()

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
	source, err := s.cfg.Backend.Get(ctx, p.Source)
	if err != nil {
		return err
	}
	rollback := func(cause error) error {
		crashpoint.Hit(crashpoint.PromoteRollingBack)
		return s.undoStage(ctx, p, project, rp, source, changes, cause)
	}
	_, allowPriv := privilegedAllowed.Load(p.ID)
	applied, err := promote.ApplyWith(ctx, changes, source.Path, project.Path, promote.ApplyOptions{RefusePrivileged: !allowPriv, Expected: rp.Path})
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

// checkPrivileged refuses a change set that carries set-id files, device
// nodes or file capabilities, naming each, unless allow (an admin's
// word), which is then logged and audited with the paths.
func (s *Supervisor) checkPrivileged(ctx context.Context, p *Promotion, changes []cowfs.Change, source cowfs.Volume, allow bool) error {
	found, err := promote.Privileged(ctx, changes, source.Path)
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return nil
	}
	perr := &promote.PrivilegedError{Paths: found}
	if !allow {
		return fmt.Errorf("%w; an admin may allow them (sandboxctl promote --allow-privileged)", perr)
	}
	privilegedAllowed.Store(p.ID, true)
	paths := make([]string, len(found))
	for i, f := range found {
		paths[i] = f.String()
	}
	s.log.Warn("promotion carries privileged files, allowed by an admin", "promotion", p.ID, "SANDBOX_ID", p.Sandbox,
		"CALLER_UID", p.Owner, "paths", strings.Join(paths, ", "))
	s.auditEntry(ctx, audit.Entry{Action: "promote-privileged", Command: "allowed by an admin: " + strings.Join(paths, ", "),
		Promotion: &audit.Promotion{ID: p.ID, State: string(p.State), Changes: p.Changes, Digest: p.Digest}},
		state.Record{ID: p.Sandbox, Project: p.Project}, nil)
	return nil
}

// failedCheck is the error of the first check that did not pass.
func failedCheck(results []state.CheckResult) error {
	for _, r := range results {
		if r.How != nsinit.Exited || r.Status != 0 {
			return fmt.Errorf("check %q failed (%s, status %d)", r.Command, r.How, r.Status)
		}
	}
	return nil
}

func (s *Supervisor) hasReplicas() bool {
	return slices.ContainsFunc(s.stages(), func(st Stage) bool { return st.Target != "project" })
}

// checkInSandbox runs the stage's checks, one after the other, in a new
// sandbox of the promoted project, so that a check that writes cannot
// change it; the sandbox goes after.
func (s *Supervisor) checkInSandbox(ctx context.Context, p *Promotion, st Stage) (results []state.CheckResult, err error) {
	crashpoint.Hit(crashpoint.PromoteChecking)
	timeout := st.CheckTimeout
	if timeout == 0 {
		timeout = defaultCheckTimeout
	}
	sb, err := s.Create(ctx, CreateOptions{
		Project: p.Project, Name: checkSandboxName(p.ID), Owner: p.Owner,
		TTL: time.Duration(len(st.Checks)+1) * timeout, gateHeld: true,
	})
	if err != nil {
		return nil, fmt.Errorf("making a sandbox for the checks: %w", err)
	}
	defer func() {
		if derr := s.Destroy(context.WithoutCancel(ctx), sb.ID); derr != nil {
			s.log.Error("destroying a check sandbox", "SANDBOX_ID", sb.ID, "error", derr)
		}
	}()
	for _, check := range st.Checks {
		r, err := s.runCheck(ctx, sb.ID, p.Owner, check, timeout)
		if err != nil {
			return results, err
		}
		results = append(results, r)
		if r.How != nsinit.Exited || r.Status != 0 {
			break // the first failure decides
		}
	}
	return results, nil
}

// runCheck runs command with sh -c in sandbox id as uid, and keeps the
// end of its output.
func (s *Supervisor) runCheck(ctx context.Context, id string, uid uint32, command string, timeout time.Duration) (state.CheckResult, error) {
	r := state.CheckResult{Command: command}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return r, err
	}
	defer devNull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return r, err
	}
	defer pr.Close()
	start := time.Now()
	cmd, err := s.Exec(ctx, id, ExecOptions{
		Argv: []string{"/bin/sh", "-c", command}, UID: uid, AsRoot: uid == 0,
		Stdio: []*os.File{devNull, pw, pw}, Timeout: timeout,
	})
	pw.Close() // the init holds its own copy
	if err != nil {
		return r, fmt.Errorf("running check %q: %w", command, err)
	}
	var out tailBuffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, pr); close(copied) }()
	<-cmd.Done()
	select {
	case <-copied:
	case <-time.After(2 * time.Second): // something in the background kept the pipe
	}
	res := cmd.Result()
	r.Duration, r.How, r.Output = time.Since(start), string(res.How), out.String()
	r.Status = res.Code
	if res.Signal != 0 {
		r.Status = 128 + res.Signal
	}
	return r, nil
}

// tailBuffer keeps the last checkOutput bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > checkOutput {
		t.buf = t.buf[len(t.buf)-checkOutput:]
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.buf, []byte("?")))
}

// Promotions lists every recorded promotion, oldest first.
func (s *Supervisor) Promotions(ctx context.Context) ([]Promotion, error) {
	return s.cfg.Store.Promotions()
}

// GetPromotion returns promotion pid's record.
func (s *Supervisor) GetPromotion(ctx context.Context, pid string) (Promotion, error) {
	return s.cfg.Store.Promotion(pid)
}

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
		return p, fmt.Errorf("approving promotion %s: %s; approve again after it: %w", pid, s.busyWith(ctx, other, p.Project), ErrBusy)
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
	go s.runPromotion(pid, changes)
	return p, nil
}

// promotionChanges lists p's change set again.
func (s *Supervisor) promotionChanges(ctx context.Context, p Promotion) ([]cowfs.Change, error) {
	base, err := s.cfg.Backend.Get(ctx, p.Base)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's base: %w", err)
	}
	source, err := s.cfg.Backend.Get(ctx, p.Source)
	if err != nil {
		return nil, fmt.Errorf("the promotion's source: %w", err)
	}
	changes, err := s.cfg.Backend.Changes(ctx, base, source)
	if err != nil {
		return nil, err
	}
	if d := digest(changes); d != p.Digest {
		return nil, fmt.Errorf("the change set's digest is %s, recorded %s: %w", d, p.Digest, ErrWrongState)
	}
	return changes, nil
}

// digest is a hash of a change list, for the record and the audit log.
func digest(changes []cowfs.Change) string {
	h := sha256.New()
	for _, c := range changes {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\n", c.Kind, c.Type, c.Path, c.NewPath)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
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

// auditPromotion writes a promotion's step to the audit log: stage i's
// checks and approval (i < 0: the promotion as a whole).
func (s *Supervisor) auditPromotion(ctx context.Context, action string, p Promotion, i int, err error) {
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
	s.auditEntry(ctx, e, state.Record{ID: p.Sandbox, Project: p.Project}, err)
}

// reconcilePromotions finishes what a crash left of promotions (I1, I5):
// a stage that was being applied or checked is rolled back to its
// rollback point and the promotion fails, saying so; a promotion whose
// stages all passed is done. Then the volumes of finished promotions go,
// except the newest promoted snapshot of each project, which replicas
// hold as the parent of their next stream.
func (s *Supervisor) reconcilePromotions(ctx context.Context, rep *Report) error {
	ps, err := s.cfg.Store.Promotions()
	if err != nil {
		return fmt.Errorf("reconciling promotions: %w", err)
	}
	var errs []error
	for _, p := range ps {
		if p.State != state.PromotionRunning {
			continue
		}
		if err := s.reconcilePromotion(ctx, &p); err != nil {
			errs = append(errs, fmt.Errorf("promotion %s: %w", p.ID, err))
			continue
		}
		rep.Promotions = append(rep.Promotions, p.ID)
	}
	pruned, err := s.prunePromotions(ctx)
	rep.OrphanVolumes = append(rep.OrphanVolumes, pruned...)
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reconcilePromotion settles one promotion that was running at a crash.
func (s *Supervisor) reconcilePromotion(ctx context.Context, p *Promotion) error {
	// Its check sandbox, if any, goes first: on ZFS a sandbox's base is a
	// snapshot of the project, which a rollback would have to destroy.
	if recs, err := s.cfg.Store.List(); err == nil {
		for _, r := range recs {
			if r.Name == checkSandboxName(p.ID) {
				if err := s.destroy(ctx, r.ID, "promote-interrupted"); err != nil && !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("destroying its check sandbox %s: %w", r.ID, err)
				}
			}
		}
	}
	i := slices.IndexFunc(p.Stages, func(st state.StageRun) bool {
		return st.State != state.StagePassed && st.State != state.StageSkipped
	})
	if i < 0 {
		p.State = state.PromotionDone
		s.putPromotion(p)
		s.auditPromotion(ctx, "promote-done", *p, -1, nil)
		return nil
	}
	st := &p.Stages[i]
	cause := fmt.Sprintf("interrupted by a restart of the daemon before stage %s began; nothing of it was applied", st.Name)
	if st.State == state.StageApplying || st.State == state.StageChecking {
		if err := s.rollbackStage(ctx, p, i); err != nil {
			return err
		}
		cause = fmt.Sprintf("interrupted by a restart of the daemon while stage %s was %s; rolled back", st.Name, st.State)
	}
	st.State, st.Error, st.Ended = state.StageFailed, cause, time.Now().UTC()
	p.State, p.Error = state.PromotionFailed, cause
	s.putPromotion(p)
	s.auditPromotion(ctx, "promote-interrupted", *p, i, errors.New(cause))
	s.log.Warn("promotion interrupted", "promotion", p.ID, "stage", st.Name, "ACTION", "reconcile", "result", cause)
	return nil
}

// rollbackStage puts stage i of p back to its rollback point, if that
// point was taken (if not, nothing was written to the stage).
func (s *Supervisor) rollbackStage(ctx context.Context, p *Promotion, i int) error {
	st := p.Stages[i]
	if st.RollbackPoint == "" {
		return nil
	}
	if s.stages()[i].Target != "project" {
		return s.revertReplica(ctx, p, i)
	}
	rp, err := s.cfg.Backend.Get(ctx, st.RollbackPoint)
	if errors.Is(err, cowfs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	project, err := s.cfg.Backend.Project(ctx, s.projects.location(p.Project))
	if err != nil {
		return err
	}
	if err := s.cfg.Backend.RollbackProject(ctx, project, rp); err != nil {
		return fmt.Errorf("rolling project %s back to %s: %w", p.Project, rp.Name, err)
	}
	return nil
}

// replica is stage i's target as a replica, for project.
func (s *Supervisor) replica(cfg Stage, project string) (*promote.Replica, error) {
	t, err := promote.ParseTarget(s.stageTarget(cfg, project))
	if err != nil {
		return nil, fmt.Errorf("stage %s: %w: %w", cfg.Name, ErrInvalid, err)
	}
	return &promote.Replica{Target: t, SSHOptions: cfg.SSHOptions, Backend: s.cfg.Backend.Info().Backend}, nil
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
	prev, err := r.Switch(ctx, out.Name)
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
		var buf tailBuffer
		cctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		res.Status, err = r.Check(cctx, check, &buf)
		res.Duration, res.Output = time.Since(start), buf.String()
		timedOut := cctx.Err() != nil
		cancel()
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
			if rerr := r.Revert(context.WithoutCancel(ctx), prev); rerr != nil {
				return fmt.Errorf("check %q failed; and switching %s back failed: %w", check, r.Target, rerr)
			}
			_ = r.Forget(context.WithoutCancel(ctx), out.Name)
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
func (s *Supervisor) replicaParent(ctx context.Context, r *promote.Replica, p *Promotion, i int) (*cowfs.Volume, error) {
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
	if errors.Is(err, promote.ErrReplicaInterrupted) {
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
				newest["src/"+p.Sandbox] = sourceName(p.ID)
			}
			if i > 0 {
				newest[fmt.Sprintf("out/%s/%d", p.Project, i)] = promotedName(p.ID)
			}
		}
	}
	keep := map[string]bool{}
	for _, name := range newest {
		keep[name] = true
	}
	return keep
}

// prunePromotions deletes the volumes of finished promotions (and of
// promotions no record names) that keptVolumes does not keep, and says
// which.
func (s *Supervisor) prunePromotions(ctx context.Context) ([]string, error) {
	ps, err := s.cfg.Store.Promotions()
	if err != nil {
		return nil, err
	}
	recs, err := s.cfg.Store.List()
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, r := range recs {
		live[r.ID] = true
	}
	vols, err := s.cfg.Backend.List(ctx)
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
		pid, ok := promotionOf(v.Name)
		if !ok || !v.Ours || keep[v.Name] {
			continue
		}
		if p, known := byID[pid]; known && !p.State.Finished() {
			continue
		}
		if err := s.cfg.Backend.Delete(ctx, v); err != nil && !errors.Is(err, cowfs.ErrNotFound) {
			errs = append(errs, fmt.Errorf("removing promotion volume %s: %w", v.Name, err))
			continue
		}
		deleted = append(deleted, v.Name)
	}
	return deleted, errors.Join(errs...)
}

// earlierSource is the source of sandbox id's newest promotion that
// passed the project stage, if it is still there.
func (s *Supervisor) earlierSource(ctx context.Context, id string) *cowfs.Volume {
	ps, err := s.cfg.Store.Promotions()
	if err != nil {
		return nil
	}
	for _, p := range slices.Backward(ps) {
		if p.Sandbox == id && len(p.Stages) > 0 && p.Stages[0].State == state.StagePassed {
			if v, err := s.cfg.Backend.Get(ctx, p.Source); err == nil {
				return &v
			}
			return nil
		}
	}
	return nil
}

package promotion_test

// The room's logic without root: over hosttest (a fake Host with a real
// store), cowfsfake (a pool of plain directories) and a fake Runner.

import (
	"context"
	"errors"
	"fmt"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/cowfsfake"
	"github.com/sandboxd/sandboxd/cowfs/cowfstest"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// fakeHost is hosttest's Host with the room's extras: the project gate
// kept in maps, what happened to it told in events.
type fakeHost struct {
	*hosttest.Host
	mu      sync.Mutex
	claimed map[string]string // project -> promotion
	staged  map[string]bool
	events  []string
}

func (f *fakeHost) event(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf(format, args...))
}

func (f *fakeHost) Events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *fakeHost) ClaimProject(project, pid string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if other, ok := f.claimed[project]; ok {
		return other, false
	}
	f.claimed[project] = pid
	f.events = append(f.events, "claim "+project)
	return "", true
}

func (f *fakeHost) ReleaseProject(project string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.claimed, project)
	f.events = append(f.events, "release "+project)
}

// released says whether project is claimed by no promotion.
func (f *fakeHost) released(project string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.claimed[project]
	return !ok
}

func (f *fakeHost) StageProject(project string, rp cowfs.Volume) func() {
	f.mu.Lock()
	f.staged[project] = true
	f.events = append(f.events, "stage "+project+" "+rp.Name)
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.staged, project)
			f.events = append(f.events, "settle "+project)
			f.mu.Unlock()
		})
	}
}

func (f *fakeHost) ProjectLocation(ctx context.Context, rec state.Record) (string, error) {
	p, ok := f.Project(rec.Project)
	if !ok {
		return "", fmt.Errorf("its project %q is gone: %w", rec.Project, supervisor.ErrUnknownProject)
	}
	a, err := supervisor.ActorOf(ctx)
	if err != nil {
		return "", err
	}
	return p.Location, f.MayUseProject(ctx, a, rec.Project)
}

func (f *fakeHost) DestroyFor(ctx context.Context, id, action string) error {
	f.event("destroy %s as %s", id, action)
	return f.Destroy(ctx, id)
}

func (f *fakeHost) OwnerGroups(uint32) []uint32 { return []uint32{uint32(os.Getgid())} }

// fakeRunner runs no command: it answers each check by its text, and
// says what it was asked.
type fakeRunner struct {
	mu     sync.Mutex
	ran    []string // "sandbox name: command"
	store  *state.Store
	answer func(command string) commands.Captured
	during func(id string) // called as a check runs
}

func (r *fakeRunner) RunCaptured(ctx context.Context, id string, o commands.ExecOptions, max int) (commands.Captured, error) {
	rec, err := r.store.Get(id)
	if err != nil {
		return commands.Captured{}, err
	}
	command := o.Argv[len(o.Argv)-1]
	r.mu.Lock()
	r.ran = append(r.ran, rec.Name+": "+command)
	r.mu.Unlock()
	if r.during != nil {
		r.during(id)
	}
	if r.answer != nil {
		return r.answer(command), nil
	}
	return commands.Captured{Result: nsinit.Result{How: nsinit.Exited}, Output: "ok\n"}, nil
}

func (r *fakeRunner) Ran() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ran)
}

// unit is a room over a fake pool with a project "web" holding
// index.html, and a sandbox of it, sb, whose copy the test changes.
type unit struct {
	h       *fakeHost
	fs      *cowfsfake.Backend
	run     *fakeRunner
	pr      *promotion.Promotions
	project string // its path
	sb      state.Record
	sbPath  string
}

func newUnit(t *testing.T, stages ...promotion.StageConfig) *unit {
	t.Helper()
	dir := t.TempDir()
	fs, err := cowfsfake.Open(ctx, filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := fs.MakeProject(ctx, filepath.Join(dir, "web"))
	if err != nil {
		t.Fatal(err)
	}
	// A read-only volume's top directory is mode 0555: t.TempDir cannot
	// remove it as a user other than root.
	t.Cleanup(func() { _ = cowfstest.DeleteAll(context.Background(), fs) })
	write(t, filepath.Join(project.Path, "index.html"), "<h1>web</h1>\n")
	h := &fakeHost{Host: hosttest.New(t, fs, nil), claimed: map[string]string{}, staged: map[string]bool{}}
	h.AddProject(supervisor.Project{Name: "web", Location: project.Path})
	u := &unit{h: h, fs: fs, run: &fakeRunner{store: h.S}, project: project.Path}
	base, err := fs.Snapshot(ctx, project, "base-sb1", true)
	if err != nil {
		t.Fatal(err)
	}
	vol, err := fs.Snapshot(ctx, base, "sb-sb1", false)
	if err != nil {
		t.Fatal(err)
	}
	u.sb = h.AddSandbox(t, state.Record{ID: "sb1", Name: "fix", Project: "web", Owner: uint32(os.Getuid()), Base: base.Name, Volume: vol.Name})
	u.sbPath = vol.Path
	u.pr = promotion.New(h, promotion.Config{Stages: stages, Runner: u.run})
	t.Cleanup(h.Close) // waits for the runs
	return u
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(data)
}

// promote promotes the sandbox and waits until the promotion is no
// longer running.
func (u *unit) promote(t *testing.T, o promotion.PromoteOptions) promotion.Promotion {
	t.Helper()
	o.Owner = u.sb.Owner
	p, err := u.pr.Promote(ctx, u.sb.ID, o)
	if err != nil {
		t.Fatal(err)
	}
	return u.wait(t, p.ID)
}

// wait waits until promotion pid is no longer running, and its run
// ended.
func (u *unit) wait(t *testing.T, pid string) promotion.Promotion {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := u.pr.Get(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		// The run releases the project last.
		if p.State != state.PromotionRunning && u.h.released("web") {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("promotion %s still running: %+v", pid, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// promotionVolumes are the pool's volumes of promotions.
func (u *unit) promotionVolumes(t *testing.T) []string {
	t.Helper()
	vols, err := u.fs.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vols {
		if strings.HasPrefix(v.Name, "pv-") {
			out = append(out, v.Name)
		}
	}
	return out
}

// The planner makes each configured stage a Stage of its kind, from its
// target; none configured is the project alone.
func TestUnitPlanKindsFromTheConfig(t *testing.T) {
	u := newUnit(t)
	if st := u.pr.Stages(); len(st) != 1 || st[0].Kind() != promotion.KindProject || st[0].Config().Name != "project" {
		t.Fatalf("the default plan: %+v", st)
	}
	pr := promotion.New(u.h, promotion.Config{Stages: []promotion.StageConfig{
		{Name: "project", Target: "project"}, {Name: "staging", Target: "/srv/staging/{project}"}, {Name: "prod", Target: "ssh://prod/srv/{project}"},
	}})
	var got []string
	for _, st := range pr.Stages() {
		got = append(got, st.Config().Name+"="+string(st.Kind()))
	}
	if want := []string{"project=project", "staging=path", "prod=replica"}; !slices.Equal(got, want) {
		t.Fatalf("kinds %v; want %v", got, want)
	}
}

// A stage outside a sandbox with checks is refused before anything is
// recorded or claimed, as is a stage not in the plan.
func TestUnitPromoteRefusesWhatThePlanCannotRun(t *testing.T) {
	u := newUnit(t, promotion.StageConfig{Name: "project", Target: "project"},
		promotion.StageConfig{Name: "staging", Target: "/srv/staging", Checks: []string{"true"}})
	write(t, filepath.Join(u.sbPath, "index.html"), "changed\n")
	_, err := u.pr.Promote(ctx, u.sb.ID, promotion.PromoteOptions{})
	if !errors.Is(err, promotion.ErrChecksOutsideSandbox) || !errors.Is(err, supervisor.ErrInvalid) || !strings.Contains(err.Error(), "stage staging") {
		t.Fatalf("a path stage with checks: %v; want ErrChecksOutsideSandbox naming it", err)
	}
	if _, err := u.pr.Promote(ctx, u.sb.ID, promotion.PromoteOptions{To: "prod"}); !errors.Is(err, supervisor.ErrInvalid) || !strings.Contains(err.Error(), `no stage "prod" (stages: project, staging)`) {
		t.Fatalf("to an unknown stage: %v", err)
	}
	// To the project alone, the path stage is skipped: its checks never
	// run, so it is allowed.
	p := u.promote(t, promotion.PromoteOptions{To: "project"})
	if p.State != state.PromotionDone || p.Stages[1].State != state.StageSkipped {
		t.Fatalf("promoting to the project alone: %+v", p)
	}
	if ps, _ := u.pr.List(ctx); len(ps) != 1 {
		t.Fatalf("records after two refusals and one promotion: %+v", ps)
	}
}

// A promotion through the project stage: its change in the project, its
// checks run in a sandbox of its own made as the daemon's, the project
// claimed, staged and settled, released at the end, every step audited.
func TestUnitPromoteAppliesChecksAndReleases(t *testing.T) {
	u := newUnit(t, promotion.StageConfig{Name: "project", Target: "project", Checks: []string{"make test", "make lint"}})
	var creator supervisor.Actor
	var made supervisor.CreateOptions
	u.h.CreateFn = func(ctx context.Context, opts supervisor.CreateOptions) (supervisor.Sandbox, error) {
		creator, _ = supervisor.ActorOf(ctx)
		made = opts
		rec := u.h.AddSandbox(t, state.Record{ID: "ck1", Name: opts.Name, Project: opts.Project, Owner: opts.Owner})
		return supervisor.Sandbox{Record: rec}, nil
	}
	u.run.during = func(id string) {
		if got := u.h.Events(); !slices.Contains(got, "stage web pv-"+strings.TrimPrefix(u.checkName(t, id), "check-")+"-rp0") {
			t.Errorf("a check ran while the project was not staged: %v", got)
		}
	}
	write(t, filepath.Join(u.sbPath, "index.html"), "fixed\n")
	write(t, filepath.Join(u.sbPath, "new/a.txt"), "a\n")
	p := u.promote(t, promotion.PromoteOptions{})
	if p.State != state.PromotionDone || p.Stages[0].State != state.StagePassed || len(p.Stages[0].Checks) != 2 {
		t.Fatalf("the promotion: %+v", p)
	}
	if got := read(t, filepath.Join(u.project, "index.html")) + read(t, filepath.Join(u.project, "new/a.txt")); got != "fixed\na\n" {
		t.Fatalf("the project after the promotion: %q", got)
	}
	want := []string{"check-" + p.ID + ": make test", "check-" + p.ID + ": make lint"}
	if got := u.run.Ran(); !slices.Equal(got, want) {
		t.Fatalf("checks run %v; want %v", got, want)
	}
	if recs, _ := u.h.S.List(); len(recs) != 1 {
		t.Fatalf("sandboxes after the checks: %+v; want the check's gone", recs)
	}
	if creator.Daemon != "promotion checks" || !made.Applied || !made.NoCache || made.Owner != u.sb.Owner || made.Name != "check-"+p.ID {
		t.Fatalf("the check sandbox was made by %v with %+v; want the daemon's, applied, without cache, the promoter's", creator, made)
	}
	ev := u.h.Events()
	if want := []string{"claim web", "stage web pv-" + p.ID + "-rp0", "settle web", "release web"}; !slices.Equal(ev, want) {
		t.Fatalf("the gate: %v; want %v", ev, want)
	}
	var actions []string
	for _, a := range u.h.Audits() {
		actions = append(actions, a.Entry.Action)
	}
	if want := []string{"promote", "promote-stage", "promote-done"}; !slices.Equal(actions, want) {
		t.Fatalf("audited %v", actions)
	}
	// Only the source stays, while the sandbox lives; then it goes too.
	if vols := u.promotionVolumes(t); !slices.Equal(vols, []string{"pv-" + p.ID + "-src"}) {
		t.Fatalf("promotion volumes after it: %v", vols)
	}
	if err := u.h.Destroy(ctx, u.sb.ID); err != nil {
		t.Fatal(err)
	}
	if vols := u.promotionVolumes(t); len(vols) != 0 {
		t.Fatalf("promotion volumes after the sandbox went: %v", vols)
	}
}

// checkName is the name of sandbox id.
func (u *unit) checkName(t *testing.T, id string) string {
	t.Helper()
	rec, err := u.h.S.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Name
}

// A failed check undoes the stage (the reverter: the project's paths put
// back, then the project settled), and the promotion fails, its volumes
// pruned, the project released.
func TestUnitFailedCheckIsUndone(t *testing.T) {
	u := newUnit(t, promotion.StageConfig{Name: "project", Target: "project", Checks: []string{"make test"}})
	u.run.answer = func(string) commands.Captured {
		return commands.Captured{Result: nsinit.Result{How: nsinit.Exited, Code: 3}, Output: "FAIL\n"}
	}
	var atCheck string
	u.run.during = func(string) { atCheck = read(t, filepath.Join(u.project, "index.html")) }
	write(t, filepath.Join(u.sbPath, "index.html"), "broken\n")
	write(t, filepath.Join(u.sbPath, "added.txt"), "x\n")
	p := u.promote(t, promotion.PromoteOptions{})
	if atCheck != "broken\n" {
		t.Fatalf("the project as the check ran: %q; want the change applied", atCheck)
	}
	if p.State != state.PromotionFailed || p.Stages[0].State != state.StageFailed ||
		!strings.Contains(p.Error, `check "make test" failed (exited, status 3)`) || p.Stages[0].Checks[0].Output != "FAIL\n" {
		t.Fatalf("the promotion: %+v", p)
	}
	if got := read(t, filepath.Join(u.project, "index.html")); got != "<h1>web</h1>\n" {
		t.Fatalf("index.html after the undo: %q", got)
	}
	if _, err := os.Stat(filepath.Join(u.project, "added.txt")); !os.IsNotExist(err) {
		t.Fatalf("added.txt after the undo: %v", err)
	}
	ev := u.h.Events()
	if want := []string{"claim web", "stage web pv-" + p.ID + "-rp0", "settle web", "release web"}; !slices.Equal(ev, want) {
		t.Fatalf("the gate: %v; want %v", ev, want)
	}
	if vols := u.promotionVolumes(t); len(vols) != 0 {
		t.Fatalf("promotion volumes after it failed: %v", vols)
	}
}

// A stage an admin approves waits, the project untouched and released;
// approved, it runs; a rejection ends the promotion; a decision on one
// that does not wait is refused.
func TestUnitApprovalWaitsAndResumes(t *testing.T) {
	u := newUnit(t, promotion.StageConfig{Name: "project", Target: "project", Admin: true})
	write(t, filepath.Join(u.sbPath, "index.html"), "approved\n")
	p := u.promote(t, promotion.PromoteOptions{})
	if p.State != state.PromotionWaiting || p.Stages[0].State != state.StageWaiting || p.Stages[0].RollbackPoint != "" {
		t.Fatalf("before approval: %+v", p)
	}
	if got := read(t, filepath.Join(u.project, "index.html")); got != "<h1>web</h1>\n" {
		t.Fatalf("the project before approval: %q", got)
	}
	if ev := u.h.Events(); !slices.Equal(ev, []string{"claim web", "release web"}) {
		t.Fatalf("the gate while waiting: %v", ev)
	}
	if _, err := u.pr.Approve(ctx, p.ID, 0); err != nil {
		t.Fatal(err)
	}
	p = u.wait(t, p.ID)
	if p.State != state.PromotionDone || !p.Stages[0].Approved || p.Stages[0].DecidedBy == nil || *p.Stages[0].DecidedBy != 0 {
		t.Fatalf("after approval: %+v", p)
	}
	if got := read(t, filepath.Join(u.project, "index.html")); got != "approved\n" {
		t.Fatalf("the project after approval: %q", got)
	}
	if _, err := u.pr.Approve(ctx, p.ID, 0); !errors.Is(err, supervisor.ErrWrongState) {
		t.Fatalf("approving a done promotion: %v; want ErrWrongState", err)
	}

	write(t, filepath.Join(u.sbPath, "index.html"), "rejected\n")
	p = u.promote(t, promotion.PromoteOptions{})
	if p, err := u.pr.Reject(ctx, p.ID, 0, "not today"); err != nil || p.State != state.PromotionRejected || p.Stages[0].Reason != "not today" {
		t.Fatalf("Reject: %+v, %v", p, err)
	}
	if got := read(t, filepath.Join(u.project, "index.html")); got != "approved\n" {
		t.Fatalf("the project after a rejection: %q", got)
	}
}

// The driver runs the stages in order, each passed before the next
// begins, and stops at one that waits for approval.
func TestUnitDriverRunsStagesInOrder(t *testing.T) {
	u := newUnit(t, promotion.StageConfig{Name: "first", Target: "project", Checks: []string{"check first"}},
		promotion.StageConfig{Name: "second", Target: "project", Checks: []string{"check second"}, Admin: true})
	var states []string
	u.run.during = func(string) {
		ps, _ := u.pr.List(ctx)
		p := ps[len(ps)-1]
		states = append(states, string(p.Stages[0].State)+"/"+string(p.Stages[1].State))
	}
	write(t, filepath.Join(u.sbPath, "index.html"), "v2\n")
	p := u.promote(t, promotion.PromoteOptions{})
	if p.State != state.PromotionWaiting || p.Stages[0].State != state.StagePassed || p.Stages[1].State != state.StageWaiting {
		t.Fatalf("after the first stage: %+v", p)
	}
	if _, err := u.pr.Approve(ctx, p.ID, 0); err != nil {
		t.Fatal(err)
	}
	if p = u.wait(t, p.ID); p.State != state.PromotionDone {
		t.Fatalf("after the second stage: %+v", p)
	}
	if want := []string{"checking/pending", "passed/checking"}; !slices.Equal(states, want) {
		t.Fatalf("the stages as each check ran: %v; want %v", states, want)
	}
	if ran := u.run.Ran(); len(ran) != 2 || !strings.HasSuffix(ran[0], "check first") || !strings.HasSuffix(ran[1], "check second") {
		t.Fatalf("checks ran %v", ran)
	}
}

// Each step is recorded before it is taken (I5): the promotion's record
// before its source snapshot, the stage's rollback point and state
// before the rollback point is taken, checking before the checks run.
func TestUnitRecordsBeforeEachStep(t *testing.T) {
	u := newUnit(t, promotion.StageConfig{Name: "project", Target: "project", Admin: true, Checks: []string{"make test"}})
	var mu sync.Mutex
	seen := map[string]string{}
	record := func(what string) {
		ps, err := u.pr.List(ctx)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || len(ps) == 0 {
			seen[what] = "no record"
			return
		}
		p := ps[len(ps)-1]
		seen[what] = fmt.Sprintf("%s %s %s", p.State, p.Stages[0].State, p.Stages[0].RollbackPoint)
	}
	u.fs.SetHook(func(method, name string) error {
		if method == "Snapshot" && strings.HasPrefix(name, "pv-") {
			record(name[strings.LastIndex(name, "-")+1:])
		}
		return nil
	})
	u.run.during = func(string) { record("check") }
	write(t, filepath.Join(u.sbPath, "index.html"), "v2\n")
	p := u.promote(t, promotion.PromoteOptions{})
	if _, err := u.pr.Approve(ctx, p.ID, 0); err != nil {
		t.Fatal(err)
	}
	u.wait(t, p.ID)
	rp := "pv-" + p.ID + "-rp0"
	mu.Lock()
	defer mu.Unlock()
	// rp0 is taken twice: by Promote, for the conflicts (and dropped:
	// the stage waits), then by the approved stage.
	want := map[string]string{"src": "running pending ", "rp0": "running applying " + rp, "check": "running checking " + rp}
	for k, v := range want {
		if seen[k] != v {
			t.Errorf("the record as %s was taken: %q; want %q", k, seen[k], v)
		}
	}
}

// The daemon's start finishes what a crash left: a stage cut short while
// applying is rolled back to its rollback point, its check sandbox
// destroyed, the promotion failed saying so, and its volumes pruned.
func TestUnitReconcileRollsBackAnInterruptedStage(t *testing.T) {
	u := newUnit(t)
	project, err := u.fs.Project(ctx, u.project)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := u.fs.Snapshot(ctx, project, "pv-abc123abc123-rp0", true)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(u.project, "index.html"), "half applied\n")
	now := time.Now().UTC()
	if err := u.h.S.PutPromotion(promotion.Promotion{ID: "abc123abc123", Sandbox: u.sb.ID, Project: "web", State: state.PromotionRunning,
		Created: now, Updated: now, Stages: []state.StageRun{{Name: "project", Target: "project", State: state.StageChecking, RollbackPoint: rp.Name}}}); err != nil {
		t.Fatal(err)
	}
	check := u.h.AddSandbox(t, state.Record{ID: "ck1", Name: "check-abc123abc123", Project: "web"})
	var rep supervisor.Report
	for _, f := range u.h.Hooks().AfterReconcile.Funcs() {
		if err := f(ctx, &rep); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(rep.Promotions, []string{"abc123abc123"}) || !slices.Contains(rep.OrphanVolumes, rp.Name) {
		t.Fatalf("the report: %+v", rep)
	}
	if got := read(t, filepath.Join(u.project, "index.html")); got != "<h1>web</h1>\n" {
		t.Fatalf("the project after the reconcile: %q", got)
	}
	if _, err := u.h.S.Get(check.ID); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("the check sandbox after the reconcile: %v", err)
	}
	if ev := u.h.Events(); !slices.Equal(ev, []string{"destroy ck1 as promote-interrupted"}) {
		t.Fatalf("events: %v", ev)
	}
	p, err := u.pr.Get(ctx, "abc123abc123")
	if err != nil || p.State != state.PromotionFailed || p.Stages[0].State != state.StageFailed ||
		p.Error != "interrupted by a restart of the daemon while stage project was checking; rolled back" {
		t.Fatalf("the record after the reconcile: %+v, %v", p, err)
	}
}

// The room's refusals are the caller's: it registers them.
func TestUnitRefusalsRegistered(t *testing.T) {
	u := newUnit(t)
	refusals := u.h.Hooks().Refusals.Funcs()
	for _, err := range []error{promotion.ErrNoPromotion, promotion.ErrNothingToPromote, promotion.ErrChecksOutsideSandbox} {
		if !slices.Contains(refusals, err) {
			t.Errorf("%v is not registered as a refusal", err)
		}
	}
	if _, err := u.pr.Promote(ctx, u.sb.ID, promotion.PromoteOptions{Owner: u.sb.Owner}); !errors.Is(err, promotion.ErrNothingToPromote) {
		t.Fatalf("promoting no change: %v; want ErrNothingToPromote", err)
	}
}

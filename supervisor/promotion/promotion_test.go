package promotion_test

import (
	"errors"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/treetest"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// promoteEnv is a supervisor whose stages are given.
func promoteEnv(t *testing.T, stages ...promotion.StageConfig) *env {
	t.Helper()
	e := newEnv(t)
	e.se.PromotionConfig.Stages = stages
	e.remake(t)
	return e
}

// waitPromotion waits until promotion pid is no longer running.
func waitPromotion(t *testing.T, pr *promotion.Promotions, pid string) promotion.Promotion {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := pr.Get(ctx, pid)
		if err != nil {
			t.Fatal(err)
		}
		if p.State != state.PromotionRunning {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("promotion %s still running: %+v", pid, p)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPromotionAppliesTheChangeExactly(t *testing.T) {
	e := promoteEnv(t, promotion.StageConfig{Name: "project", Target: "project",
		Checks: []string{"grep -q fixed index.html", "test -x bin/run && test -L current"}})
	for _, f := range []struct{ path, data string }{{"old.txt", "old\n"}, {"gone/a", "a\n"}, {"keep/b", "b\n"}} {
		if err := os.MkdirAll(filepath.Join(e.project, filepath.Dir(f.path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.project, f.path), []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	// Every kind of change: modified, added (dir, file, executable,
	// symlink), deleted (file, dir), renamed, mode only.
	script := `set -e
echo '<h1>fixed</h1>' > index.html
mkdir -p bin && printf '#!/bin/sh\necho run\n' > bin/run && chmod 755 bin/run
ln -s bin/run current
rm -r gone
mv old.txt renamed.txt
chmod 600 keep/b`
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, script); res.Code != 0 {
		t.Fatalf("changing the sandbox: %v %s", res, out)
	}
	// The project's own later change elsewhere stays (no conflict).
	if err := os.WriteFile(filepath.Join(e.project, "theirs.txt"), []byte("theirs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := treetest.Describe(t, sb.Path)
	want["theirs.txt"] = `-rw-r--r-- "theirs\n"`

	p, err := e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p = waitPromotion(t, e.pr, p.ID)
	if p.State != state.PromotionDone || p.Stages[0].State != state.StagePassed {
		t.Fatalf("promotion ended %s: %+v", p.State, p)
	}
	treetest.Equal(t, "the project after the promotion", treetest.Describe(t, e.project), want)
	if len(p.Stages[0].Checks) != 2 || p.Stages[0].Checks[1].Status != 0 {
		t.Fatalf("checks recorded: %+v", p.Stages[0].Checks)
	}
	// Of the promotion's volumes, only its source stays while the sandbox
	// lives (its next promotion compares with it); then it goes too.
	for _, v := range supervisortest.Volumes(t, e.fs) {
		if strings.HasPrefix(v, "pv-") && v != "pv-"+p.ID+"-src" || strings.Contains(v, "check") {
			t.Errorf("volume %s left after the promotion", v)
		}
	}
	defer func() {
		if err := e.sup.Destroy(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		for _, v := range supervisortest.Volumes(t, e.fs) {
			if strings.HasPrefix(v, "pv-") {
				t.Errorf("volume %s left after the sandbox went", v)
			}
		}
	}()
	// The check sandbox is gone; the sandbox itself stays. It promotes
	// again after more work: its own earlier change in the project is no
	// conflict.
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo '<h1>fixed twice</h1>' > index.html"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}
	p2, err := e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{})
	if err != nil {
		t.Fatalf("promoting again: %v", err)
	}
	if p2 = waitPromotion(t, e.pr, p2.ID); p2.State != state.PromotionDone {
		t.Fatalf("the second promotion: %+v", p2)
	}
	p = p2
	list, _ := e.sup.List(ctx)
	if len(list) != 1 || list[0].ID != sb.ID {
		t.Fatalf("sandboxes after the promotion: %+v", list)
	}
}

func TestPromotionRefusesConflictsByName(t *testing.T) {
	e := promoteEnv(t)
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo sandbox > index.html && echo new > mine.txt"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}
	if err := os.WriteFile(filepath.Join(e.project, "index.html"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := treetest.Describe(t, e.project)
	_, err = e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{})
	if !errors.Is(err, supervisor.ErrConflict) || !strings.Contains(err.Error(), "index.html") || strings.Contains(err.Error(), "mine.txt") {
		t.Fatalf("promoting over a conflict: %v; want ErrConflict naming index.html alone", err)
	}
	treetest.Equal(t, "the project after a refused promotion", treetest.Describe(t, e.project), before)
	for _, v := range supervisortest.Volumes(t, e.fs) {
		if strings.HasPrefix(v, "pv-") {
			t.Errorf("volume %s left after a refused promotion", v)
		}
	}
	ps, _ := e.pr.List(ctx)
	if len(ps) != 1 || ps[0].State != state.PromotionFailed || !slices.Equal(ps[0].Conflicts, []string{"index.html"}) {
		t.Fatalf("the refused promotion's record: %+v", ps)
	}

	p, err := e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if p = waitPromotion(t, e.pr, p.ID); p.State != state.PromotionDone {
		t.Fatalf("forced promotion: %+v", p)
	}
	if data, _ := os.ReadFile(filepath.Join(e.project, "index.html")); string(data) != "sandbox\n" {
		t.Fatalf("index.html after a forced promotion: %q", data)
	}
}

func TestFailedCheckLeavesTheProjectAsItWas(t *testing.T) {
	e := promoteEnv(t, promotion.StageConfig{Name: "project", Target: "project",
		Checks: []string{"echo checking; test -f must-exist || { echo 'must-exist is missing' >&2; exit 3; }"}})
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo broken > index.html && rm -f x && mkdir d && echo 1 > d/f"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}
	before := treetest.Describe(t, e.project)
	p, err := e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p = waitPromotion(t, e.pr, p.ID)
	if p.State != state.PromotionFailed || p.Stages[0].State != state.StageFailed {
		t.Fatalf("promotion with a failing check: %+v", p)
	}
	c := p.Stages[0].Checks
	if len(c) != 1 || c[0].Status != 3 || !strings.Contains(c[0].Output, "must-exist is missing") {
		t.Fatalf("the check's result: %+v", c)
	}
	treetest.Equal(t, "the project after a failed check", treetest.Describe(t, e.project), before)
	// The promotion's volumes are pruned just after its record says
	// failed: wait for that, not for a time.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		left := slices.DeleteFunc(supervisortest.Volumes(t, e.fs), func(v string) bool { return !strings.HasPrefix(v, "pv-") })
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("volumes %v left after a failed promotion", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAdminApprovalGatesAStage(t *testing.T) {
	e := promoteEnv(t, promotion.StageConfig{Name: "project", Target: "project", Admin: true})
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo approved > index.html"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}
	before := treetest.Describe(t, e.project)
	p, err := e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p = waitPromotion(t, e.pr, p.ID); p.State != state.PromotionWaiting || p.Stages[0].State != state.StageWaiting {
		t.Fatalf("promotion before approval: %+v", p)
	}
	treetest.Equal(t, "the project before approval", treetest.Describe(t, e.project), before)
	if _, err := e.pr.Approve(ctx, p.ID, 0); err != nil {
		t.Fatal(err)
	}
	p = waitPromotion(t, e.pr, p.ID)
	if p.State != state.PromotionDone || !p.Stages[0].Approved || p.Stages[0].DecidedBy == nil {
		t.Fatalf("promotion after approval: %+v", p)
	}
	if data, _ := os.ReadFile(filepath.Join(e.project, "index.html")); string(data) != "approved\n" {
		t.Fatalf("index.html after approval: %q", data)
	}
	if _, err := e.pr.Approve(ctx, p.ID, 0); !errors.Is(err, supervisor.ErrWrongState) {
		t.Fatalf("approving a done promotion: %v; want ErrWrongState", err)
	}

	// A rejection ends it with the project untouched.
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo rejected > index.html"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}
	before = treetest.Describe(t, e.project)
	p, err = e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	waitPromotion(t, e.pr, p.ID)
	if p, err = e.pr.Reject(ctx, p.ID, 0, "not today"); err != nil || p.State != state.PromotionRejected {
		t.Fatalf("Reject: %+v, %v", p, err)
	}
	treetest.Equal(t, "the project after a rejection", treetest.Describe(t, e.project), before)
}

// TestChecksOfAReplicaStageAreRefused is issue 15's finding 2: the checks
// of a stage on a path (or over ssh) would run outside any sandbox, as
// root, executing what the sandbox wrote. A promotion through such a
// stage is refused before anything is applied, naming the stage; the
// control, the same check on the project stage, runs (in a sandbox).
func TestChecksOfAReplicaStageAreRefused(t *testing.T) {
	check := "sh check.sh"
	// The control: the check on the project stage runs, in a sandbox.
	e := promoteEnv(t, promotion.StageConfig{Name: "project", Target: "project", Checks: []string{check}})
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo 'echo the check ran' > check.sh"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}
	p, err := e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p = waitPromotion(t, e.pr, p.ID)
	if p.State != state.PromotionDone || len(p.Stages[0].Checks) != 1 || !strings.Contains(p.Stages[0].Checks[0].Output, "the check ran") {
		t.Fatalf("the control, the check on the project stage: %+v", p)
	}

	// The same check on a path stage: refused before anything is applied.
	staging := filepath.Join(t.TempDir(), "staging")
	e.se.PromotionConfig.Stages = []promotion.StageConfig{{Name: "project", Target: "project"}, {Name: "staging", Target: staging, Checks: []string{check}}}
	e.remake(t)
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo 'echo the check ran again; id -u' > check.sh"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}
	before := treetest.Describe(t, e.project)
	_, err = e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{})
	if !errors.Is(err, promotion.ErrChecksOutsideSandbox) || !errors.Is(err, supervisor.ErrInvalid) ||
		!strings.Contains(err.Error(), "the checks of stage staging (target "+staging+") would run outside a sandbox") {
		t.Fatalf("promoting through a path stage with checks: %v; want ErrChecksOutsideSandbox naming the stage", err)
	}
	treetest.Equal(t, "the project after a refused promotion", treetest.Describe(t, e.project), before)
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Fatalf("the staging path after a refused promotion: %v; want it not made", err)
	}
}

// The daemon's stop (Close) during a promotion's check ends the check,
// undoes the stage and records why before it returns: the store, which
// the daemon closes after Close, is never closed under a promotion.
func TestCloseWaitsForARunningPromotion(t *testing.T) {
	e := promoteEnv(t, promotion.StageConfig{Name: "project", Target: "project", Checks: []string{"sleep 120"}})
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo changed > index.html && echo new > new.txt"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}
	before := treetest.Describe(t, e.project)
	p, err := e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Until the check runs: the change is in the project then.
	deadline := time.Now().Add(time.Minute)
	for p.Stages[0].State != state.StageChecking || len(checkSandboxes(t, e)) == 0 {
		if p.State != state.PromotionRunning || time.Now().After(deadline) {
			t.Fatalf("the promotion did not reach its check: %+v", p)
		}
		time.Sleep(20 * time.Millisecond)
		if p, err = e.pr.Get(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the check's sleep starts
	start := time.Now()
	e.sup.Close()
	took := time.Since(start)
	p, err = e.pr.Get(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != state.PromotionFailed || p.Stages[0].State != state.StageFailed || !strings.Contains(p.Error, "the daemon is stopping") {
		t.Fatalf("after Close, the promotion is %s (stage %s): %q; want failed, saying the daemon is stopping", p.State, p.Stages[0].State, p.Error)
	}
	if took > 60*time.Second {
		t.Errorf("Close took %s: it waited for the check instead of ending it", took)
	}
	t.Logf("Close took %s", took)
	treetest.Equal(t, "the project after a stop during the check", treetest.Describe(t, e.project), before)
	if left := checkSandboxes(t, e); len(left) > 0 {
		t.Errorf("check sandboxes left after Close: %v", left)
	}
	for _, v := range supervisortest.Volumes(t, e.fs) {
		if strings.HasPrefix(v, "pv-") && v != "pv-"+p.ID+"-src" {
			t.Errorf("volume %s left after the promotion was stopped", v)
		}
	}
	// A promotion asked for after Close is refused, not left running
	// (forced: the undo rewrote index.html, which reads as the project's
	// own change).
	if _, err := e.pr.Promote(ctx, sb.ID, promotion.PromoteOptions{Force: true}); err == nil || !strings.Contains(err.Error(), "the daemon is stopping") {
		t.Errorf("a promotion after Close: %v; want refused, the daemon is stopping", err)
	}
}

// checkSandboxes names the sandboxes that promotions' checks run in.
func checkSandboxes(t *testing.T, e *env) []string {
	t.Helper()
	list, err := e.sup.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sb := range list {
		if strings.HasPrefix(sb.Name, "check-") {
			names = append(names, sb.Name)
		}
	}
	return names
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/treetest"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// crashProject is the project the crash trials make their sandboxes of.
const crashProject = "crashops"

// layerMark is a file of a sandbox's system layer (not of its copy of the
// project), written with exec --root.
const layerMark = "/usr/local/crash-mark"

// TestCrashAtEachStepOfEachOperation kills the daemon (kill -9, by an
// armed crash point) at each step of create, checkpoint, rollback, rebase,
// destroy, stop and start, lets systemd start it again, and checks what a user would:
// the sandboxes listed are those expected, and usable (one whose create
// answered, the operation's own and a bystander made before all trials,
// is never lost; one whose destroy was asked is gone), no volume or scope
// is left that no listed sandbox names, a checkpoint is listed exactly
// when its volumes exist, and a rollback or a rebase left the sandbox
// wholly before or wholly after, a stop or a start left the sandbox
// stopped with its files. Every point is before the operation's
// answer. Promotion's points are TestKill9AtEachStepOfAPromotion's.
func TestCrashAtEachStepOfEachOperation(t *testing.T) {
	tb := install(t)
	root := filepath.Join(tb.Btrfs.Mount, "sandboxd")
	project := addProject(t, crashProject, map[string]string{"f.txt": "v1\n"})
	ops := []crashOp{
		{"create", crashCreate},
		{"checkpoint", crashCheckpoint},
		{"rollback", crashRollback},
		{"rebase", func(t *testing.T, point string) { crashRebase(t, point, project) }},
		{"destroy", crashDestroy},
		{"fork", crashFork},
		{"stop", crashStop},
		{"start", crashStart},
	}
	// Every operation that names crash points is tried here, but for
	// promotion's (in promote_test.go).
	for op := range crashpoint.All {
		if op != "promote" && !slices.ContainsFunc(ops, func(o crashOp) bool { return o.name == op }) {
			t.Fatalf("crashpoint.All has points of %q, which this test does not try", op)
		}
	}
	bystander := strings.TrimSpace(ok(t, "create", "--quiet", "web"))
	t.Cleanup(func() { ctl(t, "", "destroy", bystander) })
	begin := time.Now()
	trials := 0
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			for _, point := range crashpoint.All[op.name] {
				t.Run(point, func(t *testing.T) {
					start := time.Now()
					reconfigure(t, "", crashpoint.Env+"="+point)
					t.Cleanup(func() { // a trial that failed leaves its sandboxes
						for _, id := range sandboxIDsOf(t, crashProject) {
							ctl(t, "", "destroy", id)
						}
					})
					trials++
					op.trial(t, point)
					if out := execIn(t, bystander, false, "cat index.html"); out != "<h1>web</h1>\n" {
						t.Fatalf("killed at %s: the bystander sandbox %s's index.html: %q", point, bystander, out)
					}
					checkNothingLeft(t, point, root)
					t.Logf("killed at %s: consistent after the restart (%v)", point, time.Since(start).Round(time.Millisecond))
				})
			}
		})
	}
	points := 0
	for op, list := range crashpoint.All {
		if op != "promote" {
			points += len(list)
		}
	}
	promotion := len(crashpoint.Promotion)
	t.Logf("%d crash points, %d trials (kill -9 each) in %v; with promotion's %d (TestKill9AtEachStepOfAPromotion): %d crash points, %d trials",
		points, trials, time.Since(begin).Round(time.Second), promotion, points+promotion, trials+promotion)
}

// crashOp is an operation whose crash points a trial tries, one at a
// time: it sets up, runs the operation under which the daemon dies, and
// checks what the operation's sandbox holds after the restart.
type crashOp struct {
	name  string // its key in crashpoint.All
	trial func(t *testing.T, point string)
}

// crashCreate: a create killed at point leaves nothing, unless the
// sandbox was recorded ready: then it is listed and usable.
func crashCreate(t *testing.T, point string) {
	killedDuring(t, point, "create", "--quiet", crashProject)
	ids := sandboxIDsOf(t, crashProject)
	want := 0
	if point == crashpoint.CreateReady {
		want = 1
	}
	if len(ids) != want {
		t.Fatalf("killed at %s: sandboxes of the project after the restart: %v; want %d", point, ids, want)
	}
	for _, id := range ids {
		if out := execIn(t, id, false, "cat f.txt"); out != "v1\n" {
			t.Fatalf("killed at %s: f.txt in sandbox %s: %q", point, id, out)
		}
		ok(t, "destroy", id)
	}
}

// crashCheckpoint: the checkpoint is listed (and usable) only when it
// was recorded; the sandbox runs on, not frozen, either way.
func crashCheckpoint(t *testing.T, point string) {
	id := crashSandbox(t, "before")
	killedDuring(t, point, "checkpoint", id, "ck")
	onlySandbox(t, point, id)
	if st := strings.TrimSpace(ok(t, "status", "-q", id)); st != "ready" {
		t.Fatalf("killed at %s: the sandbox is %s after the restart; want ready", point, st)
	}
	execIn(t, id, true, "echo after > mine.txt && echo after > "+layerMark)
	listed := strings.TrimSpace(ok(t, "checkpoints", "-q", id))
	if want := point == crashpoint.CheckpointRecorded; want != (listed == "ck") {
		t.Fatalf("killed at %s: checkpoints listed after the restart: %q; want the checkpoint listed: %v", point, listed, want)
	}
	if listed == "ck" {
		ok(t, "rollback", id, "ck")
		if out := execIn(t, id, false, "cat mine.txt "+layerMark); out != "before\nbefore\n" {
			t.Fatalf("killed at %s: after a rollback to the checkpoint, the sandbox holds %q", point, out)
		}
	}
	ok(t, "destroy", id)
}

// crashRollback: the sandbox holds exactly its state before the rollback
// or exactly the checkpoint's, files and system layer alike, and runs.
func crashRollback(t *testing.T, point string) {
	id := crashSandbox(t, "checkpoint")
	path := property(t, "/org/sandboxd1/sandbox/"+id, "Path")
	ok(t, "checkpoint", id, "ck")
	atCheckpoint := treetest.Describe(t, path)
	execIn(t, id, true, "echo before > mine.txt && echo before > "+layerMark+" && echo x > new.txt && rm f.txt")
	before := treetest.Describe(t, path)

	killedDuring(t, point, "rollback", id, "ck")
	onlySandbox(t, point, id)
	// The state a user asked for is the checkpoint's once its volumes
	// started to be swapped; before that, the one it had.
	want, wantTree := "checkpoint", atCheckpoint
	if point == crashpoint.RollbackStopped || point == crashpoint.RollbackWorldRemoved {
		want, wantTree = "before", before
	}
	got := treetest.Describe(t, property(t, "/org/sandboxd1/sandbox/"+id, "Path"))
	if d := treetest.Diff(got, wantTree); len(d) > 0 {
		t.Fatalf("killed at %s: the sandbox's files are not as %s:\n  %s", point, want, strings.Join(d, "\n  "))
	}
	if out := execIn(t, id, false, "cat mine.txt "+layerMark); out != want+"\n"+want+"\n" {
		t.Fatalf("killed at %s: mine.txt and the system layer's %s hold %q; want both %q", point, layerMark, out, want)
	}
	if listed := strings.TrimSpace(ok(t, "checkpoints", "-q", id)); listed != "ck" {
		t.Fatalf("killed at %s: checkpoints after the restart: %q; want ck", point, listed)
	}
	ok(t, "destroy", id)
}

// crashRebase: the sandbox is on its old base or on the new one, with its
// own change on either, and runs.
func crashRebase(t *testing.T, point, project string) {
	id := crashSandbox(t, "mine")
	path := property(t, "/org/sandboxd1/sandbox/"+id, "Path")
	old := treetest.Describe(t, path)
	hostFile := "host-" + point + ".txt"
	if err := os.WriteFile(filepath.Join(project, hostFile), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rebased := maps.Clone(old)
	rebased[hostFile] = treetest.Describe(t, project)[hostFile]

	killedDuring(t, point, "rebase", id)
	onlySandbox(t, point, id)
	want, wantTree := "the old base", old
	if slices.Index(crashpoint.Rebase, point) >= slices.Index(crashpoint.Rebase, crashpoint.RebaseRecorded) {
		want, wantTree = "the new base", rebased
	}
	got := treetest.Describe(t, property(t, "/org/sandboxd1/sandbox/"+id, "Path"))
	if d := treetest.Diff(got, wantTree); len(d) > 0 {
		t.Fatalf("killed at %s: the sandbox's files are not on %s with its change:\n  %s", point, want, strings.Join(d, "\n  "))
	}
	if out := execIn(t, id, false, "cat mine.txt "+layerMark); out != "mine\nmine\n" {
		t.Fatalf("killed at %s: the sandbox's own files after the restart: %q", point, out)
	}
	ok(t, "destroy", id)
}

// crashDestroy: the destroy was recorded before anything was removed, so
// the restart finishes it, checkpoints and all.
func crashDestroy(t *testing.T, point string) {
	id := crashSandbox(t, "before")
	ok(t, "checkpoint", id, "ck")
	killedDuring(t, point, "destroy", id)
	if ids := sandboxIDsOf(t, crashProject); len(ids) != 0 {
		t.Fatalf("killed at %s: sandboxes of the project after the restart: %v; want none", point, ids)
	}
}

// crashFork: each fork is whole (ready, with the source's files and
// system layer) or gone; the source runs on, not left frozen, its files
// intact; the fork's snapshots of it are gone (checkNothingLeft). Two
// forks, but at ForkHeld, a single fork's point (no temporary snapshots:
// the source held, frozen, while its fork's create snapshots it).
func crashFork(t *testing.T, point string) {
	id := crashSandbox(t, "source")
	count := "2"
	if point == crashpoint.ForkHeld {
		count = "1"
	}
	killedDuring(t, point, "fork", "--count", count, id)
	ids := sandboxIDsOf(t, crashProject)
	if !slices.Contains(ids, id) {
		t.Fatalf("killed at %s: the source %s is gone after the restart (sandboxes: %v)", point, id, ids)
	}
	want := map[string]int{crashpoint.ForkSnapshots: 0, crashpoint.ForkFirst: 1, crashpoint.ForkMade: 2, crashpoint.ForkHeld: 0}[point]
	if len(ids) != want+1 {
		t.Fatalf("killed at %s: sandboxes of the project after the restart: %v; want the source and %d fork(s)", point, ids, want)
	}
	for _, sb := range ids {
		if st := strings.TrimSpace(ok(t, "status", "-q", sb)); st != "ready" {
			t.Fatalf("killed at %s: sandbox %s is %s after the restart; want ready", point, sb, st)
		}
		if out := execIn(t, sb, false, "cat mine.txt "+layerMark); out != "source\nsource\n" {
			t.Fatalf("killed at %s: sandbox %s's mine.txt and system layer hold %q; want the source's", point, sb, out)
		}
		if sb != id {
			ok(t, "destroy", sb)
		}
	}
	ok(t, "destroy", id)
}

// crashStop: the stop was recorded first, so the restart finishes it:
// the sandbox is stopped, with its files, and starts again with them.
func crashStop(t *testing.T, point string) {
	id := crashSandbox(t, "before")
	killedDuring(t, point, "stop", id)
	stoppedWhole(t, point, id)
}

// crashStart: the record turns ready only once the scope runs, so the
// restart leaves the sandbox stopped, with its files.
func crashStart(t *testing.T, point string) {
	id := crashSandbox(t, "before")
	ok(t, "stop", id)
	killedDuring(t, point, "start", id)
	stoppedWhole(t, point, id)
}

// stoppedWhole fails unless id is the crash project's one sandbox,
// stopped, its scope gone and its files on the pool as crashSandbox left
// them; then it starts it, checks its files and system layer from
// inside, and destroys it.
func stoppedWhole(t *testing.T, point, id string) {
	t.Helper()
	onlySandbox(t, point, id)
	if st := strings.TrimSpace(ok(t, "status", "-q", id)); st != "stopped" {
		t.Fatalf("killed at %s: the sandbox is %s after the restart; want stopped", point, st)
	}
	if out, _ := exec.Command("systemctl", "is-active", "sandbox-"+id+".scope").Output(); strings.TrimSpace(string(out)) == "active" {
		t.Fatalf("killed at %s: the stopped sandbox's scope is active after the restart", point)
	}
	if b, err := os.ReadFile(filepath.Join(property(t, "/org/sandboxd1/sandbox/"+id, "Path"), "mine.txt")); string(b) != "before\n" {
		t.Fatalf("killed at %s: mine.txt of the stopped sandbox on the pool: %q, %v", point, b, err)
	}
	ok(t, "start", id)
	if out := execIn(t, id, false, "cat mine.txt "+layerMark); out != "before\nbefore\n" {
		t.Fatalf("killed at %s: after start, mine.txt and the system layer's %s hold %q", point, layerMark, out)
	}
	ok(t, "destroy", id)
}

// crashSandbox makes a sandbox of the crash project with text in mine.txt
// (of its copy of the project) and in its system layer's layerMark.
func crashSandbox(t *testing.T, text string) string {
	t.Helper()
	id := strings.TrimSpace(ok(t, "create", "--quiet", crashProject))
	execIn(t, id, true, fmt.Sprintf("echo %s > mine.txt && echo %s > %s", text, text, layerMark))
	return id
}

// killedDuring runs sandboxctl with args, under which the daemon dies at
// its armed crash point (every point is before the answer), and waits for
// systemd to have started it again.
func killedDuring(t *testing.T, point string, args ...string) {
	t.Helper()
	old := mainPID(t)
	begin := time.Now()
	out, errOut, code := ctl(t, "", args...)
	if code == 0 {
		t.Fatalf("sandboxctl %s answered (%q): the daemon did not die at %s", strings.Join(args, " "), out, point)
	}
	died := time.Since(begin)
	waitActive(t, old)
	t.Logf("sandboxctl %s: exit %d after %v (%s); the daemon serves again %v later",
		strings.Join(args, " "), code, died.Round(time.Millisecond), strings.TrimSpace(errOut), (time.Since(begin) - died).Round(time.Millisecond))
}

// onlySandbox fails unless id is the crash project's one sandbox.
func onlySandbox(t *testing.T, point, id string) {
	t.Helper()
	if ids := sandboxIDsOf(t, crashProject); len(ids) != 1 || ids[0] != id {
		t.Fatalf("killed at %s: sandboxes of the project after the restart: %v; want only %s", point, ids, id)
	}
}

// execIn runs script with sh in sandbox id (as root in it when root is
// set) and returns its output; a command that does not end within 20 s
// (a sandbox left frozen holds it) fails the test.
func execIn(t *testing.T, id string, root bool, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := []string{"exec"}
	if root {
		args = append(args, "--root")
	}
	args = append(args, id, "--", "sh", "-c", script)
	cmd := exec.CommandContext(ctx, ctlBin(), args...)
	// The daemon hands sandboxctl's output to the command in the sandbox:
	// a command that never ends holds it open after sandboxctl is killed.
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("sandboxctl %s: no answer within 20s (a frozen sandbox?)", strings.Join(args, " "))
	}
	if err != nil {
		t.Fatalf("sandboxctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// checkNothingLeft checks, after the restart, what a crash must never
// leave: the records (read from the state's mirror) are the sandboxes
// listed; every volume under the pool's root is one a record names
// (base, copy, system layer, checkpoints), and every one named exists;
// every sandbox scope, and every sandbox init process, is a listed
// sandbox's; the restarted daemon's reconcile reported no problem.
// Promotion volumes (pv-) are TestKill9AtEachStepOfAPromotion's to check.
func checkNothingLeft(t *testing.T, point, root string) {
	t.Helper()
	var list []struct{ ID string }
	if err := json.Unmarshal([]byte(ok(t, "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	listed, unrecorded := map[string]bool{}, map[string]bool{}
	for _, s := range list {
		listed[s.ID], unrecorded[s.ID] = true, true
	}
	files, err := filepath.Glob("/var/lib/sandboxd/records/*.json")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]string{} // volume -> the sandbox whose record names it
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rec state.Record
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !listed[rec.ID] {
			t.Fatalf("killed at %s: sandbox %s is recorded (%s, %s) and not listed", point, rec.ID, f, rec.State)
		}
		delete(unrecorded, rec.ID)
		for _, v := range []string{rec.Base, rec.Volume, rec.Layer} {
			if v != "" {
				named[v] = rec.ID
			}
		}
		for _, c := range rec.Checkpoints {
			named["ck-"+rec.ID+"-"+c.Name] = rec.ID
			if c.Layer {
				named["cks-"+rec.ID+"-"+c.Name] = rec.ID
			}
		}
	}
	for id := range unrecorded {
		t.Fatalf("killed at %s: sandbox %s is listed and has no record", point, id)
	}
	vols, scopes := volumesAndScopes(t, root)
	for _, v := range vols {
		if _, ok := named[v]; !ok && !strings.HasPrefix(v, "pv-") {
			t.Fatalf("killed at %s: volume %s is left, and no record names it (volumes: %v)", point, v, vols)
		}
	}
	for v, id := range named {
		if !slices.Contains(vols, v) {
			t.Fatalf("killed at %s: sandbox %s's record names volume %s, which is gone", point, id, v)
		}
	}
	for _, s := range scopes {
		id := strings.TrimSuffix(strings.TrimPrefix(s, "sandbox-"), ".scope")
		if !listed[id] {
			t.Fatalf("killed at %s: scope %s is left, and no listed sandbox has it", point, s)
		}
	}
	// No sandbox's init runs outside the scope of a listed sandbox (one
	// launched for a create that the crash cut short, before its scope).
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	scopeRe := regexp.MustCompile(`/sandbox-([0-9a-f]{12})\.scope`)
	for _, f := range procs {
		cmdline, err := os.ReadFile(f)
		if argv := strings.Split(string(cmdline), "\x00"); err != nil || len(argv) < 2 || argv[1] != "sandbox-init" {
			continue
		}
		cgroup, err := os.ReadFile(filepath.Join(filepath.Dir(f), "cgroup"))
		if err != nil {
			continue // it ended meanwhile
		}
		if m := scopeRe.FindStringSubmatch(string(cgroup)); m == nil || !listed[m[1]] {
			t.Fatalf("killed at %s: a sandbox init runs outside any listed sandbox's scope (%s):\n%s", point, filepath.Dir(f), cgroup)
		}
	}
	// What the restarted daemon's reconcile did, and that it had no
	// problem to report.
	pid := strconv.Itoa(mainPID(t))
	out, err := exec.Command("journalctl", "--no-pager", "-o", "json", "_PID="+pid).Output()
	if err != nil {
		t.Fatalf("journalctl _PID=%s: %v", pid, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		msg, _ := e["MESSAGE"].(string)
		switch {
		case strings.HasPrefix(msg, "reconcile left problems"):
			t.Fatalf("killed at %s: the restarted daemon's reconcile left problems: %s", point, msg)
		case strings.HasPrefix(msg, "finished a rollback"):
			t.Logf("killed at %s: the restart %s", point, msg)
		case strings.HasPrefix(msg, "reconciled ") && e["ADOPTED"] != nil:
			t.Logf("killed at %s: the restart's reconcile: adopted %v, restarted %v, undone %v, finished %v, lost %v, stopped %v, orphan volumes %q, orphan scopes %q",
				point, e["ADOPTED"], e["RESTARTED"], e["UNDONE"], e["FINISHED"], e["LOST"], e["STOPPED"], e["ORPHAN_VOLUMES"], e["ORPHAN_SCOPES"])
		}
	}
}

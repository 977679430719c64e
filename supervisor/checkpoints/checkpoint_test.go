package checkpoints_test

import (
	"errors"
	"github.com/sandboxd/sandboxd/supervisor/commands"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/tests/testbed"
)

func TestCheckpointRollbackAndDiff(t *testing.T) {
	e := newEnv(t)
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo one > a.txt && echo marked > /etc/ck-marker"); res.Code != 0 {
		t.Fatalf("first changes: %v %s", res, out)
	}
	if _, err := e.ck.Take(ctx, sb.ID, "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ck.Take(ctx, sb.ID, "one"); !errors.Is(err, supervisor.ErrExists) {
		t.Errorf("a second checkpoint named one: %v; want ErrExists", err)
	}
	if _, err := e.ck.Take(ctx, sb.ID, "../x"); !errors.Is(err, supervisor.ErrInvalid) {
		t.Errorf("a checkpoint named ../x: %v; want ErrInvalid", err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo two > a.txt && echo new > b.txt && rm index.html && rm /etc/ck-marker"); res.Code != 0 {
		t.Fatalf("later changes: %v %s", res, out)
	}

	changes, err := e.ck.Diff(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]cowfs.ChangeKind{}
	for _, c := range changes {
		got[c.Path] = c.Kind
	}
	want := map[string]cowfs.ChangeKind{"a.txt": cowfs.Added, "b.txt": cowfs.Added, "index.html": cowfs.Deleted}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("diff: %s is %q; want %q (all: %+v)", p, got[p], k, changes)
		}
	}
	if len(changes) != len(want) {
		t.Errorf("diff lists %d changes; want %d: %+v", len(changes), len(want), changes)
	}

	// A command running when the rollback comes is ended with the old state.
	null, w, _ := testbed.Capture(t)
	long, err := e.cmds.Exec(ctx, sb.ID, commands.ExecOptions{Argv: []string{"sleep", "60"}, UID: 65534, Stdio: []*os.File{null, w, w}})
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := e.ck.Rollback(ctx, sb.ID, "one"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-long.Done():
	case <-time.After(10 * time.Second):
		t.Error("a command from before the rollback still runs")
	}
	out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "cat a.txt index.html /etc/ck-marker; test -e b.txt && echo b-is-back; true")
	if res.How != nsinit.Exited || out != "one\n<h1>web</h1>\nmarked\n" {
		t.Errorf("after rollback to one: %v %q", res, out)
	}
	if got, _ := e.sup.Get(ctx, sb.ID); got.State != "ready" {
		t.Errorf("state after rollback: %s", got.State)
	}
	if _, err := e.ck.Rollback(ctx, sb.ID, "nope"); !errors.Is(err, checkpoints.ErrNoCheckpoint) {
		t.Errorf("rollback to a checkpoint that does not exist: %v", err)
	}

	if _, err := e.ck.Take(ctx, sb.ID, "two"); err != nil {
		t.Fatal(err)
	}
	if err := e.ck.Delete(ctx, sb.ID, "one"); err != nil {
		t.Fatal(err)
	}
	cks, _ := e.ck.List(ctx, sb.ID)
	if len(cks) != 1 || cks[0].Name != "two" {
		t.Errorf("checkpoints after deleting one: %+v", cks)
	}
	if vols := supervisortest.Volumes(t, e.fs); slices.ContainsFunc(vols, func(v string) bool { return strings.HasSuffix(v, "-one") }) {
		t.Errorf("volumes of a deleted checkpoint remain: %v", vols)
	}
	if err := e.sup.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if vols := supervisortest.Volumes(t, e.fs); len(vols) != 0 {
		t.Errorf("volumes left after destroying a sandbox with a checkpoint: %v", vols)
	}
}

func TestReconcileRemovesCheckpointsNoRecordNames(t *testing.T) {
	e := newEnv(t)
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ck.Take(ctx, sb.ID, "kept"); err != nil {
		t.Fatal(err)
	}
	// A checkpoint's snapshot that a crash left out of the record.
	vol, err := e.fs.Get(ctx, sb.Volume)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.Snapshot(ctx, vol, "ck-"+sb.ID+"-lost", true); err != nil {
		t.Fatal(err)
	}
	rep, err := supervisor.New(e.cfg).Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.OrphanVolumes, []string{"ck-" + sb.ID + "-lost"}) {
		t.Errorf("orphans removed: %v; want the unrecorded checkpoint only", rep.OrphanVolumes)
	}
	if vols := supervisortest.Volumes(t, e.fs); !slices.Contains(vols, "ck-"+sb.ID+"-kept") {
		t.Errorf("the recorded checkpoint is gone: %v", vols)
	}
}

package checkpoints_test

import (
	"errors"
	"github.com/sandboxd/sandboxd/supervisor/supervisortest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

func TestRebaseBringsASandboxOntoItsProject(t *testing.T) {
	e := newEnv(t)
	sb, err := e.sup.Create(ctx, supervisor.CreateOptions{Project: "web"})
	if err != nil {
		t.Fatal(err)
	}
	// A read of the project on the host changes access times only: the
	// sandbox is not stale for it.
	if _, err := os.ReadFile(filepath.Join(e.project, "index.html")); err != nil {
		t.Fatal(err)
	}
	if in, err := e.sup.Inspect(ctx, sb.ID, supervisor.LiveStaleness); err != nil || in.Staleness != supervisor.Current {
		t.Fatalf("staleness after a read of the project: %+v, %v; want current", in, err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "echo mine > a.txt && echo sandbox > shared.txt"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}
	if err := os.WriteFile(filepath.Join(e.project, "b.txt"), []byte("theirs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := e.sup.ProjectMoves(ctx, sb.ID)
	if err != nil || !slices.Equal(m.Paths, []string{"b.txt"}) {
		t.Fatalf("ProjectMoves = %+v, %v; want b.txt", m, err)
	}
	if in, _ := e.sup.Inspect(ctx, sb.ID, supervisor.LiveStaleness); in.Staleness != supervisor.Stale {
		t.Fatalf("staleness after the project changed: %s", in.Staleness)
	}

	// A conflict: refused by name, the sandbox as it was and running.
	if err := os.WriteFile(filepath.Join(e.project, "shared.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ck.Rebase(ctx, sb.ID); !errors.Is(err, supervisor.ErrConflict) || !strings.Contains(err.Error(), "shared.txt") {
		t.Fatalf("rebase over a conflict: %v; want ErrConflict naming shared.txt", err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "cat shared.txt; test ! -e b.txt"); res.Code != 0 || out != "sandbox\n" {
		t.Fatalf("the sandbox after a refused rebase: %v %q", res, out)
	}
	if err := os.Remove(filepath.Join(e.project, "shared.txt")); err != nil {
		t.Fatal(err)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "rm shared.txt"); res.Code != 0 {
		t.Fatalf("%v %s", res, out)
	}

	got, err := e.ck.Rebase(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != state.Ready || got.Base == sb.Base {
		t.Fatalf("after the rebase: %+v", got.Record)
	}
	if out, res := supervisortest.RunAs(t, e.cmds, sb.ID, 0, "cat a.txt b.txt index.html"); res.Code != 0 || out != "mine\ntheirs\n<h1>web</h1>\n" {
		t.Fatalf("the rebased sandbox's files: %v %q", res, out)
	}
	changes, err := e.ck.Diff(ctx, sb.ID)
	if err != nil || len(changes) != 1 || changes[0].Path != "a.txt" {
		t.Fatalf("the rebased sandbox's diff: %+v, %v; want a.txt alone", changes, err)
	}
	if in, _ := e.sup.Inspect(ctx, sb.ID, supervisor.LiveStaleness); in.Staleness != supervisor.Current {
		t.Fatalf("staleness after the rebase: %s", in.Staleness)
	}
	// The old base and copy are gone; a restart's reconcile keeps the new.
	vols := supervisortest.Volumes(t, e.fs)
	if slices.Contains(vols, sb.Base) || slices.Contains(vols, sb.Volume) || !slices.Contains(vols, got.Volume) {
		t.Fatalf("volumes after the rebase: %v", vols)
	}
	if _, err := supervisor.New(e.cfg).Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if vols := supervisortest.Volumes(t, e.fs); !slices.Contains(vols, got.Volume) || !slices.Contains(vols, got.Base) {
		t.Fatalf("reconcile removed the rebased volumes: %v", vols)
	}
}

package cowfsfake_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/cowfsfake"
	"github.com/sandboxd/sandboxd/cowfs/cowfstest"
	"github.com/sandboxd/sandboxd/internal/treetest"
)

var ctx = context.Background()

// newPool is a fake pool in a test's own directory, with an empty project.
func newPool(t *testing.T) (*cowfsfake.Backend, cowfs.Volume) {
	t.Helper()
	dir := t.TempDir()
	b, err := cowfsfake.Open(ctx, filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := b.MakeProject(ctx, filepath.Join(dir, "proj"))
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir removes what it made, but not through a read-only
	// volume's top directory (mode 0555) as a user other than root.
	t.Cleanup(func() {
		if err := cowfstest.DeleteAll(ctx, b); err != nil {
			t.Errorf("cleaning up: %v", err)
		}
	})
	return b, project
}

func TestConformance(t *testing.T) {
	cowfstest.Run(t, func(t *testing.T) cowfstest.Pool {
		b, project := newPool(t)
		return cowfstest.Pool{Backend: b, Project: project, Foreign: t.TempDir(), ForeignErr: cowfs.ErrOutsidePool, ReadOnlyByMode: true}
	})
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A Backend opened again on the same root finds its volumes, their kinds
// and the identities of their files (a rename still shows as one).
func TestReopenKeepsTheBookkeeping(t *testing.T) {
	b, project := newPool(t)
	write(t, filepath.Join(project.Path, "a"), "a\n")
	base := must[cowfs.Volume](t)(b.Snapshot(ctx, project, "base", true))
	sb := must[cowfs.Volume](t)(b.Snapshot(ctx, base, "sb", false))
	if err := os.Rename(filepath.Join(sb.Path, "a"), filepath.Join(sb.Path, "b")); err != nil {
		t.Fatal(err)
	}
	again := must[*cowfsfake.Backend](t)(cowfsfake.Open(ctx, b.Info().Root))
	t.Cleanup(func() { _ = cowfstest.DeleteAll(ctx, again) })
	if got := must[[]cowfs.Volume](t)(again.List(ctx)); len(got) != 2 || !got[0].ReadOnly() || got[1].ReadOnly() {
		t.Fatalf("List after reopening: %+v", got)
	}
	if _, err := again.Project(ctx, project.Name); err != nil {
		t.Fatalf("the project after reopening: %v", err)
	}
	ck := must[cowfs.Volume](t)(again.Snapshot(ctx, sb, "ck", true))
	got := must[[]cowfs.Change](t)(again.Changes(ctx, base, ck))
	want := []cowfs.Change{{Path: "a", NewPath: "b", Kind: cowfs.Renamed, Type: cowfs.TypeFile}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Changes after reopening: %v; want %v", got, want)
	}
}

// A plain directory is no project; a project volume renamed still is one
// (an adoption swaps one into a directory's place).
func TestProjectsAreVolumesTheFakeMade(t *testing.T) {
	b, project := newPool(t)
	plain := filepath.Join(filepath.Dir(project.Path), "plain")
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Project(ctx, plain); !errors.Is(err, cowfs.ErrNotVolume) {
		t.Fatalf("a plain directory as a project: %v; want ErrNotVolume", err)
	}
	if ok, err := b.IsVolume(plain); ok || err != nil {
		t.Fatalf("IsVolume(plain directory) = %v, %v", ok, err)
	}
	moved := filepath.Join(filepath.Dir(project.Path), "moved")
	if err := os.Rename(project.Path, moved); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.IsVolume(moved); !ok || err != nil {
		t.Fatalf("IsVolume(renamed project) = %v, %v", ok, err)
	}
	if on, err := b.OnPool(filepath.Dir(moved)); !on || err != nil {
		t.Fatalf("OnPool(the pool) = %v, %v", on, err)
	}
	if err := b.RemoveProject(ctx, moved); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(moved); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a removed project: %v", err)
	}
}

// A quota is data: recorded and reported, not enforced; Usage counts
// what a volume wrote as its own.
func TestQuotaIsRecordedNotEnforced(t *testing.T) {
	b, project := newPool(t)
	write(t, filepath.Join(project.Path, "shared"), "0123456789")
	base := must[cowfs.Volume](t)(b.Snapshot(ctx, project, "base", true))
	sb := must[cowfs.Volume](t)(b.Snapshot(ctx, base, "sb", false))
	if b.Info().Capabilities.Quota {
		t.Fatal("the fake claims to enforce quotas")
	}
	if err := b.SetQuota(ctx, sb, 4); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(sb.Path, "own"), "abcdef")
	must[cowfs.Volume](t)(b.Snapshot(ctx, sb, "ck", true)) // what sb wrote stays its own
	u := must[cowfs.Usage](t)(b.Usage(ctx, sb))
	if u != (cowfs.Usage{Exclusive: 6, Referenced: 16, Quota: 4}) {
		t.Fatalf("Usage = %+v; want 6 exclusive, 16 referenced, quota 4", u)
	}
	if err := b.SetQuota(ctx, project, 4); !errors.Is(err, cowfs.ErrNotOurs) {
		t.Fatalf("a quota on the project: %v; want ErrNotOurs", err)
	}
}

// An incremental stream received onto the copy of its parent gives the
// volume sent, removals included.
func TestIncrementalReceive(t *testing.T) {
	b, project := newPool(t)
	write(t, filepath.Join(project.Path, "keep"), "keep\n")
	write(t, filepath.Join(project.Path, "gone", "x"), "x\n")
	if err := os.Symlink("keep", filepath.Join(project.Path, "link")); err != nil {
		t.Fatal(err)
	}
	base := must[cowfs.Volume](t)(b.Snapshot(ctx, project, "base", true))
	sb := must[cowfs.Volume](t)(b.Snapshot(ctx, base, "sb", false))
	if err := os.RemoveAll(filepath.Join(sb.Path, "gone")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(sb.Path, "new", "y"), "y\n")
	if err := os.Chmod(filepath.Join(sb.Path, "keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	ck := must[cowfs.Volume](t)(b.Snapshot(ctx, sb, "ck", true))
	var full, incr bytes.Buffer
	if err := b.Send(ctx, &full, nil, base); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(ctx, &incr, &base, ck); err != nil {
		t.Fatal(err)
	}
	copyBase := must[cowfs.Volume](t)(b.Receive(ctx, &full, "copy-base"))
	if err := b.Delete(ctx, base); err != nil { // the received copy is the parent now
		t.Fatal(err)
	}
	got := must[cowfs.Volume](t)(b.Receive(ctx, &incr, "copy-ck"))
	treetest.Equal(t, "the received increment", treetest.Describe(t, got.Path), treetest.Describe(t, ck.Path))
	if !got.ReadOnly() || !copyBase.ReadOnly() {
		t.Fatalf("received volumes: %+v, %+v", copyBase, got)
	}
	var again bytes.Buffer
	if err := b.Send(ctx, &again, &ck, ck); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, copyBase); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, ck); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, got); err != nil { // received from ck: a parent too
		t.Fatal(err)
	}
	if _, err := b.Receive(ctx, &again, "orphan"); !errors.Is(err, cowfs.ErrNotFound) {
		t.Fatalf("an increment whose parent is gone: %v; want ErrNotFound", err)
	}
}

// Fail and SetHook make calls fail on purpose; a failed Snapshot leaves
// nothing.
func TestInjectedFailures(t *testing.T) {
	b, project := newPool(t)
	boom := errors.New("boom")
	b.Fail("Snapshot", "bad", boom)
	if _, err := b.Snapshot(ctx, project, "bad", true); !errors.Is(err, boom) {
		t.Fatalf("Snapshot with a failure set: %v", err)
	}
	if _, err := b.Snapshot(ctx, project, "good", true); err != nil {
		t.Fatalf("Snapshot of another name: %v", err)
	}
	b.Fail("Snapshot", "bad", nil)
	if _, err := b.Snapshot(ctx, project, "bad", true); err != nil {
		t.Fatalf("Snapshot once the failure is cleared: %v", err)
	}
	var calls []string
	b.SetHook(func(method, name string) error {
		calls = append(calls, method+" "+name)
		if method == "Delete" {
			return boom
		}
		return nil
	})
	v := must[cowfs.Volume](t)(b.Get(ctx, "good"))
	if err := b.Delete(ctx, v); !errors.Is(err, boom) {
		t.Fatalf("Delete with a hook failing it: %v", err)
	}
	b.SetHook(nil)
	if want := []string{"Get good", "Delete good"}; !reflect.DeepEqual(calls, want) {
		t.Fatalf("the hook saw %q; want %q", calls, want)
	}
	if vols := must[[]cowfs.Volume](t)(b.List(ctx)); len(vols) != 2 {
		t.Fatalf("volumes: %+v", vols)
	}
}

package checkpoints_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/cowfsfake"
	"github.com/sandboxd/sandboxd/cowfs/cowfstest"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// poolHost is fakeHost over cowfsfake's pool of directories, whose
// project a rebase can snapshot.
type poolHost struct {
	*fakeHost
	project cowfs.Volume
}

func (h *poolHost) OpenProject(context.Context, state.Record) (func(context.Context, string) (cowfs.Volume, error), error) {
	return func(ctx context.Context, name string) (cowfs.Volume, error) {
		return h.B.Snapshot(ctx, h.project, name, true)
	}, nil
}

// poolEnv is the room over a pool of directories (cowfsfake), with one
// sandbox made as a create makes it: a read-only base of the project
// (index.html), a writable copy of the base and a system layer.
type poolEnv struct {
	h    *poolHost
	pool *cowfsfake.Backend
	ck   *checkpoints.Checkpoints
	rec  state.Record
}

func newPoolEnv(t *testing.T) *poolEnv {
	t.Helper()
	dir := t.TempDir()
	pool, err := cowfsfake.Open(ctx, filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	project, err := pool.MakeProject(ctx, filepath.Join(dir, "web"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cowfstest.DeleteAll(ctx, pool) })
	writeFile(t, project.Path, "index.html", "<h1>web</h1>\n")
	h := &poolHost{fakeHost: &fakeHost{Host: hosttest.New(t, pool, &fakeUnits{frozen: map[string]int{}})}, project: project}
	id := "0123456789ab"
	base, err := pool.Snapshot(ctx, project, "base-"+id, true)
	if err != nil {
		t.Fatal(err)
	}
	vol, err := pool.Snapshot(ctx, base, "sb-"+id, false)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := pool.Create(ctx, "sys-"+id)
	if err != nil {
		t.Fatal(err)
	}
	rec := h.AddSandbox(t, state.Record{ID: id, Project: "web", Base: base.Name, Volume: vol.Name, Layer: layer.Name,
		Unit: "sandbox-" + id + ".scope"})
	return &poolEnv{h: h, pool: pool, ck: checkpoints.New(h, checkpoints.Config{}), rec: rec}
}

// path is where volume name's file rel is.
func (e *poolEnv) path(t *testing.T, name, rel string) string {
	t.Helper()
	v, err := e.pool.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(v.Path, rel)
}

func writeFile(t *testing.T, dir, rel, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "(none)"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A rollback brings back the files of the copy and of the layer as the
// checkpoint has them; what was written since is gone.
func TestUnitRollbackOverAFakePool(t *testing.T) {
	e := newPoolEnv(t)
	id := e.rec.ID
	writeFile(t, filepath.Dir(e.path(t, e.rec.Volume, "a.txt")), "a.txt", "one\n")
	writeFile(t, filepath.Dir(e.path(t, e.rec.Layer, "mark")), "mark", "marked\n")
	if _, err := e.ck.Take(ctx, id, "one"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Dir(e.path(t, e.rec.Volume, "a.txt")), "a.txt", "two\n")
	writeFile(t, filepath.Dir(e.path(t, e.rec.Volume, "b.txt")), "b.txt", "new\n")
	if err := os.Remove(e.path(t, e.rec.Layer, "mark")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ck.Rollback(ctx, id, "one"); err != nil {
		t.Fatal(err)
	}
	got := []string{readFile(t, e.path(t, e.rec.Volume, "a.txt")), readFile(t, e.path(t, e.rec.Volume, "b.txt")),
		readFile(t, e.path(t, e.rec.Volume, "index.html")), readFile(t, e.path(t, e.rec.Layer, "mark"))}
	if want := []string{"one\n", "(none)", "<h1>web</h1>\n", "marked\n"}; !slices.Equal(got, want) {
		t.Errorf("after the rollback: a.txt, b.txt, index.html, the layer's mark = %q; want %q", got, want)
	}
	if len(e.h.starts) != 1 {
		t.Errorf("started %d times; want once", len(e.h.starts))
	}
}

// DiffCounted over real trees: what the sandbox added and deleted, less
// what the ignore rules leave out, counted.
func TestUnitDiffCountedOverAFakePool(t *testing.T) {
	e := newPoolEnv(t)
	dir := filepath.Dir(e.path(t, e.rec.Volume, "a.txt"))
	writeFile(t, dir, "a.txt", "mine\n")
	if err := os.Remove(filepath.Join(dir, "index.html")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "node_modules/x.js", "x\n")
	e.h.Ignore = func(c cowfs.Change) bool {
		return c.Path == "node_modules" || strings.HasPrefix(c.Path, "node_modules/")
	}
	changes, ignored, err := e.ck.DiffCounted(ctx, e.rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]cowfs.ChangeKind{}
	for _, c := range changes {
		got[c.Path] = c.Kind
	}
	want := map[string]cowfs.ChangeKind{"a.txt": cowfs.Added, "index.html": cowfs.Deleted}
	if len(got) != len(want) || got["a.txt"] != cowfs.Added || got["index.html"] != cowfs.Deleted || ignored != 2 {
		t.Errorf("DiffCounted = %v, %d ignored; want %v, 2 ignored", got, ignored, want)
	}
	vols, err := e.pool.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(vols, func(v cowfs.Volume) bool { return strings.HasPrefix(v.Name, "diff-") }) {
		t.Errorf("a diff's snapshot remains: %v", vols)
	}
}

// A rebase brings the sandbox onto the project as it is now, its own
// change kept; one over a conflict is refused by name and leaves the
// sandbox, and the pool, as they were.
func TestUnitRebaseOverAFakePool(t *testing.T) {
	e := newPoolEnv(t)
	id := e.rec.ID
	dir := filepath.Dir(e.path(t, e.rec.Volume, "a.txt"))
	writeFile(t, dir, "a.txt", "mine\n")
	writeFile(t, dir, "shared.txt", "sandbox\n")
	writeFile(t, e.h.project.Path, "b.txt", "theirs\n")
	writeFile(t, e.h.project.Path, "shared.txt", "host\n")
	before, err := e.pool.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.ck.Rebase(ctx, id); !errors.Is(err, supervisor.ErrConflict) || !strings.Contains(err.Error(), "shared.txt") {
		t.Fatalf("a rebase over a conflict: %v; want ErrConflict naming shared.txt", err)
	}
	if after, _ := e.pool.List(ctx); len(after) != len(before) {
		t.Errorf("volumes after a refused rebase: %v; want %v", after, before)
	}
	if got := readFile(t, filepath.Join(dir, "shared.txt")); got != "sandbox\n" || len(e.h.stops) != 0 {
		t.Errorf("the sandbox after a refused rebase: shared.txt %q, stopped %d times", got, len(e.h.stops))
	}

	if err := os.Remove(filepath.Join(e.h.project.Path, "shared.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "shared.txt")); err != nil {
		t.Fatal(err)
	}
	sb, err := e.ck.Rebase(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != state.Ready || sb.Base == e.rec.Base || sb.Volume == e.rec.Volume ||
		!strings.HasPrefix(sb.Base, e.rec.Base+"-") || !strings.HasPrefix(sb.Volume, e.rec.Volume+"-") {
		t.Fatalf("after the rebase: %+v", sb.Record)
	}
	got := []string{readFile(t, e.path(t, sb.Volume, "a.txt")), readFile(t, e.path(t, sb.Volume, "b.txt")), readFile(t, e.path(t, sb.Volume, "index.html"))}
	if want := []string{"mine\n", "theirs\n", "<h1>web</h1>\n"}; !slices.Equal(got, want) {
		t.Errorf("the rebased copy's a.txt, b.txt, index.html = %q; want %q", got, want)
	}
	for _, old := range []string{e.rec.Base, e.rec.Volume} {
		if _, err := e.pool.Get(ctx, old); !errors.Is(err, cowfs.ErrNotFound) {
			t.Errorf("the old volume %s after the rebase: %v; want it gone", old, err)
		}
	}
	if len(e.h.starts) != 1 || e.h.starts[0].Volume != sb.Volume {
		t.Errorf("started %d times (%+v); want once, on the new copy", len(e.h.starts), e.h.starts)
	}
}

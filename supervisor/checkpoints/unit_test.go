package checkpoints_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/checkpoints"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// A checkpoint is a read-only snapshot of the sandbox's copy and of its
// layer, named after both, taken frozen; names are checked, taken once,
// and capped; a delete takes both volumes and the record's entry away.
func TestUnitCheckpointNamesAndCap(t *testing.T) {
	e := newUnitEnv(t, checkpoints.Config{MaxCheckpoints: 2})
	id := e.rec.ID
	ck, err := e.ck.Take(ctx, id, "one")
	if err != nil {
		t.Fatal(err)
	}
	if ck.Name != "one" || !ck.Layer || ck.Created.IsZero() {
		t.Errorf("checkpoint taken: %+v", ck)
	}
	for _, n := range []string{"ck-" + id + "-one", "cks-" + id + "-one"} {
		if v, err := e.pool.Get(ctx, n); err != nil || !v.ReadOnly() {
			t.Errorf("volume %s: %+v, %v; want a read-only snapshot", n, v, err)
		}
	}
	if want := []string{"freeze " + e.rec.Unit, "thaw " + e.rec.Unit}; !slices.Equal(e.units.calls, want) {
		t.Errorf("units asked %q; want %q", e.units.calls, want)
	}
	for _, name := range []string{"../x", "", ".hidden", "-dash", strings.Repeat("a", 65)} {
		if _, err := e.ck.Take(ctx, id, name); !errors.Is(err, supervisor.ErrInvalid) {
			t.Errorf("checkpoint named %q: %v; want ErrInvalid", name, err)
		}
	}
	if _, err := e.ck.Take(ctx, id, strings.Repeat("a", 64)); err != nil {
		t.Errorf("a name of 64 bytes: %v", err)
	}
	if _, err := e.ck.Take(ctx, id, "one"); !errors.Is(err, supervisor.ErrExists) {
		t.Errorf("a second checkpoint named one: %v; want ErrExists", err)
	}
	if _, err := e.ck.Take(ctx, id, "three"); !errors.Is(err, supervisor.ErrLimitReached) {
		t.Errorf("a third checkpoint with a cap of 2: %v; want ErrLimitReached", err)
	}
	if err := e.ck.Delete(ctx, id, "nope"); !errors.Is(err, checkpoints.ErrNoCheckpoint) {
		t.Errorf("deleting a checkpoint that is not there: %v; want ErrNoCheckpoint", err)
	}
	if err := e.ck.Delete(ctx, id, "one"); err != nil {
		t.Fatal(err)
	}
	if list, _ := e.ck.List(ctx, id); len(list) != 1 || list[0].Name != strings.Repeat("a", 64) {
		t.Errorf("checkpoints after deleting one: %+v", list)
	}
	if vols := e.pool.names(); slices.ContainsFunc(vols, func(v string) bool { return strings.HasSuffix(v, "-one") }) {
		t.Errorf("volumes of a deleted checkpoint remain: %v", vols)
	}
	if e.units.frozen[e.rec.Unit] != 0 {
		t.Errorf("the sandbox is left frozen (%d)", e.units.frozen[e.rec.Unit])
	}
	// What the audit log was told, in order, refusals included.
	var actions []string
	for _, a := range e.h.Audits() {
		actions = append(actions, a.Entry.Action)
	}
	if len(actions) != 11 || actions[0] != "checkpoint" || actions[10] != "checkpoint-delete" {
		t.Errorf("audited %q", actions)
	}
	// The room's refusal is the caller's fault, as the core's are.
	if !slices.ContainsFunc(e.h.Hooks().Refusals.Funcs(), func(err error) bool { return err == checkpoints.ErrNoCheckpoint }) {
		t.Error("ErrNoCheckpoint is not registered as a refusal")
	}
}

// A checkpoint that fails half way leaves no volume behind, and the
// record without it; a frozen sandbox is not frozen or thawed for it.
func TestUnitCheckpointUndoneOnFailure(t *testing.T) {
	e := newUnitEnv(t, checkpoints.Config{})
	id := e.rec.ID
	e.pool.failOn("Snapshot", "cks-"+id+"-x", errors.New("no room"))
	if _, err := e.ck.Take(ctx, id, "x"); err == nil || !strings.Contains(err.Error(), "no room") {
		t.Fatalf("a checkpoint whose layer's snapshot fails: %v", err)
	}
	if vols := e.pool.names(); !slices.Equal(vols, []string{"base-" + id, "sb-" + id, "sys-" + id}) {
		t.Errorf("volumes after a failed checkpoint: %v", vols)
	}
	if list, _ := e.ck.List(ctx, id); len(list) != 0 {
		t.Errorf("checkpoints after a failed one: %+v", list)
	}
	if e.units.frozen[e.rec.Unit] != 0 {
		t.Errorf("the sandbox is left frozen after a failure")
	}

	if _, err := e.h.Store().Update(id, func(r *state.Record) error { r.State = state.Frozen; return nil }); err != nil {
		t.Fatal(err)
	}
	e.units.calls = nil
	e.pool.failOn("Snapshot", "cks-"+id+"-x", nil)
	if _, err := e.ck.Take(ctx, id, "x"); err != nil {
		t.Fatal(err)
	}
	if len(e.units.calls) != 0 {
		t.Errorf("a frozen sandbox's checkpoint asked systemd %q; want nothing (it stays frozen)", e.units.calls)
	}
}

// A rollback stops the sandbox, swaps each volume (copy, then layer)
// under a marker, drops the marker and starts it once; one that fails
// after the stop drops the marker and starts the sandbox again on what
// it holds.
func TestUnitRollback(t *testing.T) {
	e := newUnitEnv(t, checkpoints.Config{})
	id := e.rec.ID
	if _, err := e.ck.Take(ctx, id, "one"); err != nil {
		t.Fatal(err)
	}
	sb, err := e.ck.Rollback(ctx, id, "one")
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != state.Ready {
		t.Errorf("state after a rollback: %s", sb.State)
	}
	want := []string{"sb-" + id + "<-ck-" + id + "-one", "sys-" + id + "<-cks-" + id + "-one"}
	if !slices.Equal(e.pool.swaps, want) {
		t.Errorf("swaps %q; want %q", e.pool.swaps, want)
	}
	if len(e.h.stops) != 1 || len(e.h.starts) != 1 {
		t.Errorf("stopped %d times, started %d; want once each", len(e.h.stops), len(e.h.starts))
	}
	if vols := e.pool.names(); slices.ContainsFunc(vols, func(v string) bool { return strings.HasPrefix(v, "rollback-") }) {
		t.Errorf("a marker remains after a rollback: %v", vols)
	}
	if _, err := e.ck.Rollback(ctx, id, "nope"); !errors.Is(err, checkpoints.ErrNoCheckpoint) {
		t.Errorf("a rollback to no checkpoint: %v; want ErrNoCheckpoint", err)
	}

	// The layer's swap fails: the marker goes (a failure is not finished
	// later), the sandbox starts again.
	e.pool.failOn("Rollback", "sys-"+id, errors.New("layer busy"))
	e.h.stops, e.h.starts = nil, nil
	if _, err := e.ck.Rollback(ctx, id, "one"); err == nil || !strings.Contains(err.Error(), "layer busy") {
		t.Fatalf("a rollback whose second swap fails: %v", err)
	}
	if len(e.h.starts) != 1 {
		t.Errorf("started %d times after a failed rollback; want once", len(e.h.starts))
	}
	if vols := e.pool.names(); slices.ContainsFunc(vols, func(v string) bool { return strings.HasPrefix(v, "rollback-") }) {
		t.Errorf("a marker remains after a failed rollback: %v", vols)
	}

	// Forgetting the init fails once the scope is stopped: started again.
	e.pool.failOn("Rollback", "sys-"+id, nil)
	e.h.stops, e.h.starts, e.h.stopErr = nil, nil, errors.New("runtime dir stuck")
	swapped := len(e.pool.swaps)
	if _, err := e.ck.Rollback(ctx, id, "one"); err == nil {
		t.Fatal("a rollback whose stop failed half way succeeded")
	}
	if len(e.h.starts) != 1 || len(e.pool.swaps) != swapped {
		t.Errorf("after a stop that failed half way: %d starts (want 1), swaps %q (want none more)", len(e.h.starts), e.pool.swaps[swapped:])
	}
}

// finishRollbacks, the room's BeforeReconcile hook: a marker of a known
// sandbox, stopped, whose checkpoint is recorded is redone; every other
// marker of ours is dropped without a swap (one of a running sandbox is
// reported); a volume not ours is left alone.
func TestUnitFinishRollbacks(t *testing.T) {
	e := newUnitEnv(t, checkpoints.Config{})
	h := e.h
	mk := func(id, unit string, st state.State, cks ...string) state.Record {
		rec := state.Record{ID: id, Project: "web", State: st, Base: "base-" + id, Volume: "sb-" + id, Layer: "sys-" + id, Unit: unit}
		for _, c := range cks {
			rec.Checkpoints = append(rec.Checkpoints, state.Checkpoint{Name: c, Layer: true})
		}
		return h.AddSandbox(t, rec)
	}
	redo := mk("aaaaaaaaaaaa", "sandbox-aaaaaaaaaaaa.scope", state.Ready, "one")
	running := mk("bbbbbbbbbbbb", "sandbox-bbbbbbbbbbbb.scope", state.Ready, "one")
	creating := mk("cccccccccccc", "sandbox-cccccccccccc.scope", state.Creating, "one")
	destroying := mk("dddddddddddd", "sandbox-dddddddddddd.scope", state.Destroying, "one")
	noCk := mk("eeeeeeeeeeee", "sandbox-eeeeeeeeeeee.scope", state.Ready)
	for _, r := range []state.Record{redo, running, creating, destroying, noCk} {
		for _, n := range []string{r.Volume, r.Layer, volname.Checkpoint(r.ID, "one"), volname.CheckpointLayer(r.ID, "one")} {
			e.pool.add(n, cowfs.KindWritable)
		}
	}
	markers := []string{
		volname.RollbackMarker(redo.ID, "one"),
		volname.RollbackMarker(running.ID, "one"),
		volname.RollbackMarker(creating.ID, "one"),
		volname.RollbackMarker(destroying.ID, "one"),
		volname.RollbackMarker(noCk.ID, "one"),
		volname.RollbackMarker("ffffffffffff", "one"), // no such sandbox
	}
	var vols []cowfs.Volume
	for _, m := range markers {
		vols = append(vols, e.pool.add(m, cowfs.KindWritable))
	}
	notOurs := e.pool.add(volname.RollbackMarker(redo.ID, "two"), cowfs.KindWritable)
	notOurs.Ours = false
	e.pool.vols[notOurs.Name] = notOurs
	vols = append(vols, notOurs)
	recs, err := h.Store().List()
	if err != nil {
		t.Fatal(err)
	}
	view := supervisor.ReconcileView{Records: recs, Volumes: vols, Active: map[string]bool{running.Unit: true}}
	var errs []error
	for _, f := range h.Hooks().BeforeReconcile.Funcs() {
		errs = append(errs, f(ctx, view))
	}
	err = errors.Join(errs...)
	if err == nil || !strings.Contains(err.Error(), running.ID) || strings.Contains(err.Error(), redo.ID) {
		t.Errorf("the hook's error: %v; want the running sandbox's alone", err)
	}
	want := []string{"sb-" + redo.ID + "<-ck-" + redo.ID + "-one", "sys-" + redo.ID + "<-cks-" + redo.ID + "-one"}
	if !slices.Equal(e.pool.swaps, want) {
		t.Errorf("swaps %q; want %q (the stopped, known sandbox's alone)", e.pool.swaps, want)
	}
	left := e.pool.names()
	for _, m := range markers {
		if slices.Contains(left, m) {
			t.Errorf("marker %s remains", m)
		}
	}
	if !slices.Contains(left, notOurs.Name) {
		t.Errorf("a marker not ours was removed")
	}
}

// DiffCounted is the changes Host.WithChanges gives, less what the
// ignore rules leave out, and how many; the moment's snapshot goes.
func TestUnitDiffCounted(t *testing.T) {
	e := newUnitEnv(t, checkpoints.Config{})
	e.pool.changes = []cowfs.Change{
		{Path: "a.txt", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "node_modules/x", Kind: cowfs.Added, Type: cowfs.TypeFile},
		{Path: "index.html", Kind: cowfs.Deleted, Type: cowfs.TypeFile},
	}
	e.h.Ignore = func(c cowfs.Change) bool { return strings.HasPrefix(c.Path, "node_modules/") }
	changes, ignored, err := e.ck.DiffCounted(ctx, e.rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, c := range changes {
		paths = append(paths, c.Path)
	}
	if !slices.Equal(paths, []string{"a.txt", "index.html"}) || ignored != 1 {
		t.Errorf("DiffCounted = %q, %d ignored; want a.txt and index.html, 1 ignored", paths, ignored)
	}
	if plain, err := e.ck.Diff(ctx, e.rec.ID); err != nil || len(plain) != 2 {
		t.Errorf("Diff = %+v, %v", plain, err)
	}
	if vols := e.pool.names(); len(vols) != 3 {
		t.Errorf("volumes after a diff: %v; want the sandbox's three", vols)
	}
	if _, _, err := e.ck.DiffCounted(ctx, "000000000000"); !errors.Is(err, supervisor.ErrNotFound) {
		t.Errorf("the diff of no sandbox: %v; want ErrNotFound", err)
	}
}

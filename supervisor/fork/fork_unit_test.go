package fork_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/cowfsfake"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/fork"
	"github.com/sandboxd/sandboxd/supervisor/hosttest"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
	"github.com/sandboxd/sandboxd/units"
	"github.com/sandboxd/sandboxd/units/unitsfake"
)

// fakeHost is hosttest's Host with CreateFork: a record of the source's
// owner and a writable copy of the source's snapshot, as the core makes;
// failAt makes the Nth fork (1-based) fail.
type fakeHost struct {
	*hosttest.Host
	pool   *cowfsfake.Backend
	units  *unitsfake.Manager
	ids    int
	failAt int
	srcs   []supervisor.ForkSource
	held   []unitsfake.Call // the units' calls once a source was held
	// beforeHold runs before the source is held.
	beforeHold func()
}

func (f *fakeHost) CreateFork(ctx context.Context, src supervisor.ForkSource, name string) (supervisor.Sandbox, error) {
	f.ids++
	if f.ids == f.failAt {
		return supervisor.Sandbox{}, fmt.Errorf("a sandbox of uid %d: %w", src.Record.Owner, supervisor.ErrLimitReached)
	}
	f.srcs = append(f.srcs, src)
	id := fmt.Sprintf("f%011d", f.ids)
	if f.beforeHold != nil {
		f.beforeHold()
	}
	if src.Hold != nil { // the source's own volume, held for the snapshot
		release, err := src.Hold(ctx)
		if err != nil {
			return supervisor.Sandbox{}, err
		}
		defer func() { _ = release() }()
		f.held = append(f.held, f.units.Calls()...)
	}
	vol, err := f.pool.Snapshot(ctx, src.Volume, "sb-"+id, false)
	if err != nil {
		return supervisor.Sandbox{}, err
	}
	rec := state.Record{ID: id, Name: name, Owner: src.Record.Owner, Project: src.Record.Project, Volume: vol.Name, State: state.Ready}
	if err := f.S.Create(rec); err != nil {
		return supervisor.Sandbox{}, err
	}
	return supervisor.Sandbox{Record: rec, Path: vol.Path}, nil
}

func (f *fakeHost) Destroy(ctx context.Context, id string) error {
	rec, err := f.S.Get(id)
	if err != nil {
		return err
	}
	if err := volname.Delete(ctx, f.pool, rec.Volume); err != nil {
		return err
	}
	return f.Host.Destroy(ctx, id)
}

// newUnit is the room over a fakeHost with one sandbox, "src" (id
// s00000000001, uid 1000's), running, whose copy holds a.txt.
func newUnit(t *testing.T) (*fork.Forks, *fakeHost) {
	t.Helper()
	ctx := context.Background()
	pool, err := cowfsfake.Open(ctx, filepath.Join(t.TempDir(), "root"))
	if err != nil {
		t.Fatal(err)
	}
	vol, err := pool.Create(ctx, "sb-s00000000001")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol.Path, "a.txt"), []byte("set up\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vols, _ := pool.List(context.Background())
		for _, v := range vols {
			_ = pool.Delete(context.Background(), v)
		}
	})
	u := unitsfake.New()
	if err := u.StartScope(ctx, units.Scope{Name: "sandbox-s00000000001.scope", PIDs: []int{4242}}); err != nil {
		t.Fatal(err)
	}
	f := &fakeHost{Host: hosttest.New(t, pool, u), pool: pool, units: u}
	f.AddSandbox(t, state.Record{ID: "s00000000001", Name: "src", Owner: 1000, Project: "web", Volume: vol.Name, Unit: "sandbox-s00000000001.scope"})
	if err := f.Start(ctx, "s00000000001", 4242, false); err != nil {
		t.Fatal(err)
	}
	return fork.New(f, fork.Config{}), f
}

func as(uid uint32) context.Context {
	return supervisor.WithCaller(context.Background(), uid)
}

// volumes is the names of the pool's volumes.
func volumes(t *testing.T, f *fakeHost) []string {
	t.Helper()
	vols, err := f.pool.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range vols {
		out = append(out, v.Name)
	}
	return out
}

func TestUnitForkCopiesTheFilesAndDropsItsSnapshots(t *testing.T) {
	fk, f := newUnit(t)
	res, err := fk.Fork(as(1000), "s00000000001", fork.Options{Count: 3, Names: []string{"one", "", "three"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sandboxes) != 3 || res.Sandboxes[0].Record.Name != "one" || res.Sandboxes[2].Record.Name != "three" {
		t.Fatalf("forks %+v: want 3, named one, \"\", three", res.Sandboxes)
	}
	for _, sb := range res.Sandboxes {
		if b, err := os.ReadFile(filepath.Join(sb.Path, "a.txt")); err != nil || string(b) != "set up\n" {
			t.Errorf("fork %s's a.txt: %q, %v; want the source's", sb.Record.ID, b, err)
		}
	}
	// A write in one is its own.
	if err := os.WriteFile(filepath.Join(res.Sandboxes[0].Path, "a.txt"), []byte("one's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(res.Sandboxes[1].Path, "a.txt")); string(b) != "set up\n" {
		t.Errorf("fork 2's a.txt after a write in fork 1: %q", b)
	}
	for _, v := range volumes(t, f) {
		if strings.HasPrefix(v, "ck-") {
			t.Errorf("the fork's snapshot %s was left on the pool", v)
		}
	}
	var froze, thawed bool
	for _, c := range f.units.Calls() {
		froze = froze || c.Method == "Freeze"
		thawed = thawed || c.Method == "Thaw"
	}
	if !froze || !thawed {
		t.Errorf("the running source was not frozen and thawed for the snapshots: %+v", f.units.Calls())
	}
	if !strings.HasPrefix(f.srcs[0].Volume.Name, "ck-s00000000001-.fork-") {
		t.Errorf("the snapshot is %s: want an unrecorded checkpoint of the source, which Reconcile removes", f.srcs[0].Volume.Name)
	}
}

// A single fork snapshots its source's own volume, frozen for it: no
// temporary snapshot; the source is thawed and unlocked after.
func TestUnitSingleForkSnapshotsTheSourceHeld(t *testing.T) {
	fk, f := newUnit(t)
	res, err := fk.Fork(as(1000), "s00000000001", fork.Options{})
	if err != nil || len(res.Sandboxes) != 1 {
		t.Fatalf("a single fork: %+v, %v", res, err)
	}
	if b, err := os.ReadFile(filepath.Join(res.Sandboxes[0].Path, "a.txt")); err != nil || string(b) != "set up\n" {
		t.Errorf("the fork's a.txt: %q, %v; want the source's", b, err)
	}
	if v := f.srcs[0].Volume.Name; v != "sb-s00000000001" {
		t.Errorf("the fork was made of %s: want the source's own volume", v)
	}
	if n := len(f.held); n == 0 || f.held[n-1].Method != "Freeze" {
		t.Errorf("the source was not frozen when its volume was snapshotted: %+v", f.held)
	}
	if calls := f.units.Calls(); calls[len(calls)-1].Method != "Thaw" {
		t.Errorf("the source was not thawed after: %+v", calls)
	}
	if vols := volumes(t, f); len(vols) != 2 {
		t.Errorf("the pool holds %v: want the source's volume and the fork's", vols)
	}
	f.Lock("s00000000001")() // not left locked
}

// A source destroyed between the fork's check and its snapshot fails the
// fork, naming it.
func TestUnitSingleForkOfASourceGoneMeanwhile(t *testing.T) {
	fk, f := newUnit(t)
	f.beforeHold = func() {
		if err := f.Host.Destroy(context.Background(), "s00000000001"); err != nil {
			t.Fatal(err)
		}
	}
	_, err := fk.Fork(as(1000), "s00000000001", fork.Options{})
	if !errors.Is(err, supervisor.ErrNotFound) || !strings.Contains(err.Error(), "forking sandbox s00000000001") {
		t.Fatalf("a fork of a source destroyed meanwhile: %v; want not found, naming it", err)
	}
}

func TestUnitForkRefusesBadInput(t *testing.T) {
	fk, f := newUnit(t)
	for _, c := range []struct {
		ctx   context.Context
		o     fork.Options
		words string
		is    error
	}{
		{as(1000), fork.Options{Count: 17}, "count 17: make 1 to 16 forks", supervisor.ErrInvalid},
		{as(1000), fork.Options{Count: -1}, "count -1", supervisor.ErrInvalid},
		{as(1000), fork.Options{Count: 1, Names: []string{"a", "b"}}, "2 names for 1 forks", supervisor.ErrInvalid},
		{as(1000), fork.Options{Count: 2, Names: []string{"a", "a"}}, `name "a" is given twice`, supervisor.ErrInvalid},
		{as(1000), fork.Options{Names: []string{"bad name/"}}, `name "bad name/"`, supervisor.ErrInvalid},
		{as(1000), fork.Options{Spawn: [][]string{{}}}, "has no command", supervisor.ErrInvalid},
		{as(1000), fork.Options{Spawn: [][]string{{strings.Repeat("x", 20000)}}}, "at most 256 and 16384", supervisor.ErrInvalid},
		{as(1001), fork.Options{}, "it is uid 1000's; only its owner, root or an admin may fork it", supervisor.ErrAccessDenied},
	} {
		_, err := fk.Fork(c.ctx, "s00000000001", c.o)
		if !errors.Is(err, c.is) || err == nil || !strings.Contains(err.Error(), c.words) {
			t.Errorf("Fork(%+v): %v; want %v saying %q", c.o, err, c.is, c.words)
		}
	}
	if n := len(volumes(t, f)); n != 1 {
		t.Errorf("the pool holds %v after refusals: want the source's volume alone", volumes(t, f))
	}
	if _, err := fk.Fork(as(0), "s00000000001", fork.Options{}); err != nil {
		t.Errorf("root's fork of uid 1000's sandbox: %v", err)
	}
}

func TestUnitForkUndoneWhenOneFails(t *testing.T) {
	fk, f := newUnit(t)
	f.failAt = 3
	_, err := fk.Fork(as(1000), "s00000000001", fork.Options{Count: 3})
	if !errors.Is(err, supervisor.ErrLimitReached) || !strings.Contains(err.Error(), "fork 3 of 3") || !strings.Contains(err.Error(), "the 2 fork(s) made were destroyed") {
		t.Fatalf("Fork with the third refused: %v", err)
	}
	recs, _ := f.S.List()
	if len(recs) != 1 {
		t.Errorf("records after the undo: %+v; want the source alone", recs)
	}
	if vols := volumes(t, f); len(vols) != 1 {
		t.Errorf("the pool holds %v after the undo: want the source's volume alone", vols)
	}
}

func TestUnitForkOfAStoppedSandbox(t *testing.T) {
	fk, f := newUnit(t)
	f.Stop("s00000000001")
	if _, err := f.S.Update("s00000000001", func(r *state.Record) error { r.State = state.Stopped; return nil }); err != nil {
		t.Fatal(err)
	}
	before := len(f.units.Calls())
	res, err := fk.Fork(as(1000), "s00000000001", fork.Options{})
	if err != nil || len(res.Sandboxes) != 1 {
		t.Fatalf("fork of a stopped sandbox: %+v, %v", res, err)
	}
	if calls := f.units.Calls()[before:]; len(calls) != 0 {
		t.Errorf("a stopped sandbox was frozen for its fork: %+v", calls)
	}
}

// zfsPool is a pool that says it is ZFS.
type zfsPool struct{ *cowfsfake.Backend }

func (p zfsPool) Info() cowfs.Info {
	i := p.Backend.Info()
	i.Backend = "zfs"
	return i
}

// On ZFS a fork is made as on btrfs (cowfs/zfs keeps what the forks'
// clones need when their source goes).
func TestUnitForkOnZFSMakesTheForks(t *testing.T) {
	_, f := newUnit(t)
	f.Host.B = zfsPool{f.pool}
	fk := fork.New(f, fork.Config{})
	res, err := fk.Fork(as(1000), "s00000000001", fork.Options{Count: 2})
	if err != nil || len(res.Sandboxes) != 2 {
		t.Fatalf("Fork on a ZFS pool: %+v, %v; want 2 forks", res.Sandboxes, err)
	}
}

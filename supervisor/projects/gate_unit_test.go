package projects

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/cowfstest"
)

// The project gate without root, over the fake pool: one promotion of a
// project at a time, and the snapshot a create takes while a stage is
// under way.

func TestUnitGateClaim(t *testing.T) {
	f := newFixture(t, Config{})
	g := f.reg.Gate()
	if other, ok := g.Claim("web", "p1"); !ok || other != "" {
		t.Fatalf("the first Claim = %q, %v; want it granted", other, ok)
	}
	if other, ok := g.Claim("web", "p2"); ok || other != "p1" {
		t.Fatalf("a second Claim = %q, %v; want it refused, naming p1", other, ok)
	}
	if _, ok := g.Claim("data", "p2"); !ok {
		t.Fatal("a Claim of another project was refused")
	}
	g.Release("web")
	if _, ok := g.Claim("web", "p2"); !ok {
		t.Fatal("a Claim after Release was refused")
	}
}

// gateProject makes project web in the fake pool, holding file v with
// "before", and its rollback point rp; then writes "after" to v in the
// project, as a stage's apply does.
func gateProject(t *testing.T, f *fixture) (project, rp cowfs.Volume) {
	t.Helper()
	ctx := context.Background()
	project, err := f.pool.MakeProject(ctx, filepath.Join(f.dir, "web"))
	if err != nil {
		t.Fatal(err)
	}
	// The snapshots are read-only: deleted through the pool, so that
	// a test without root can remove its temporary directory.
	t.Cleanup(func() { _ = cowfstest.DeleteAll(context.Background(), f.pool) })
	if err := os.WriteFile(filepath.Join(project.Path, "v"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	rp, err = f.pool.Snapshot(ctx, project, "rp", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project.Path, "v"), []byte("after"), 0o644); err != nil {
		t.Fatal(err)
	}
	return project, rp
}

func readV(t *testing.T, v cowfs.Volume) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(v.Path, "v"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// While a stage is under way a create's base is a snapshot of the
// stage's rollback point, the project as it was before the apply; once
// settled (more than once: the same), of the project itself again.
func TestUnitGateStagedSnapshotIsRollbackPoint(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{})
	project, rp := gateProject(t, f)
	settle := f.reg.Gate().Stage("web", rp)
	b1, err := f.reg.SnapshotBase(ctx, "web", project, "b1")
	if err != nil {
		t.Fatal(err)
	}
	if got := readV(t, b1); got != "before" || !b1.ReadOnly() {
		t.Fatalf("the base while staged holds %q (read-only %v); want the rollback point's %q, read-only", got, b1.ReadOnly(), "before")
	}
	settle()
	settle()
	b2, err := f.reg.SnapshotBase(ctx, "web", project, "b2")
	if err != nil {
		t.Fatal(err)
	}
	if got := readV(t, b2); got != "after" {
		t.Fatalf("the base once settled holds %q; want the project's %q", got, "after")
	}
}

// A pool that cannot snapshot a read-only snapshot (ZFS) makes a create
// wait for the stage's end, then take the project; or for its ctx's.
func TestUnitGateUnsupportedWaitsForSettleOrCtx(t *testing.T) {
	f := newFixture(t, Config{})
	project, rp := gateProject(t, f)
	var staged atomic.Bool
	f.pool.SetHook(func(method, name string) error {
		if method == "Snapshot" && staged.Load() {
			return fmt.Errorf("a snapshot of a snapshot: %w", cowfs.ErrUnsupported)
		}
		return nil
	})
	staged.Store(true)
	settle := f.reg.Gate().Stage("web", rp)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := f.reg.SnapshotBase(ctx, "web", project, "b0"); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for the promotion's stage of project web to end") {
		t.Fatalf("SnapshotBase until ctx's end = %v; want it waited, then the ctx's cause", err)
	}

	type result struct {
		v   cowfs.Volume
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f.reg.SnapshotBase(context.Background(), "web", project, "b1")
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("SnapshotBase returned (%v) before the stage settled", r.err)
	case <-time.After(100 * time.Millisecond):
	}
	staged.Store(false)
	settle()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if got := readV(t, r.v); got != "after" {
			t.Fatalf("the base after the wait holds %q; want the project's %q", got, "after")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SnapshotBase still waits after the stage settled")
	}
}

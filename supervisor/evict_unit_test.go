package supervisor_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/cowfs/cowfsfake"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units/unitsfake"
)

// A create that makes room (limits.destroy_oldest) marks the oldest
// destroying under the admission lock and destroys it once it left the
// lock: while the old one's scope takes its time to stop, the admission
// lock is free for everyone else. Only the seams' fakes: no pool, no
// systemd, no init (the create itself fails at its launch, after).
func TestUnitAnEvictionDestroysOutsideTheAdmissionLock(t *testing.T) {
	dir := t.TempDir()
	store, err := state.Open(filepath.Join(dir, "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	fs, err := cowfsfake.Open(ctx, filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	project := filepath.Join(dir, "web")
	if _, err := fs.MakeProject(ctx, project); err != nil {
		t.Fatal(err)
	}
	um := unitsfake.New()
	stopping, release := make(chan struct{}), make(chan struct{})
	um.SetHook(func(method, name string) error {
		if method == "Stop" {
			close(stopping)
			<-release
		}
		return nil
	})
	const old = "0123456789ab"
	if err := store.Create(state.Record{ID: old, Project: "web", State: state.Ready, Owner: 1000,
		Base: "base-" + old, Volume: "sb-" + old, Unit: "sandbox-" + old + ".scope", Created: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	sup := supervisor.New(supervisor.Config{Units: um, Store: store, Backend: fs, RuntimeDir: filepath.Join(dir, "run"),
		Projects: map[string]string{"web": project}, Policy: supervisor.Policy{MaxPerOwner: 1, DestroyOldest: true}})
	created := make(chan error, 1)
	go func() {
		_, err := sup.Create(supervisor.WithIdentity(ctx, supervisor.Identity{UID: 1000, Admin: true}),
			supervisor.CreateOptions{Project: "web", Owner: 1000})
		created <- err
	}()
	select {
	case <-stopping:
	case err := <-created:
		t.Fatalf("the create ended (%v) before it stopped the oldest sandbox's scope", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the create did not stop the oldest sandbox's scope within 10s")
	}
	if rec, err := store.Get(old); err != nil || rec.State != state.Destroying {
		t.Errorf("the oldest sandbox while its scope stops: %+v, %v; want destroying", rec, err)
	}
	admitted := make(chan struct{})
	go func() {
		_ = sup.Host().(interface{ WithAdmission(func() error) error }).WithAdmission(func() error { return nil })
		close(admitted)
	}()
	select {
	case <-admitted:
	case <-time.After(5 * time.Second):
		t.Error("the admission lock was held while the evicted sandbox's scope stopped")
	}
	close(release)
	select {
	case <-created:
	case <-time.After(10 * time.Second):
		t.Fatal("the create did not end within 10s of the scope's stop")
	}
	<-admitted
	if _, err := store.Get(old); !errors.Is(err, state.ErrNotFound) {
		t.Errorf("the oldest sandbox after the create: %v; want it gone", err)
	}
}

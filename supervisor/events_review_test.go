package supervisor_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/units/unitsfake"
)

// A destroy that fails half way leaves the sandbox destroying: a state
// change the front door must hear of. Before the change event, the API
// re-listed after a failed create (an eviction that failed) and after Try
// (its destroys); with nothing re-listing, the core must announce it.
// Only the seams' fakes: no pool, no systemd, no init.
func TestUnitADestroyThatFailsIsAnnounced(t *testing.T) {
	store, err := state.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	um := unitsfake.New()
	um.Fail("Stop", "", errors.New("the scope would not stop"))
	sup := supervisor.New(supervisor.Config{Units: um, Store: store, RuntimeDir: t.TempDir()})
	const id = "0123456789ab"
	if err := store.Create(state.Record{ID: id, Project: "web", State: state.Ready, Owner: 1000,
		Base: "base-" + id, Volume: "sb-" + id, Unit: "sandbox-" + id + ".scope", Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	sub := sup.Subscribe()
	defer sup.Unsubscribe(sub)

	if err := sup.Destroy(ctx, id); err == nil {
		t.Fatal("Destroy with a scope that would not stop: no error")
	}
	if rec, err := store.Get(id); err != nil || rec.State != state.Destroying {
		t.Fatalf("the record after a failed destroy: %+v, %v; want destroying", rec, err)
	}
	if got := sub.Take(); !slices.Contains(got, id) {
		t.Errorf("the change event after a failed destroy: %v; want %s (now destroying)", got, id)
	}
}

package adopt

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Issue 30: every check of authority takes an actor, and a call that
// carries none is refused (supervisor.ErrNoActor), never taken for the
// daemon's or an admin's. The room's Release (an admin's: any adoption)
// and Adopt with no Caller (an admin's: any owner's directory) read no
// actor at all: a ctx that names no one passes as an admin.
func TestUnitAdoptionsRefuseACallThatNamesNoOne(t *testing.T) {
	s, h := unitRoom(t, t.TempDir())
	adopter := uint32(1001)
	web := state.Project{Name: "web", Location: "/p/web",
		Adoption: &state.Adoption{Path: "/nonexistent/web", How: state.AdoptMount, Phase: state.AdoptDone, Owner: &adopter}}
	if err := h.Store().AddProject(web); err != nil {
		t.Fatal(err)
	}
	h.LoadProject(web)

	if err := s.Release(context.Background(), "web"); !errors.Is(err, supervisor.ErrNoActor) {
		t.Errorf("Release with no actor: %v; want refused with ErrNoActor before anything is looked at", err)
	}
	if err := s.Adopt(context.Background(), "other", "/nonexistent/other", Options{}); !errors.Is(err, supervisor.ErrNoActor) {
		t.Errorf("Adopt with no actor and no Caller: %v; want refused with ErrNoActor", err)
	}
}

package hosttest

import (
	"context"
	"errors"
	"testing"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// The fake calls the hooks a room adds as the core does, in order.
func TestHostCallsTheHooksAsTheCoreDoes(t *testing.T) {
	h := New(t, nil, nil)
	var got []string
	h.Hooks().Started.Add(func(_ context.Context, st supervisor.Started) { got = append(got, "started "+st.Record.ID) })
	h.Hooks().Stopped.Add(func(id string) { got = append(got, "stopped "+id) })
	h.Hooks().Destroying.Add(func(_ context.Context, rec state.Record) { got = append(got, "destroying "+rec.ID) })
	h.Hooks().Destroyed.Add(func(_ context.Context, rec state.Record) { got = append(got, "destroyed "+rec.ID) })
	h.Hooks().Busy.Add(func(_ context.Context, id string) bool { return id == "aaaaaaaaaaaa" })
	h.AddSandbox(t, state.Record{ID: "aaaaaaaaaaaa", Project: "web"})
	ctx := context.Background()
	if err := h.Start(ctx, "aaaaaaaaaaaa", 42, false); err != nil {
		t.Fatal(err)
	}
	if pid, ok := h.InitPID("aaaaaaaaaaaa"); !ok || pid != 42 {
		t.Fatalf("InitPID = %d %v", pid, ok)
	}
	if !h.Busy(ctx, "aaaaaaaaaaaa") || h.Busy(ctx, "bbbbbbbbbbbb") {
		t.Fatal("Busy did not ask the hooks")
	}
	if err := h.Destroy(ctx, "aaaaaaaaaaaa"); err != nil {
		t.Fatal(err)
	}
	want := []string{"started aaaaaaaaaaaa", "stopped aaaaaaaaaaaa", "destroying aaaaaaaaaaaa", "destroyed aaaaaaaaaaaa"}
	if len(got) != len(want) {
		t.Fatalf("hooks called %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("hooks called %q, want %q", got, want)
		}
	}
	if _, err := h.Sandbox(ctx, "aaaaaaaaaaaa"); !errors.Is(err, supervisor.ErrNotFound) {
		t.Fatalf("a destroyed sandbox: %v, want ErrNotFound", err)
	}
}

// A call with no actor is refused, as by the core.
func TestHostRefusesACallWithoutAnActor(t *testing.T) {
	h := New(t, nil, nil)
	if err := h.MayUseProject(context.Background(), supervisor.Actor{}, "web"); !errors.Is(err, supervisor.ErrNoActor) {
		t.Fatalf("MayUseProject with no actor = %v, want ErrNoActor", err)
	}
	if err := h.MayUseProject(context.Background(), supervisor.Daemon("test"), "web"); err != nil {
		t.Fatalf("the daemon's own call: %v", err)
	}
	if err := h.MayUseProject(context.Background(), supervisor.Caller(supervisor.Identity{UID: 1000}), "web"); !errors.Is(err, supervisor.ErrAccessDenied) {
		t.Fatalf("a member's call: %v, want ErrAccessDenied", err)
	}
}

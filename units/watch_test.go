package units_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

// nextEvent waits for the first event that satisfies want, failing the test
// after 30s or when the channel closes.
func nextEvent(t *testing.T, events <-chan units.Event, want func(units.Event) bool) units.Event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	var seen []units.Event
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("the watch ended; events before: %+v", seen)
			}
			if want(e) {
				return e
			}
			seen = append(seen, e)
		case <-deadline:
			t.Fatalf("no such event in 30s; events: %+v", seen)
		}
	}
}

func TestWatchReportsAScopeGoingAwayWhenItsLastProcessEnds(t *testing.T) {
	t.Parallel()
	m := connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const before, after = "units-test-watch-before.scope", "units-test-watch-after.scope"

	// One scope exists before the watch starts, one comes after.
	catBefore := start(t, "cat")
	startScope(t, m, units.Scope{Name: before, PIDs: []int{catBefore.pid()}})
	events, err := m.Watch(ctx, "units-test-watch-*.scope")
	if err != nil {
		t.Fatal(err)
	}
	nextEvent(t, events, func(e units.Event) bool {
		return e.Unit == before && e.ActiveState == "active" && e.SubState == "running"
	})
	catAfter := start(t, "cat")
	startScope(t, m, units.Scope{Name: after, PIDs: []int{catAfter.pid()}})
	e := nextEvent(t, events, func(e units.Event) bool { return e.Unit == after })
	if e.ActiveState != "active" || e.SubState != "running" || e.Gone {
		t.Errorf("first event of a new scope: %+v; want it active and running", e)
	}

	// cat ends at the end of its input: each scope's last process ends.
	for _, c := range []struct {
		name string
		cat  *proc
	}{{after, catAfter}, {before, catBefore}} {
		c.cat.stdin.Close()
		if err := c.cat.wait(t, 10*time.Second); err != nil {
			t.Fatalf("cat: %v", err)
		}
		e := nextEvent(t, events, func(e units.Event) bool { return e.Unit == c.name && e.Gone })
		if e.Result != "" && e.Result != "success" {
			t.Errorf("%s went with result %q; want success", c.name, e.Result)
		}
	}

	cancel()
	for range events {
	}
}

func TestWatchIgnoresOtherUnitsAndLookups(t *testing.T) {
	t.Parallel()
	m := connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := m.Watch(ctx, "units-test-only-*.scope")
	if err != nil {
		t.Fatal(err)
	}
	// A lookup of a unit that does not exist makes systemd load and drop
	// it: no event. Another unit's life: no event.
	if _, err := m.Usage(ctx, "units-test-only-absent.scope"); err == nil {
		t.Fatal("Usage of a unit that does not exist succeeded")
	}
	other := start(t, "cat")
	startScope(t, m, units.Scope{Name: "units-test-notonly.scope", PIDs: []int{other.pid()}})
	// Then the unit watched: its event must be the first.
	p := start(t, "cat")
	startScope(t, m, units.Scope{Name: "units-test-only-1.scope", PIDs: []int{p.pid()}})
	select {
	case e := <-events:
		if e.Unit != "units-test-only-1.scope" || e.ActiveState != "active" {
			t.Fatalf("first event %+v; want units-test-only-1.scope active", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event in 30s for the watched scope")
	}
}

package calls

import (
	"context"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Four callers' calls parked (Trys whose sandboxes run their checks) keep
// their callers' places but give the places among all back: a fifth
// caller is admitted at once, a parked call's busy piece takes its place
// back once one frees, and each caller's own bound still holds.
func TestParkedHeavyCallsLeaveTheirPlacesToOthers(t *testing.T) {
	h := NewLimiter()
	h.wait = 200 * time.Millisecond
	ctx := context.Background()
	var slots []*Slot
	for uid := uint32(1); uid <= 4; uid++ {
		for range MaxHeavyCallsPerCaller {
			sl, derr := h.Acquire(ctx, sandboxd1.MethodTry, uid)
			if derr != nil {
				t.Fatalf("Try %d of uid %d: %v", len(slots), uid, derr)
			}
			slots = append(slots, sl)
		}
	}
	// The control: unparked, they hold every place.
	if _, derr := h.Acquire(ctx, sandboxd1.MethodDiff, 5); derr == nil {
		t.Fatal("a fifth caller's Diff was admitted while 16 unparked calls ran")
	}
	for _, sl := range slots {
		done, err := sl.Busy(ctx) // a create
		if err != nil {
			t.Fatal(err)
		}
		done() // parks
	}
	fifth, derr := h.Acquire(ctx, sandboxd1.MethodDiff, 5)
	if derr != nil {
		t.Fatalf("a fifth caller's Diff while the 16 Trys are parked: %v", derr)
	}
	if _, derr := h.Acquire(ctx, sandboxd1.MethodDiff, 1); derr == nil {
		t.Error("uid 1's fifth heavy call was admitted: a parked call must keep its caller's place")
	}
	// Parked calls take a place back for their diffs, waiting for one.
	for _, sl := range slots[1:MaxHeavyCalls] {
		done, err := sl.Busy(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer done()
	}
	waited := make(chan error, 1)
	go func() {
		done, err := slots[0].Busy(ctx)
		if err == nil {
			done()
		}
		waited <- err
	}()
	select {
	case err := <-waited:
		t.Fatalf("a parked call took a place while all %d were held: %v", MaxHeavyCalls, err)
	case <-time.After(2 * h.wait):
	}
	fifth.Release()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	for _, sl := range slots {
		sl.Release()
		sl.Release()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.all != 0 || h.parked != 0 || len(h.byUID) != 0 {
		t.Errorf("after every release: all %d, parked %d, by uid %v", h.all, h.parked, h.byUID)
	}
}

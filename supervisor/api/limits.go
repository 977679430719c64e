package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Calls that hold much memory (a unified diff is built whole before it is
// sent), take snapshots or run commands: a caller may run only a few at
// once, and everyone together a few more, so that one member of the group
// cannot make the root daemon hold gigabytes or starve the others. Which
// calls are heavy is said in actions (actions.go).
const (
	MaxHeavyCallsPerCaller = 4
	MaxHeavyCalls          = 16
)

// HeavyCallWait is how long a heavy call waits for a slot before it is
// refused: a burst (an agent diffing its eight sandboxes at once) is
// served in turn, and only a caller that keeps the slots full is told no.
const HeavyCallWait = 10 * time.Second

// MaxParkedCalls bounds the heavy calls parked at once, over all users:
// a parked call (a Try whose sandboxes run their variants and checks)
// keeps its place among its caller's MaxHeavyCallsPerCaller but gives its
// place among the MaxHeavyCalls back, since it only waits on processes
// that the sandboxes' own limits and the call's timeout bound. Past this
// many, a call stays unparked and holds its place (what it keeps while
// it waits, the steps' output, is then bounded by MaxHeavyCalls).
const MaxParkedCalls = 64

// heavyCalls counts the heavy calls running, per caller and in all.
type heavyCalls struct {
	perCaller, total, maxParked int
	wait                        time.Duration

	mu     sync.Mutex
	byUID  map[uint32]int
	all    int // the calls that are not parked
	parked int
	freed  chan struct{} // closed, and made anew, when a slot frees
}

func newHeavyCalls() *heavyCalls {
	return &heavyCalls{perCaller: MaxHeavyCallsPerCaller, total: MaxHeavyCalls, maxParked: MaxParkedCalls, wait: HeavyCallWait,
		byUID: map[uint32]int{}, freed: make(chan struct{})}
}

// heavySlot is one heavy call's place among its caller's and among all
// the heavy calls. A nil *heavySlot is a call that takes none.
type heavySlot struct {
	h   *heavyCalls
	uid uint32

	mu       sync.Mutex // held while its place among all is taken back
	users    int        // busy sections under way (see busy)
	parked   bool
	released bool
}

// acquire admits a call of action by uid once a slot is free, or refuses
// it with LimitReached when none frees within h.wait (or ctx ends); the
// slot's release ends what acquire admitted.
func (h *heavyCalls) acquire(ctx context.Context, action string, uid uint32) (*heavySlot, *dbus.Error) {
	if h == nil || !heavy(action) {
		return nil, nil
	}
	timer := time.NewTimer(h.wait)
	defer timer.Stop()
	h.mu.Lock()
	for h.byUID[uid] >= h.perCaller || h.all >= h.total {
		freed := h.freed
		byUID, all := h.byUID[uid], h.all
		h.mu.Unlock()
		select {
		case <-freed:
		case <-timer.C:
			if byUID >= h.perCaller {
				return nil, dbusError(sandboxd1.ErrorLimitReached,
					"%s: too many concurrent calls: uid %d already runs %d of %s (at most %d at once), and none ended within %v; retry when one ends",
					action, uid, byUID, heavyNames(), h.perCaller, h.wait)
			}
			return nil, dbusError(sandboxd1.ErrorLimitReached,
				"%s: too many concurrent calls: %d heavy calls run for all users (at most %d at once), and none ended within %v; retry when one ends",
				action, all, h.total, h.wait)
		case <-ctx.Done():
			return nil, dbusError(sandboxd1.ErrorLimitReached, "%s: the daemon is stopping", action)
		}
		h.mu.Lock()
	}
	h.byUID[uid]++
	h.all++
	h.mu.Unlock()
	return &heavySlot{h: h, uid: uid}, nil
}

// freeLocked wakes the calls waiting for a slot; h.mu is held.
func (h *heavyCalls) freeLocked() {
	close(h.freed)
	h.freed = make(chan struct{})
}

// release ends the call's hold. It may be called more than once.
func (sl *heavySlot) release() {
	if sl == nil {
		return
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.released {
		return
	}
	sl.released = true
	h := sl.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl.parked {
		h.parked--
	} else {
		h.all--
	}
	if h.byUID[sl.uid]--; h.byUID[sl.uid] <= 0 {
		delete(h.byUID, sl.uid)
	}
	h.freeLocked()
}

// parkLocked gives the call's place among all the heavy calls back while
// it only waits on sandboxes' processes, keeping its caller's; it stays
// if MaxParkedCalls are parked already. sl.mu is held.
func (sl *heavySlot) parkLocked() {
	if sl.parked || sl.released || sl.users > 0 {
		return
	}
	h := sl.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.parked >= h.maxParked {
		return
	}
	h.all--
	h.parked++
	sl.parked = true
	h.freeLocked()
}

// busy takes the call's place among all the heavy calls back, if it was
// parked, for a piece of heavy work (a create, a diff), and returns what
// ends that piece: the last piece to end parks the call again. A parked
// call waits for its place without a time limit: every call that holds
// one now holds it for such a piece only, so one frees; the wait ends
// with ctx (the caller left, the daemon stops).
func (sl *heavySlot) busy(ctx context.Context) (done func(), err error) {
	if sl == nil {
		return func() {}, nil
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.parked {
		h := sl.h
		h.mu.Lock()
		for h.all >= h.total {
			freed := h.freed
			h.mu.Unlock()
			select {
			case <-freed:
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting for one of the %d heavy-call slots: %w", h.total, context.Cause(ctx))
			}
			h.mu.Lock()
		}
		h.all++
		h.parked--
		sl.parked = false
		h.mu.Unlock()
	}
	sl.users++
	var once sync.Once
	return func() {
		once.Do(func() {
			sl.mu.Lock()
			defer sl.mu.Unlock()
			sl.users--
			sl.parkLocked()
		})
	}, nil
}

package calls

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

// Limiter counts the heavy calls running, per caller and in all.
type Limiter struct {
	perCaller, total, maxParked int
	wait                        time.Duration

	mu     sync.Mutex
	byUID  map[uint32]int
	all    int // the calls that are not parked
	parked int
	freed  chan struct{} // closed, and made anew, when a slot frees
}

func NewLimiter() *Limiter {
	return &Limiter{perCaller: MaxHeavyCallsPerCaller, total: MaxHeavyCalls, maxParked: MaxParkedCalls, wait: HeavyCallWait,
		byUID: map[uint32]int{}, freed: make(chan struct{})}
}

// Slot is one heavy call's place among its caller's and among all
// the heavy calls. A nil *Slot is a call that takes none.
type Slot struct {
	h   *Limiter
	uid uint32

	mu       sync.Mutex // held while its place among all is taken back
	users    int        // busy sections under way (see Busy)
	parked   bool
	released bool
}

// Acquire admits a call of action by uid once a slot is free, or refuses
// it with LimitReached when none frees within h.wait (or ctx ends); the
// slot's Release ends what Acquire admitted.
func (h *Limiter) Acquire(ctx context.Context, action string, uid uint32) (*Slot, *dbus.Error) {
	if h == nil || !Heavy(action) {
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
				return nil, limitReached(
					"%s: too many concurrent calls: uid %d already runs %d of %s (at most %d at once), and none ended within %v; retry when one ends",
					action, uid, byUID, HeavyNames(), h.perCaller, h.wait)
			}
			return nil, limitReached(
				"%s: too many concurrent calls: %d heavy calls run for all users (at most %d at once), and none ended within %v; retry when one ends",
				action, all, h.total, h.wait)
		case <-ctx.Done():
			return nil, limitReached("%s: the daemon is stopping", action)
		}
		h.mu.Lock()
	}
	h.byUID[uid]++
	h.all++
	h.mu.Unlock()
	return &Slot{h: h, uid: uid}, nil
}

// limitReached is the refusal of a heavy call that found no slot.
func limitReached(format string, args ...any) *dbus.Error {
	return dbus.NewError(sandboxd1.ErrorLimitReached, []any{fmt.Sprintf(format, args...)})
}

// freeLocked wakes the calls waiting for a slot; h.mu is held.
func (h *Limiter) freeLocked() {
	close(h.freed)
	h.freed = make(chan struct{})
}

// Release ends the call's hold. It may be called more than once.
func (sl *Slot) Release() {
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
func (sl *Slot) parkLocked() {
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

// Busy takes the call's place among all the heavy calls back, if it was
// parked, for a piece of heavy work (a create, a diff), and returns what
// ends that piece: the last piece to end parks the call again. A parked
// call waits for its place without a time limit: every call that holds
// one now holds it for such a piece only, so one frees; the wait ends
// with ctx (the caller left, the daemon stops).
func (sl *Slot) Busy(ctx context.Context) (done func(), err error) {
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

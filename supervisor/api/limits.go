package api

import (
	"context"
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

// heavyCalls counts the heavy calls running, per caller and in all.
type heavyCalls struct {
	perCaller, total int
	wait             time.Duration

	mu    sync.Mutex
	byUID map[uint32]int
	all   int
	freed chan struct{} // closed, and made anew, when a slot frees
}

func newHeavyCalls() *heavyCalls {
	return &heavyCalls{perCaller: MaxHeavyCallsPerCaller, total: MaxHeavyCalls, wait: HeavyCallWait,
		byUID: map[uint32]int{}, freed: make(chan struct{})}
}

// acquire admits a call of action by uid once a slot is free, or refuses
// it with LimitReached when none frees within h.wait (or ctx ends);
// release ends what acquire admitted.
func (h *heavyCalls) acquire(ctx context.Context, action string, uid uint32) (release func(), derr *dbus.Error) {
	if h == nil || !heavy(action) {
		return func() {}, nil
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
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.all--
			if h.byUID[uid]--; h.byUID[uid] <= 0 {
				delete(h.byUID, uid)
			}
			close(h.freed)
			h.freed = make(chan struct{})
		})
	}, nil
}

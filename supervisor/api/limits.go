package api

import (
	"sync"

	"github.com/godbus/dbus/v5"
)

// Calls that hold much memory (a unified diff is built whole before it is
// sent), take snapshots or run commands: a caller may run only a few at
// once, and everyone together a few more, so that one member of the group
// cannot make the root daemon hold gigabytes or starve the others.
const (
	MaxHeavyCallsPerCaller = 4
	MaxHeavyCalls          = 16
)

// heavyActions are the calls heavyCalls counts.
var heavyActions = map[string]bool{
	"UnifiedDiff": true, "Diff": true, "Try": true, "Promote": true, "ProjectChanges": true,
}

// heavyCalls counts the heavy calls running, per caller and in all.
type heavyCalls struct {
	perCaller, total int

	mu    sync.Mutex
	byUID map[uint32]int
	all   int
}

func newHeavyCalls() *heavyCalls {
	return &heavyCalls{perCaller: MaxHeavyCallsPerCaller, total: MaxHeavyCalls, byUID: map[uint32]int{}}
}

// acquire admits a call of action by uid, or refuses it with LimitReached
// when too many run; release ends what acquire admitted.
func (h *heavyCalls) acquire(action string, uid uint32) (release func(), derr *dbus.Error) {
	if h == nil || !heavyActions[action] {
		return func() {}, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.byUID[uid] >= h.perCaller:
		return nil, dbusError(ErrorLimitReached,
			"%s: too many concurrent calls: uid %d already runs %d of UnifiedDiff, Diff, Try, Promote and ProjectChanges (at most %d at once); retry when one ends",
			action, uid, h.byUID[uid], h.perCaller)
	case h.all >= h.total:
		return nil, dbusError(ErrorLimitReached,
			"%s: too many concurrent calls: %d heavy calls run for all users (at most %d at once); retry when one ends",
			action, h.all, h.total)
	}
	h.byUID[uid]++
	h.all++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.all--
			if h.byUID[uid]--; h.byUID[uid] <= 0 {
				delete(h.byUID, uid)
			}
		})
	}, nil
}

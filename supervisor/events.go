package supervisor

import (
	"slices"
	"sync"
)

// The change event (containerd's event publisher, reduced to what the
// front door needs): the core says which sandboxes changed as they do
// (made ready, frozen, thawed, destroyed, a create undone), and a
// subscriber reads their state then, instead of re-listing every sandbox
// to find what changed.

// Subscription hears of the sandboxes that changed since it last took
// them. It coalesces: a subscriber that is slow holds one entry per
// sandbox at most, never a queue of events.
type Subscription struct {
	mu      sync.Mutex
	pending map[string]struct{}
	ready   chan struct{} // one token: something is pending
	closed  bool
}

// Ready is a channel that has a value when changes are pending.
func (sub *Subscription) Ready() <-chan struct{} { return sub.ready }

// Take returns the sandboxes that changed since the last Take, in no
// order but sorted for the reader's sake, and empties the set.
func (sub *Subscription) Take() []string {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	ids := make([]string, 0, len(sub.pending))
	for id := range sub.pending {
		ids = append(ids, id)
	}
	clear(sub.pending)
	slices.Sort(ids)
	return ids
}

func (sub *Subscription) add(id string) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.closed {
		return
	}
	sub.pending[id] = struct{}{}
	select {
	case sub.ready <- struct{}{}:
	default:
	}
}

// events are the subscriptions of one Supervisor.
type events struct {
	mu   sync.Mutex
	subs []*Subscription
}

// Subscribe starts a subscription to the sandboxes' changes; Unsubscribe
// ends it.
func (s *Supervisor) Subscribe() *Subscription {
	sub := &Subscription{pending: map[string]struct{}{}, ready: make(chan struct{}, 1)}
	s.events.mu.Lock()
	s.events.subs = append(s.events.subs, sub)
	s.events.mu.Unlock()
	return sub
}

// Unsubscribe ends sub: it hears of nothing more.
func (s *Supervisor) Unsubscribe(sub *Subscription) {
	s.events.mu.Lock()
	s.events.subs = slices.DeleteFunc(s.events.subs, func(x *Subscription) bool { return x == sub })
	s.events.mu.Unlock()
	sub.mu.Lock()
	sub.closed = true
	sub.mu.Unlock()
}

// changed tells the subscribers that sandbox id changed.
func (e *events) changed(id string) {
	e.mu.Lock()
	subs := slices.Clone(e.subs)
	e.mu.Unlock()
	for _, sub := range subs {
		sub.add(id)
	}
}

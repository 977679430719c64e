package supervisor

import (
	"slices"
	"sync"

	"github.com/sandboxd/sandboxd/internal/coalesce"
)

// The change event (containerd's event publisher, reduced to what the
// front door needs): the core says which sandboxes changed as they do
// (made ready, frozen, thawed, destroyed, a create undone), and a
// subscriber reads their state then, instead of re-listing every sandbox
// to find what changed. Each subscription is a coalescing set of ids
// (internal/coalesce): a slow subscriber holds one entry per sandbox at
// most, never a queue of events.

// events are the subscriptions of one Supervisor.
type events struct {
	mu   sync.Mutex
	subs []*coalesce.Set
}

// Subscribe starts a subscription to the sandboxes' changes: the ids of
// those that changed since it was last taken. Unsubscribe ends it.
func (s *Supervisor) Subscribe() *coalesce.Set {
	sub := coalesce.New()
	s.events.mu.Lock()
	s.events.subs = append(s.events.subs, sub)
	s.events.mu.Unlock()
	return sub
}

// Unsubscribe ends sub: it hears of nothing more.
func (s *Supervisor) Unsubscribe(sub *coalesce.Set) {
	s.events.mu.Lock()
	s.events.subs = slices.DeleteFunc(s.events.subs, func(x *coalesce.Set) bool { return x == sub })
	s.events.mu.Unlock()
	sub.Close()
}

// changed tells the subscribers that sandbox id changed.
func (e *events) changed(id string) {
	e.mu.Lock()
	subs := slices.Clone(e.subs)
	e.mu.Unlock()
	for _, sub := range subs {
		sub.Add(id)
	}
}

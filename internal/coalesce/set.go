package coalesce

import (
	"slices"
	"sync"
)

// Set holds the names added since the reader last took them. It
// coalesces: a reader that is slow holds one entry per name at most,
// never a queue of events.
type Set struct {
	mu      sync.Mutex
	pending map[string]struct{}
	ready   chan struct{} // one token: something is pending
	closed  bool
}

// New makes an empty, open Set.
func New() *Set {
	return &Set{pending: map[string]struct{}{}, ready: make(chan struct{}, 1)}
}

// Ready is a channel that has a value when names are pending.
func (s *Set) Ready() <-chan struct{} { return s.ready }

// Take returns the names added since the last Take, in no order but
// sorted for the reader's sake, and empties the set.
func (s *Set) Take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.pending))
	for id := range s.pending {
		ids = append(ids, id)
	}
	clear(s.pending)
	slices.Sort(ids)
	return ids
}

// Add adds id, and puts the token in Ready if it is not there; a closed
// set hears nothing.
func (s *Set) Add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.pending[id] = struct{}{}
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Close ends the set: it hears of nothing more.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

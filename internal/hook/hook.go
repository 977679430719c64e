// Package hook is a list of funcs a program's parts add to and its core
// calls, in the order they were added (tailscale's ipnext hooks): the
// core knows nothing of what they are.
package hook

import "sync"

// Hook is one point where parts add what they do.
type Hook[F any] struct {
	mu  sync.RWMutex
	fns []F
}

// Add adds f to the hook. Parts add theirs as they are made, before the
// program serves.
func (h *Hook[F]) Add(f F) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fns = append(h.fns, f)
}

// Funcs is the hook's funcs as they are now, in the order they were
// added.
func (h *Hook[F]) Funcs() []F {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.fns
}

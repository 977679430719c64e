// Package activity keeps when each of a set of keys (the sandboxes) last
// did something, for what acts on the idle ones.
package activity

import (
	"sync"
	"time"
)

// Times is when each key last did something; the zero Times is empty.
type Times struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// Touch records activity of key now.
func (a *Times) Touch(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = map[string]time.Time{}
	}
	a.last[key] = time.Now()
}

// Last is when key last did something, and whether it ever did.
func (a *Times) Last(key string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.last[key]
	return t, ok
}

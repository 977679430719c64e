// Package steps times the steps of one call for its journal line
// ("checks=0.19ms admission=0.11ms ..."; steps that ran beside the others
// as "name(beside)"): where a create's or a command's time goes, read as
// sandboxes pile up (make bench reads it).
package steps

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Steps are the steps of one call so far. A nil *Steps does nothing.
type Steps struct {
	mu          sync.Mutex
	start, last time.Time
	b           strings.Builder
}

type stepsKey struct{}

// New starts the steps of a call now.
func New() *Steps {
	now := time.Now()
	return &Steps{start: now, last: now}
}

// With gives ctx the call's steps, which Of finds.
func With(ctx context.Context, t *Steps) context.Context {
	return context.WithValue(ctx, stepsKey{}, t)
}

// Of is ctx's steps, or nil (whose methods do nothing).
func Of(ctx context.Context) *Steps {
	t, _ := ctx.Value(stepsKey{}).(*Steps)
	return t
}

// Mark ends the step named, which began at the last mark.
func (t *Steps) Mark(name string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.write(name, now.Sub(t.last))
	t.last = now
}

// Add records a step that ran beside the others, which took d.
func (t *Steps) Add(name string, d time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.write(name, d)
}

func (t *Steps) write(name string, d time.Duration) {
	if t.b.Len() > 0 {
		t.b.WriteByte(' ')
	}
	fmt.Fprintf(&t.b, "%s=%.2fms", name, float64(d.Microseconds())/1000)
}

// Took is the time since the call began.
func (t *Steps) Took() time.Duration {
	if t == nil {
		return 0
	}
	return time.Since(t.start)
}

func (t *Steps) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

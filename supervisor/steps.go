package supervisor

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// steps times the steps of one call, for its journal line: where a
// create's time goes, read as sandboxes pile up (make bench reads it).
type steps struct {
	mu          sync.Mutex
	start, last time.Time
	b           strings.Builder
}

type stepsKey struct{}

func newSteps() *steps {
	now := time.Now()
	return &steps{start: now, last: now}
}

// withSteps gives ctx the call's steps, which stepsOf finds.
func withSteps(ctx context.Context, t *steps) context.Context {
	return context.WithValue(ctx, stepsKey{}, t)
}

// stepsOf is ctx's steps, or nil (whose methods do nothing).
func stepsOf(ctx context.Context) *steps {
	t, _ := ctx.Value(stepsKey{}).(*steps)
	return t
}

// mark ends the step named, which began at the last mark.
func (t *steps) mark(name string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	t.write(name, now.Sub(t.last))
	t.last = now
}

// add records a step that ran beside the others, which took d.
func (t *steps) add(name string, d time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.write(name, d)
}

func (t *steps) write(name string, d time.Duration) {
	if t.b.Len() > 0 {
		t.b.WriteByte(' ')
	}
	fmt.Fprintf(&t.b, "%s=%.2fms", name, float64(d.Microseconds())/1000)
}

// took is the time since the call began.
func (t *steps) took() time.Duration { return time.Since(t.start) }

func (t *steps) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

package supervisor

import (
	"context"
	"errors"
	"sync"
)

// errDaemonStopping is the cause given to the promotions that the
// daemon's stop (Close) cuts short.
var errDaemonStopping = errors.New("the daemon is stopping")

// promotionRuns are the promotions running in the background. Close
// cancels their context and waits for them, so that the store is never
// closed under one: a stage cut short fails and is undone as one whose
// check failed, and its record says so. The zero value is ready to use.
type promotionRuns struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
	closed bool
	wg     sync.WaitGroup
}

// start runs fn in a goroutine of its own with the runs' context, or
// returns false once close has begun.
func (r *promotionRuns) start(fn func(ctx context.Context)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.ctx == nil {
		r.ctx, r.cancel = context.WithCancelCause(context.Background())
	}
	ctx := r.ctx
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn(ctx)
	}()
	return true
}

// close cancels the running promotions and waits until they have ended.
// Later starts are refused. It may be called more than once.
func (r *promotionRuns) close() {
	r.mu.Lock()
	r.closed = true
	if r.cancel != nil {
		r.cancel(errDaemonStopping)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

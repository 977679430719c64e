package promotion

// The promotions running in the background, which the daemon's stop
// waits for.

import (
	"context"
	"errors"
	"sync"

	"github.com/sandboxd/sandboxd/supervisor"
)

// errDaemonStopping is the cause given to the promotions that the
// daemon's stop (Close) cuts short.
var errDaemonStopping = errors.New("the daemon is stopping")

// runs are the promotions running in the background. close cancels
// their context and waits for them, so that the store is never closed
// under one: a stage cut short fails and is undone as one whose
// check failed, and its record says so. The zero value is ready to use.
type runs struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
	closed bool
	wg     sync.WaitGroup
}

// start runs fn in a goroutine of its own with the runs' context, or
// returns false once close has begun.
func (rs *runs) start(fn func(ctx context.Context)) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		return false
	}
	if rs.ctx == nil {
		// The runs are the daemon's own work, named so; the promoter's
		// right to the project was checked by Promote.
		rs.ctx, rs.cancel = context.WithCancelCause(supervisor.WithActor(context.Background(), supervisor.Daemon("promotion")))
	}
	ctx := rs.ctx
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		fn(ctx)
	}()
	return true
}

// close cancels the running promotions and waits until they have ended.
// Later starts are refused. It may be called more than once.
func (rs *runs) close() {
	rs.mu.Lock()
	rs.closed = true
	if rs.cancel != nil {
		rs.cancel(errDaemonStopping)
	}
	rs.mu.Unlock()
	rs.wg.Wait()
}

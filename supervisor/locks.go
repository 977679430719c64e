package supervisor

import (
	"context"
	"sync"
)

// idLocks is a mutex per sandbox id, kept only while someone holds or
// waits for it: a daemon that made and destroyed a million sandboxes
// must not keep a million mutexes.
type idLocks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	held  chan struct{} // one token: taken while held
	users int           // holders and waiters
}

// lock takes id's lock, and returns what releases it.
func (l *idLocks) lock(id string) func() {
	unlock, _ := l.lockCtx(context.Background(), id)
	return unlock
}

// lockCtx takes id's lock unless ctx ends first: a waiter that may be
// waiting for the holder itself (a port's connection waking a sandbox
// whose destroy waits for the port's connections) must give up.
func (l *idLocks) lockCtx(ctx context.Context, id string) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*idLock{}
	}
	e := l.m[id]
	if e == nil {
		e = &idLock{held: make(chan struct{}, 1)}
		l.m[id] = e
	}
	e.users++
	l.mu.Unlock()
	leave := func() {
		l.mu.Lock()
		if e.users--; e.users == 0 {
			delete(l.m, id)
		}
		l.mu.Unlock()
	}
	select {
	case e.held <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, context.Cause(ctx)
	}
	return func() {
		<-e.held
		leave()
	}, nil
}

// Package keylock is a mutex per key (a sandbox's id), kept only while
// someone holds or waits for it, that a waiter can give up with its
// context.
package keylock

import (
	"context"
	"sync"
)

// Locks is a mutex per key, kept only while someone holds or
// waits for it: a daemon that made and destroyed a million sandboxes
// must not keep a million mutexes.
type Locks struct {
	mu sync.Mutex
	m  map[string]*idLock
}

type idLock struct {
	held  chan struct{} // one token: taken while held
	users int           // holders and waiters
}

// Lock takes id's lock, and returns what releases it.
func (l *Locks) Lock(id string) func() {
	unlock, _ := l.LockCtx(context.Background(), id)
	return unlock
}

// LockCtx takes id's lock unless ctx ends first: a waiter that may be
// waiting for the holder itself (a port's connection waking a sandbox
// whose destroy waits for the port's connections) must give up.
func (l *Locks) LockCtx(ctx context.Context, id string) (func(), error) {
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

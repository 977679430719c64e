package keylock

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
)

// The per-sandbox locks exclude each other per id, and none is kept once
// no one holds or waits for it.
func TestIDLocksExcludeAndAreNotKept(t *testing.T) {
	var l Locks
	var wg sync.WaitGroup
	inside := map[string]int{}
	var mu sync.Mutex
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := []string{"a", "b", "c"}[i%3]
			unlock := l.Lock(id)
			mu.Lock()
			inside[id]++
			if inside[id] != 1 {
				t.Errorf("two holders of %s at once", id)
			}
			mu.Unlock()
			mu.Lock()
			inside[id]--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	if len(l.m) != 0 {
		t.Fatalf("%d locks kept after every holder left", len(l.m))
	}
}

// A waiter that may be waiting for the holder itself (a port's
// connection waking a sandbox whose destroy waits for that connection)
// gives up when its context ends, and leaves nothing behind; the holder
// goes on.
func TestIDLockWaiterGivesUpWithItsContext(t *testing.T) {
	var l Locks
	unlock := l.Lock("a")
	ctx, cancel := context.WithCancel(context.Background())
	gave := make(chan error, 1)
	go func() {
		_, err := l.LockCtx(ctx, "a")
		gave <- err
	}()
	// The waiter is counted before it waits: wait for that state.
	for {
		l.mu.Lock()
		users := l.m["a"].users
		l.mu.Unlock()
		if users == 2 {
			break
		}
		runtime.Gosched()
	}
	cancel()
	if err := <-gave; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter: %v; want it to give up with its context", err)
	}
	unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) != 0 {
		t.Fatalf("locks kept after all left: %v", l.m)
	}
}

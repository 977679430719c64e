package supervisor

import (
	"sync"
	"testing"
)

// The per-sandbox locks exclude each other per id, and none is kept once
// no one holds or waits for it.
func TestIDLocksExcludeAndAreNotKept(t *testing.T) {
	var l idLocks
	var wg sync.WaitGroup
	inside := map[string]int{}
	var mu sync.Mutex
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := []string{"a", "b", "c"}[i%3]
			unlock := l.lock(id)
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

package hook

import (
	"slices"
	"sync"
	"testing"
)

// Funcs come back in the order they were added, also while others add.
func TestFuncsInOrder(t *testing.T) {
	var h Hook[int]
	for i := range 5 {
		h.Add(i)
	}
	if got := h.Funcs(); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("Funcs = %v", got)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); h.Add(100 + i); _ = h.Funcs() }()
	}
	wg.Wait()
	if n := len(h.Funcs()); n != 55 {
		t.Fatalf("%d funcs after 55 adds", n)
	}
}

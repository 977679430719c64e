package idmap

import (
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/supervisor/state"
)

// counting replaces the name service for the test: the ids in accounts
// are accounts', and asked counts each lookup.
type counting struct {
	mu       sync.Mutex
	accounts map[uint32]bool
	asked    map[uint32]int
}

func useNames(t *testing.T, accountIDs ...uint32) *counting {
	c := &counting{accounts: map[uint32]bool{}, asked: map[uint32]int{}}
	for _, id := range accountIDs {
		c.accounts[id] = true
	}
	old := names
	names = &accounts{lookup: func(id uint32) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.asked[id]++
		return c.accounts[id]
	}}
	t.Cleanup(func() { settle(t); names = old })
	return c
}

func (c *counting) times(id uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asked[id]
}

// settle waits for the look-ahead to end.
func settle(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		names.mu.Lock()
		ahead := names.ahead
		names.mu.Unlock()
		if !ahead {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the look-ahead did not end within 10s")
		}
	}
}

// Far above the host's own ids and subordinate ranges.
var testRange = Range{First: 0x40000000, Count: 8 * Block}

// A create asks the name service about its block's first id once: the
// answer, asked ahead by the create before it, is taken for accountTTL.
func TestAllocateAsksAheadAndOnceABase(t *testing.T) {
	c := useNames(t)
	b0, b1 := testRange.First, testRange.First+Block
	m, err := Allocate(nil, testRange, 1000)
	if err != nil || m.Base != b0 {
		t.Fatalf("the first block: %+v, %v; want %#x", m, err, b0)
	}
	settle(t)
	if c.times(b0) != 1 || c.times(b1) != 1 {
		t.Fatalf("lookups after one create: %v; want %#x (its own) and %#x (ahead) once each", c.asked, b0, b1)
	}
	recs := []state.Entry{{IDBase: b0, HasIDs: true}}
	if m, err = Allocate(recs, testRange, 1000); err != nil || m.Base != b1 {
		t.Fatalf("the second block: %+v, %v; want %#x", m, err, b1)
	}
	settle(t)
	if c.times(b1) != 1 {
		t.Errorf("%#x was asked about %d times; want once (ahead), the create taking that answer", b1, c.times(b1))
	}
	// The first block freed and taken again within accountTTL: the
	// answer stands.
	if m, err = Allocate(nil, testRange, 1000); err != nil || m.Base != b0 || c.times(b0) != 1 {
		t.Errorf("the first block again: %+v, %v, asked %d times; want %#x, asked once", m, err, c.times(b0), b0)
	}
}

// An answer older than accountTTL is asked again; a base that is an
// account's is skipped, and remembered as such.
func TestAllocateAsksAgainAfterTTLAndSkipsAnAccount(t *testing.T) {
	b0, b1 := testRange.First, testRange.First+Block
	c := useNames(t, b0)
	m, err := Allocate(nil, testRange, 1000)
	if err != nil || m.Base != b1 {
		t.Fatalf("with an account at %#x: %+v, %v; want %#x", b0, m, err, b1)
	}
	settle(t)
	names.mu.Lock()
	names.free[b1] = time.Now().Add(-accountTTL)
	names.mu.Unlock()
	if m, err = Allocate(nil, testRange, 1000); err != nil || m.Base != b1 {
		t.Fatalf("again: %+v, %v; want %#x", m, err, b1)
	}
	settle(t)
	if c.times(b0) != 1 {
		t.Errorf("the account's base was asked about %d times; want once", c.times(b0))
	}
	if c.times(b1) != 2 {
		t.Errorf("%#x, its answer stale, was asked about %d times; want twice", b1, c.times(b1))
	}
}

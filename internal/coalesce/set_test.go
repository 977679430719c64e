package coalesce

import (
	"reflect"
	"testing"
)

// A name added many times before a Take is taken once, sorted with the
// others; the set is empty after.
func TestCoalescing(t *testing.T) {
	s := New()
	for _, id := range []string{"b", "a", "b", "c", "a", "b"} {
		s.Add(id)
	}
	if got, want := s.Take(), []string{"a", "b", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Take = %v; want %v", got, want)
	}
	if got := s.Take(); len(got) != 0 {
		t.Fatalf("a second Take = %v; want nothing", got)
	}
}

// Ready holds one token however many names are added: one wake-up for
// the reader, which then takes them all; none until the next Add.
func TestOneToken(t *testing.T) {
	s := New()
	select {
	case <-s.Ready():
		t.Fatal("an empty set is ready")
	default:
	}
	s.Add("a")
	s.Add("b")
	s.Add("a")
	<-s.Ready()
	select {
	case <-s.Ready():
		t.Fatal("a second token after three adds")
	default:
	}
	if got := s.Take(); len(got) != 2 {
		t.Fatalf("Take = %v; want a and b", got)
	}
	s.Add("c")
	select {
	case <-s.Ready():
	default:
		t.Fatal("no token after an Add following a Take")
	}
}

// A closed set hears nothing: no name, no token.
func TestClosedHearsNothing(t *testing.T) {
	s := New()
	s.Close()
	s.Add("a")
	select {
	case <-s.Ready():
		t.Fatal("a closed set is ready")
	default:
	}
	if got := s.Take(); len(got) != 0 {
		t.Fatalf("Take of a closed set = %v; want nothing", got)
	}
}

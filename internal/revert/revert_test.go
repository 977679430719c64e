package revert

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestFailUndoesInReverseSkippingHandedOff(t *testing.T) {
	var got []int
	r := New()
	r.AddFunc(func() { got = append(got, 1) })
	handOff := r.AddFunc(func() { got = append(got, 2) })
	r.AddFunc(func() { got = append(got, 3) })
	handOff()
	if err := r.Fail(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int{3, 1}) {
		t.Fatalf("undone %v, want [3 1]", got)
	}
	if err := r.Fail(context.Background()); err != nil || len(got) != 2 {
		t.Fatalf("a second Fail undid again: %v %v", got, err)
	}
}

func TestSuccessKeepsAll(t *testing.T) {
	r := New()
	r.AddFunc(func() { t.Fatal("undone after Success") })
	r.Success()
	if err := r.Fail(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFailStopsAtTheFirstFailingUndo(t *testing.T) {
	var got []int
	boom := errors.New("boom")
	r := New()
	r.AddFunc(func() { got = append(got, 1) })
	r.Add(func(context.Context) error { return boom })
	r.AddFunc(func() { got = append(got, 3) })
	err := r.Fail(context.Background())
	if !errors.Is(err, ErrIncomplete) || !errors.Is(err, boom) {
		t.Fatalf("Fail = %v, want ErrIncomplete wrapping boom", err)
	}
	if !slices.Equal(got, []int{3}) {
		t.Fatalf("undone %v, want [3]: steps before a failed undo are kept", got)
	}
}

func TestFailRunsUncancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := New()
	var sawErr error
	r.Add(func(ctx context.Context) error { sawErr = ctx.Err(); return nil })
	if err := r.Fail(ctx); err != nil || sawErr != nil {
		t.Fatalf("undo saw ctx.Err() = %v (Fail = %v), want an uncancelled context", sawErr, err)
	}
}

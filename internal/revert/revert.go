// Package revert undoes a multi-step change that failed half-way: each
// step that made something adds how to take it back, and unless the
// change succeeds the steps are taken back in reverse (Incus's
// shared/revert, with errors: an undo that fails stops the rest, so that
// what is left stays recorded for a reconcile to finish).
package revert

import (
	"context"
	"errors"
	"sync"
)

// Reverter collects the undo of each step done so far.
type Reverter struct {
	mu    sync.Mutex
	steps []*step
	done  bool
}

type step struct {
	undo func(context.Context) error
	off  bool
}

// New returns an empty Reverter.
func New() *Reverter { return &Reverter{} }

// Add records how to undo the step just done. The returned func disarms
// that step alone: what it made was handed on to another owner (which
// undoes it itself), not kept.
func (r *Reverter) Add(undo func(context.Context) error) (handOff func()) {
	st := &step{undo: undo}
	r.mu.Lock()
	r.steps = append(r.steps, st)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		st.off = true
		r.mu.Unlock()
	}
}

// AddFunc is Add for an undo that cannot fail.
func (r *Reverter) AddFunc(undo func()) (handOff func()) {
	return r.Add(func(context.Context) error { undo(); return nil })
}

// Success keeps everything: Fail does nothing after it.
func (r *Reverter) Success() {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
}

// ErrIncomplete wraps the error of the undo that failed: the steps
// before it in the list were not undone.
var ErrIncomplete = errors.New("undo stopped at a step that failed")

// Fail undoes every armed step, last first, unless Success was called,
// with ctx freed of its cancellation (an undo must finish even when the
// call that failed was cancelled). It stops at the first undo that
// fails and returns its error, wrapped in ErrIncomplete.
func (r *Reverter) Fail(ctx context.Context) error {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return nil
	}
	r.done = true
	steps := r.steps
	r.steps = nil
	r.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].off {
			continue
		}
		if err := steps[i].undo(ctx); err != nil {
			return errors.Join(ErrIncomplete, err)
		}
	}
	return nil
}

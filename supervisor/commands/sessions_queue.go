package commands

// Inputs waiting for a session (issue 28, finding 4). A session runs one
// input at a time; the others used to wait on its lock, each holding its
// call's message (up to MaxEvalInput of code) in the daemon for as long
// as the input before ran: 500 waiting inputs of 1 MiB took the daemon
// from 137 to 441 MiB. Now an input is admitted or refused at once: a
// few may wait per session, and the bytes the daemon holds for inputs
// are bounded per owner and in all. A refusal holds no copy of the code.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

const (
	// maxEvalWaiting bounds the inputs that wait for one session while
	// another runs in it.
	maxEvalWaiting = 2
	// MaxEvalBytesPerOwner bounds the bytes of one owner's inputs the
	// daemon holds at once, waiting or running, across all its sessions.
	MaxEvalBytesPerOwner = 4 << 20
	// MaxEvalBytes bounds them for all owners together.
	MaxEvalBytes = 64 << 20
	// evalOverhead is what an input holds besides its code (its call's
	// message and goroutine): counted, so that empty inputs are not free.
	evalOverhead = 4 << 10
)

// ErrSessionBusy: an input was refused because the session has as many
// inputs waiting as it may, or its owner's (or everyone's) inputs hold
// as many bytes as they may. Nothing of it was kept; send it again
// later, or in another session.
var ErrSessionBusy = errors.New("session busy")

// EvalOptions are an Eval's options besides its code.
type EvalOptions struct {
	// Timeout ends an input that runs longer (0: five minutes), and the
	// session with it.
	Timeout time.Duration
	// Watch, if set, is called when the input must wait for the one
	// before it: the wait ends when the context it returns does (the
	// caller left the bus), and stop ends the watch. An input that need
	// not wait costs no watch.
	Watch func() (ctx context.Context, stop func())
}

// evalHold is what the daemon holds for inputs admitted and not yet
// answered, and for answers being read: guarded by sessions.mu.
type evalHold struct {
	byOwner map[uint32]int64
	total   int64
	// Answers are read as they come; what an answer holds while it is
	// read (an interpreter may send all but its last byte and stop)
	// counts here, up to the same bounds as inputs.
	outByOwner map[uint32]int64
	outTotal   int64
}

// holdOutput takes room for up to n bytes of an answer of x's within the
// owner's and everyone's bounds, and says how many it got; giveBack
// returns them.
func (c *Commands) holdOutput(x *session, n int) (got int, giveBack func()) {
	c.sessions.mu.Lock()
	defer c.sessions.mu.Unlock()
	h := &c.sessions.hold
	room := max(0, min(int64(n), MaxEvalBytesPerOwner-h.outByOwner[x.uid], MaxEvalBytes-h.outTotal))
	if h.outByOwner == nil {
		h.outByOwner = map[uint32]int64{}
	}
	h.outByOwner[x.uid] += room
	h.outTotal += room
	return int(room), func() {
		c.sessions.mu.Lock()
		defer c.sessions.mu.Unlock()
		if h.outByOwner[x.uid] -= room; h.outByOwner[x.uid] <= 0 {
			delete(h.outByOwner, x.uid)
		}
		h.outTotal -= room
	}
}

// admitEval takes a place for an input of n bytes in x, or refuses it at
// once; release gives the place back.
func (c *Commands) admitEval(x *session, n int) (release func(), err error) {
	cost := int64(n) + evalOverhead
	c.sessions.mu.Lock()
	defer c.sessions.mu.Unlock()
	h := &c.sessions.hold
	switch {
	case h.byOwner[x.uid]+cost > MaxEvalBytesPerOwner:
		return nil, fmt.Errorf("session %s: the inputs of uid %d waiting or running hold %d bytes, and this one would add %d, over the %d allowed; wait for them to end: %w",
			x.id, x.uid, h.byOwner[x.uid], cost, MaxEvalBytesPerOwner, ErrSessionBusy)
	case h.total+cost > MaxEvalBytes:
		return nil, fmt.Errorf("session %s: the inputs of all sessions waiting or running hold %d bytes, and this one would add %d, over the %d allowed; try again later: %w",
			x.id, h.total, cost, MaxEvalBytes, ErrSessionBusy)
	}
	if err := x.full(); err != nil {
		return nil, err
	}
	if h.byOwner == nil {
		h.byOwner = map[uint32]int64{}
	}
	x.queued++
	h.byOwner[x.uid] += cost
	h.total += cost
	return func() {
		c.sessions.mu.Lock()
		defer c.sessions.mu.Unlock()
		x.queued--
		if h.byOwner[x.uid] -= cost; h.byOwner[x.uid] <= 0 {
			delete(h.byOwner, x.uid)
		}
		h.total -= cost
	}, nil
}

// full says why x takes no more inputs now (one runs and as many wait as
// may), or nil; sessions.mu held.
func (x *session) full() error {
	if x.queued > maxEvalWaiting {
		return fmt.Errorf("session %s is busy with %d inputs waiting; wait for it or open another session: %w", x.id, x.queued-1, ErrSessionBusy)
	}
	return nil
}

// SessionFull says (ErrSessionBusy) whether session sess of sandbox id
// would refuse an input now, whoever sends it: for the D-Bus guard,
// which refuses such an input as it is read, before a goroutine holds
// its code. nil when there is no such session.
func (c *Commands) SessionFull(id, sess string) error {
	c.sessions.mu.Lock()
	defer c.sessions.mu.Unlock()
	if x := c.sessions.m[id+"/"+sess]; x != nil {
		if err := x.full(); err != nil {
			return fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	return nil
}

// takeTurn waits until no other input runs in x, the session ends, or
// ctx or the watch's context ends; on success the caller gives the turn
// back with <-x.turn. On failure it gives up the input's place (giveUp)
// before the watch ends, so that the watch's end says the place is free.
func takeTurn(ctx context.Context, x *session, watch func() (context.Context, func()), giveUp func()) (err error) {
	select {
	case x.turn <- struct{}{}:
		return nil
	default:
	}
	wait := ctx
	if watch != nil {
		w, stop := watch()
		defer stop()
		wait = w
	}
	defer func() {
		if err != nil {
			giveUp()
		}
	}()
	select {
	case x.turn <- struct{}{}:
		return nil
	case <-x.ended:
		return fmt.Errorf("session %s ended while the input waited for the one before: %w", x.id, ErrNoSession)
	case <-ctx.Done():
		return fmt.Errorf("session %s: waiting for the input before: %w", x.id, context.Cause(ctx))
	case <-wait.Done():
		return fmt.Errorf("session %s: waiting for the input before: %w", x.id, context.Cause(wait))
	}
}

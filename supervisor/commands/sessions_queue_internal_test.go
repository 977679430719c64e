package commands

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func testSession(id string, uid uint32) *session {
	return &session{id: id, uid: uid, turn: make(chan struct{}, 1), ended: make(chan struct{})}
}

// A session admits one running input and maxEvalWaiting waiting ones;
// the next is refused at once, saying how many wait; a place given back
// is taken again.
func TestEvalAdmitsAFewWaitingThenRefuses(t *testing.T) {
	s := &Commands{}
	x := testSession("s1", 1000)
	var releases []func()
	for i := range maxEvalWaiting + 1 {
		r, err := s.admitEval(x, 10)
		if err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
		releases = append(releases, r)
	}
	_, err := s.admitEval(x, 10)
	if !errors.Is(err, ErrSessionBusy) || !strings.Contains(err.Error(), "session s1 is busy with 2 inputs waiting; wait for it or open another session") {
		t.Fatalf("input past the bound: %v; want ErrSessionBusy", err)
	}
	releases[0]()
	r, err := s.admitEval(x, 10)
	if err != nil {
		t.Fatalf("input after one ended: %v", err)
	}
	r()
	for _, r := range releases[1:] {
		r()
	}
	if x.queued != 0 || s.sessions.hold.total != 0 || len(s.sessions.hold.byOwner) != 0 {
		t.Fatalf("after every input: queued %d, held %d, by owner %v", x.queued, s.sessions.hold.total, s.sessions.hold.byOwner)
	}
}

// The bytes of one owner's inputs are bounded across its sessions, and
// another owner's are not counted against it; all owners' together are
// bounded too.
func TestEvalBytesAreBoundedPerOwnerAndInAll(t *testing.T) {
	s := &Commands{}
	const big = MaxEvalInput
	held := 0
	for i := 0; ; i++ {
		x := testSession("a"+string(rune('a'+i)), 1000)
		_, err := s.admitEval(x, big)
		if err != nil {
			if !errors.Is(err, ErrSessionBusy) || !strings.Contains(err.Error(), "uid 1000") {
				t.Fatalf("input %d: %v; want ErrSessionBusy naming the uid", i, err)
			}
			break
		}
		if held += big + evalOverhead; held > MaxEvalBytesPerOwner {
			t.Fatalf("uid 1000 holds %d bytes of inputs, over %d", held, MaxEvalBytesPerOwner)
		}
	}
	if _, err := s.admitEval(testSession("b", 1001), big); err != nil {
		t.Fatalf("another owner's input: %v", err)
	}
	for uid := uint32(2000); ; uid++ {
		_, err := s.admitEval(testSession("c", uid), big)
		if err != nil {
			if !errors.Is(err, ErrSessionBusy) || !strings.Contains(err.Error(), "all sessions") {
				t.Fatalf("uid %d: %v; want ErrSessionBusy for all sessions", uid, err)
			}
			break
		}
		if s.sessions.hold.total > MaxEvalBytes {
			t.Fatalf("inputs hold %d bytes, over %d", s.sessions.hold.total, MaxEvalBytes)
		}
	}
}

// An input waiting its turn stops waiting when its caller leaves (the
// watch's context ends) or the session ends; the watch is only started
// for an input that has to wait.
func TestEvalWaitEndsWithItsCallerOrTheSession(t *testing.T) {
	x := testSession("s", 1000)
	watched := 0
	watch := func(ctx context.Context) func() (context.Context, func()) {
		return func() (context.Context, func()) { watched++; return ctx, func() {} }
	}
	if err := takeTurn(context.Background(), x, watch(context.Background()), nil); err != nil || watched != 0 {
		t.Fatalf("a free session's turn: %v, %d watches; want it at once, unwatched", err, watched)
	}
	gone, leave := context.WithCancelCause(context.Background())
	errGone := errors.New("the caller left the bus")
	done := make(chan error)
	gaveUp := 0
	giveUp := func() { gaveUp++ }
	go func() { done <- takeTurn(context.Background(), x, watch(gone), giveUp) }()
	leave(errGone)
	if err := <-done; !errors.Is(err, errGone) || gaveUp != 1 {
		t.Fatalf("a waiting input whose caller left: %v, its place given up %d times; want once", err, gaveUp)
	}
	go func() { done <- takeTurn(context.Background(), x, nil, giveUp) }()
	close(x.ended)
	if err := <-done; !errors.Is(err, ErrNoSession) || gaveUp != 2 {
		t.Fatalf("a waiting input whose session ended: %v, places given up %d; want 2", err, gaveUp)
	}
	<-x.turn
	if err := takeTurn(context.Background(), x, nil, nil); err != nil {
		t.Fatalf("the turn given back: %v", err)
	}
}

// The answers being read hold at most an owner's bound; what does not
// fit is not held, and room given back is there again.
func TestEvalOutputHeldIsBoundedPerOwner(t *testing.T) {
	s := &Commands{}
	x := testSession("s", 1000)
	var giveBacks []func()
	held := 0
	for range MaxEvalBytesPerOwner/MaxEvalOutput + 2 {
		got, giveBack := s.holdOutput(x, MaxEvalOutput)
		held += got
		giveBacks = append(giveBacks, giveBack)
	}
	if held != MaxEvalBytesPerOwner {
		t.Fatalf("answers of one owner hold %d bytes; want %d", held, MaxEvalBytesPerOwner)
	}
	if got, _ := s.holdOutput(testSession("t", 1001), 10); got != 10 {
		t.Fatalf("another owner's answer got %d bytes; want 10", got)
	}
	giveBacks[0]()
	if got, _ := s.holdOutput(x, MaxEvalOutput); got != MaxEvalOutput {
		t.Fatalf("an answer after one ended got %d bytes; want %d", got, MaxEvalOutput)
	}
}

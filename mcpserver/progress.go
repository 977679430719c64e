package mcpserver

// What try and promote tell as they go (progress notifications, through
// package toolcall, as exec's output is): a promotion's stages as they
// change, a try's sandboxes as they are made.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/mcpserver/toolcall"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// followPromotion is client.WaitPromotion that tells each stage's state
// as it changes: it follows the promotion until it no longer runs.
func (s *server) followPromotion(ctx context.Context, id string) (*sandboxd1.Promotion, error) {
	pause := 50 * time.Millisecond
	told := map[string]string{}
	for {
		p, err := s.c.Promotion(ctx, id)
		if err != nil {
			return p, err
		}
		for _, st := range p.Stages {
			if told[st.Name] == st.State || st.State == sandboxd1.StagePending {
				continue
			}
			told[st.Name] = st.State
			toolcall.Notify(ctx, fmt.Sprintf("promotion %s: stage %s (%s): %s", p.ID, st.Name, st.Target, st.State), 0)
		}
		if p.State != sandboxd1.PromotionRunning {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("waiting for promotion %s: %w", id, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// tryEvery is how often a try's sandboxes are looked for.
const tryEvery = 500 * time.Millisecond

// watchTry tells, while a try runs, each of its sandboxes as it is made
// (the daemon answers Try only at its end: its sandboxes, named
// PREFIX-N, are what the bus shows meanwhile); stop ends the watch. It
// returns the prefix to give Try: prefix, or one of its own when empty,
// so that the sandboxes can be known.
func (s *server) watchTry(ctx context.Context, prefix string, n int) (string, func()) {
	if !toolcall.Progressing(ctx) {
		return prefix, func() {}
	}
	if prefix == "" {
		prefix = "try-" + randomHex(2)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		seen := map[string]bool{}
		t := time.NewTicker(tryEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			list, err := s.c.List(ctx)
			if err != nil {
				continue
			}
			for _, e := range list {
				if !strings.HasPrefix(e.Name, prefix+"-") || seen[e.Name] {
					continue
				}
				seen[e.Name] = true
				toolcall.Notify(ctx, fmt.Sprintf("try: %s made (%d of %d): its variant, then the check, run in it", e.Name, len(seen), n), float64(n+1))
			}
		}
	})
	return prefix, func() { close(done); wg.Wait() }
}

package toolcall

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// What try and promote tell as they go: a promotion's stages as they
// change, a try's sandboxes as they are made.

// FollowPromotion is client.WaitPromotion that tells each stage's state
// as it changes: it follows the promotion (read by get) until it no
// longer runs.
func FollowPromotion(ctx context.Context, get func(context.Context, string) (*sandboxd1.Promotion, error), id string) (*sandboxd1.Promotion, error) {
	pause := 50 * time.Millisecond
	told := map[string]string{}
	for {
		p, err := get(ctx, id)
		if err != nil {
			return p, err
		}
		for _, st := range p.Stages {
			if told[st.Name] == st.State || st.State == sandboxd1.StagePending {
				continue
			}
			told[st.Name] = st.State
			Notify(ctx, fmt.Sprintf("promotion %s: stage %s (%s): %s", p.ID, st.Name, st.Target, st.State), 0)
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

// WatchTry tells, while a try of n variants runs, each of its sandboxes
// as it is made (the daemon answers Try only at its end: its sandboxes,
// named PREFIX-N, are what the bus shows meanwhile, read by list); stop
// ends the watch. It returns the prefix to give Try: prefix, or one of
// its own when empty, so that the sandboxes can be known.
func WatchTry(ctx context.Context, list func(context.Context) ([]sandboxd1.ListEntry, error), prefix string, n int) (string, func()) {
	if !Progressing(ctx) {
		return prefix, func() {}
	}
	if prefix == "" {
		prefix = "try-" + strings.ToLower(rand.Text()[:4])
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
			entries, err := list(ctx)
			if err != nil {
				continue
			}
			for _, e := range entries {
				if !strings.HasPrefix(e.Name, prefix+"-") || seen[e.Name] {
					continue
				}
				seen[e.Name] = true
				Notify(ctx, fmt.Sprintf("try: %s made (%d of %d): its variant, then the check, run in it", e.Name, len(seen), n), float64(n+1))
			}
		}
	})
	return prefix, func() { close(done); wg.Wait() }
}

package toolcall

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// What try and promote tell as they go: a promotion's stages as they
// change, a try's sandboxes as each is done.

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

// TryVariants is what tells, while a try of n sandboxes runs, each
// sandbox's outcome as it is done (client.TryOptions.OnVariant: the
// daemon's TryVariantDone): "try: fix-2 passed in 1.2 s (1 of 3 done)",
// "try: fix-1 failed (check: exit 1) in 0.4 s (2 of 3 done)". nil when
// the call asked for no progress.
func TryVariants(ctx context.Context, n int) func(sandboxd1.TryVariant) {
	if !Progressing(ctx) {
		return nil
	}
	var mu sync.Mutex
	done := 0
	return func(v sandboxd1.TryVariant) {
		mu.Lock()
		done++
		k := done
		mu.Unlock()
		outcome := "passed"
		if !v.Passed {
			outcome = "failed " + strings.TrimPrefix(v.Result, "fail ")
		}
		Notify(ctx, fmt.Sprintf("try: %s %s in %.1f s (%d of %d done)", v.Name, outcome, v.Seconds, k, max(n, v.Of)), float64(max(n, v.Of)))
	}
}

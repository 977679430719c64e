package egress

import (
	"sync"
	"time"
)

// Lines about a sandbox's connections refused past its cap: a sandbox
// that connects in a loop would have the root daemon write a journal line
// for each. In each period the first RefusalLogBurst are logged one by
// one; the rest are counted, and the count is logged in one line when the
// period ends (or the proxy stops), so every refusal is still in the log,
// in number.
const (
	RefusalLogBurst  = 10
	RefusalLogPeriod = time.Minute
)

// lineLimiter passes at most burst lines per period and counts the rest;
// report gets the count of a period once it ends. Its zero value is not
// ready: newLineLimiter makes one.
type lineLimiter struct {
	burst  int
	period time.Duration
	report func(held int, period time.Duration)

	mu    sync.Mutex
	start time.Time // of the current period
	lines int       // passed in it
	held  int       // counted in it, not yet reported
	timer *time.Timer
}

func newLineLimiter(burst int, period time.Duration, report func(held int, period time.Duration)) *lineLimiter {
	return &lineLimiter{burst: burst, period: period, report: report}
}

// allow says whether one more line may be written now. One that may not
// is counted, and reported when its period ends.
func (l *lineLimiter) allow() bool {
	now := time.Now()
	l.mu.Lock()
	if l.start.IsZero() || now.Sub(l.start) >= l.period {
		held := l.takeHeld()
		l.start, l.lines = now, 0
		if held > 0 {
			// The period's timer has not run yet: report in order,
			// before this period's first line.
			l.mu.Unlock()
			l.report(held, l.period)
			l.mu.Lock()
		}
	}
	defer l.mu.Unlock()
	if l.lines < l.burst {
		l.lines++
		return true
	}
	if l.held == 0 {
		l.timer = time.AfterFunc(l.start.Add(l.period).Sub(now), l.flush)
	}
	l.held++
	return false
}

// flush reports what is counted and not yet reported, at once.
func (l *lineLimiter) flush() {
	l.mu.Lock()
	held := l.takeHeld()
	l.mu.Unlock()
	if held > 0 {
		l.report(held, l.period)
	}
}

// takeHeld returns the count not yet reported and clears it; l.mu held.
func (l *lineLimiter) takeHeld() int {
	held := l.held
	l.held = 0
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	return held
}

package journal

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// CallerKey is the attribute that names a record's caller (its uid).
const CallerKey = "CALLER_UID"

// LeftOutKey is the attribute that counts a caller's lines left out.
const LeftOutKey = "left_out"

// BudgetKey, on a line without a caller, names the budget it shares
// with the other lines that an outsider may cause at will (a port's
// refused connections: any local user may connect).
const BudgetKey = "LOG_BUDGET"

// senderKey is the attribute that names a D-Bus call's sender: a line
// that has it and no caller is of a call whose caller could not be told
// or that the guard refused, and shares the budget busBudget.
const (
	senderKey = "BUS_SENDER"
	busBudget = "unidentified-callers"
)

// Refusal lines a caller may have logged per interval, as the egress
// proxy's: 10 a minute, then a count.
const (
	BudgetLines    = 10
	BudgetInterval = time.Minute
)

// Budget wraps h so that one caller's warnings and errors (a refused or
// failed call: records at Warn or above with a CALLER_UID) reach it at
// most lines times an interval. The others are counted: the caller's
// next line let through says how many were left out before it
// (left_out=N), and where none comes, one line at the interval's end
// does ("lines of a caller left out"). So a flood of refusals, which
// costs a caller nothing, cannot spend journald's rate limit for the
// service (RateLimitBurst, per interval and unit) and silence the
// daemon's other lines.
//
// Lines without a caller at Warn or above that an outsider causes share
// a budget by kind: those of a call whose caller could not be told or
// that the guard refused (they name its BUS_SENDER), and those that name
// their budget (BudgetKey). The daemon's own lines (no caller, no bus
// sender, no budget named: a promotion that failed, the audit log that
// could not be written) are not budgeted, so that no one's flood of
// refusals leaves them out. Nor are root's lines and lines below Warn
// (a change made, at Info): root may write to the journal itself, and a
// change is worth its line.
func Budget(h slog.Handler, lines int, interval time.Duration) slog.Handler {
	return &budgeted{h: h, s: &budgetState{root: h, lines: lines, interval: interval, windows: map[string]*window{}}}
}

type budgeted struct {
	h slog.Handler
	s *budgetState
	// caller is a CALLER_UID attached with WithAttrs, if any; shared a
	// budget named there (BudgetKey, or a BUS_SENDER's).
	caller, shared string
}

// sharedPrefix marks a shared budget's key among the callers' uids.
const sharedPrefix = "\x00"

type budgetState struct {
	root     slog.Handler // where the counts go: no group, no attributes
	lines    int
	interval time.Duration

	mu      sync.Mutex
	windows map[string]*window
}

// window is one caller's current interval.
type window struct {
	start       time.Time
	lines, held int
	timer       *time.Timer
}

func (b *budgeted) Enabled(ctx context.Context, l slog.Level) bool { return b.h.Enabled(ctx, l) }

func (b *budgeted) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *b
	c.h = b.h.WithAttrs(attrs)
	for _, a := range attrs {
		switch a.Key {
		case CallerKey:
			c.caller = a.Value.Resolve().String()
		case BudgetKey:
			c.shared = a.Value.Resolve().String()
		case senderKey:
			if c.shared == "" {
				c.shared = busBudget
			}
		}
	}
	return &c
}

func (b *budgeted) WithGroup(name string) slog.Handler {
	c := *b
	c.h = b.h.WithGroup(name)
	return &c
}

func (b *budgeted) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return b.h.Handle(ctx, r)
	}
	caller, shared := b.caller, b.shared
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case CallerKey:
			caller = a.Value.Resolve().String()
		case BudgetKey:
			shared = a.Value.Resolve().String()
		case senderKey:
			if shared == "" {
				shared = busBudget
			}
		}
		return true
	})
	switch {
	case caller == "0":
		return b.h.Handle(ctx, r)
	case caller == "" && shared == "":
		return b.h.Handle(ctx, r) // the daemon's own
	case caller == "":
		caller = sharedPrefix + shared
	}
	held, ok := b.s.allow(caller, r.Time)
	if !ok {
		return nil
	}
	if held > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int(LeftOutKey, held))
	}
	return b.h.Handle(ctx, r)
}

// allow says whether caller's line at now is let through, and how many
// of its lines were left out before it.
func (s *budgetState) allow(caller string, now time.Time) (held int, ok bool) {
	if now.IsZero() {
		now = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.windows[caller]
	if w == nil || now.Sub(w.start) >= s.interval {
		if w != nil && w.held > 0 {
			// Said by this line, not by the old window's timer.
			held, w.held = w.held, 0
			w.timer.Stop()
		}
		if len(s.windows) >= maxWindows {
			s.forget(now)
		}
		w = &window{start: now}
		s.windows[caller] = w
	}
	if w.lines >= s.lines {
		w.held++
		if w.timer == nil {
			w.timer = time.AfterFunc(s.interval-now.Sub(w.start), func() { s.flush(caller, w) })
		}
		return 0, false
	}
	w.lines++
	held, w.held = held+w.held, 0
	return held, true
}

// flush logs the count of w's lines left out, at its interval's end,
// unless a later line of the caller's said it already.
func (s *budgetState) flush(caller string, w *window) {
	s.mu.Lock()
	held := w.held
	w.held = 0
	s.mu.Unlock()
	if held == 0 {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelWarn, "lines of a caller left out", 0)
	if name, ok := strings.CutPrefix(caller, sharedPrefix); ok {
		r.AddAttrs(slog.String(BudgetKey, name))
	} else if caller != "" {
		r.AddAttrs(slog.String(CallerKey, caller))
	}
	r.AddAttrs(slog.Int(LeftOutKey, held), slog.Duration("interval", s.interval))
	_ = s.root.Handle(context.Background(), r)
}

// maxWindows: past this many callers, the windows that have ended
// (their counts said) are dropped before a new one is made.
const maxWindows = 4096

func (s *budgetState) forget(now time.Time) {
	for k, w := range s.windows {
		if now.Sub(w.start) >= s.interval && w.held == 0 {
			delete(s.windows, k)
		}
	}
}

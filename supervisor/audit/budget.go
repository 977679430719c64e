package audit

import (
	"cmp"
	"errors"
	"maps"
	"slices"
	"time"
)

// Budget bounds what one caller, a uid other than root, may have the log
// write per Interval, as a token bucket: a burst may spend it whole,
// and it refills evenly over the Interval. A caller's successful actions
// and its refused or failed calls have budgets of their own, so that a
// flood of refusals, which costs the caller nothing, never leaves one of
// its actions out. A line past its budget is not written but counted;
// one LeftOut line per caller and Interval (action "audit-left-out")
// says how many of its lines, by action and result, were left out: for
// those, it is the record.
//
// Not budgeted: the daemon's own lines (no caller), bounded by what it
// does by itself (a time to live, a reconcile), and root's: root may
// write the file itself, so a budget would bound nothing and could only
// lose an admin's lines. Rotation bounds the disk for both.
type Budget struct {
	Lines int   // lines of successful actions
	Bytes int64 // their bytes
	// RefusedLines and RefusedBytes: refused and failed calls'.
	RefusedLines int
	RefusedBytes int64
	Interval     time.Duration
}

// DefaultBudget: a client busy for the whole minute (20 actions a
// second) is never cut; a refusal flood writes 64 KiB a minute, where it
// wrote megabytes in seconds.
var DefaultBudget = Budget{Lines: 1200, Bytes: 4 << 20, RefusedLines: 60, RefusedBytes: 64 << 10, Interval: time.Minute}

func (b Budget) withDefaults() Budget {
	d := DefaultBudget
	return Budget{
		Lines: cmp.Or(b.Lines, d.Lines), Bytes: cmp.Or(b.Bytes, d.Bytes),
		RefusedLines: cmp.Or(b.RefusedLines, d.RefusedLines), RefusedBytes: cmp.Or(b.RefusedBytes, d.RefusedBytes),
		Interval: cmp.Or(b.Interval, d.Interval),
	}
}

// LeftOutAction is the action of a LeftOut line.
const LeftOutAction = "audit-left-out"

// LeftOut is what a caller's budget left out of the log since Since.
type LeftOut struct {
	Since time.Time      `json:"since"`
	Lines int            `json:"lines"`
	Bytes int64          `json:"bytes"`
	By    []LeftOutCount `json:"by"`
}

// LeftOutCount is how many lines of one action and result were left
// out; Result is "ok", "error" or "refused".
type LeftOutCount struct {
	Action string `json:"action"`
	Result string `json:"result"`
	Lines  int    `json:"lines"`
}

type bucketKey struct {
	uid     uint32
	refused bool
}

// bucket is what is left of a budget at a time.
type bucket struct {
	lines, bytes float64
	at           time.Time
}

type held struct {
	since time.Time
	lines int
	bytes int64
	by    map[[2]string]int // action, result
}

// budgets are the buckets of the callers that wrote lately and what
// was held back from each; guarded by Log.mu.
type budgets struct {
	buckets map[bucketKey]*bucket
	held    map[uint32]*held
	timer   *time.Timer
}

func (b *budgets) init() {
	b.buckets = map[bucketKey]*bucket{}
	b.held = map[uint32]*held{}
}

func (b *budgets) stop() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
}

// resultOf is the result a LeftOut line counts e under.
func resultOf(e Entry) string {
	if e.Refused {
		return "refused"
	}
	return e.Result
}

// spend takes a line of n bytes from e's caller's budget and says
// whether it may be written; if not, it is counted. l.mu is held.
func (b *budgets) spend(l *Log, e Entry, n int, now time.Time) bool {
	if e.CallerUID == nil || *e.CallerUID == 0 || e.LeftOut != nil {
		return true
	}
	uid, ok := *e.CallerUID, e.Result == "ok" && !e.Refused
	bud := l.opts.Budget
	maxLines, maxBytes := float64(bud.Lines), float64(bud.Bytes)
	if !ok {
		maxLines, maxBytes = float64(bud.RefusedLines), float64(bud.RefusedBytes)
	}
	k := bucketKey{uid, !ok}
	bk := b.buckets[k]
	if bk == nil && len(b.buckets) >= maxBuckets {
		b.forget(now, bud.Interval)
	}
	if bk == nil {
		bk = &bucket{lines: maxLines, bytes: maxBytes, at: now}
		b.buckets[k] = bk
	}
	if el := now.Sub(bk.at); el > 0 {
		f := float64(el) / float64(bud.Interval)
		bk.lines = min(maxLines, bk.lines+f*maxLines)
		bk.bytes = min(maxBytes, bk.bytes+f*maxBytes)
		bk.at = now
	}
	if bk.lines >= 1 && bk.bytes >= float64(n) {
		bk.lines--
		bk.bytes -= float64(n)
		return true
	}
	h := b.held[uid]
	if h == nil {
		h = &held{since: now, by: map[[2]string]int{}}
		b.held[uid] = h
	}
	h.lines++
	h.bytes += int64(n)
	h.by[[2]string{e.Action, resultOf(e)}]++
	if b.timer == nil {
		b.timer = time.AfterFunc(bud.Interval, func() {
			if err := l.FlushLeftOut(); err != nil && l.opts.OnError != nil {
				l.opts.OnError(err)
			}
		})
	}
	return false
}

// FlushLeftOut writes a LeftOut line for each caller whose budget held
// lines back, now rather than at its interval's end (Close does).
func (l *Log) FlushLeftOut() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := &l.budgets
	b.stop()
	if l.closed {
		return nil
	}
	now := l.now()
	var errs []error
	for _, uid := range slices.Sorted(maps.Keys(b.held)) {
		h := b.held[uid]
		lo := &LeftOut{Since: h.since.UTC(), Lines: h.lines, Bytes: h.bytes}
		for _, k := range slices.SortedFunc(maps.Keys(h.by), func(a, b [2]string) int { return cmp.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) }) {
			lo.By = append(lo.By, LeftOutCount{Action: k[0], Result: k[1], Lines: h.by[k]})
		}
		line, err := marshal(Entry{Time: now.UTC(), CallerUID: &uid, Action: LeftOutAction, Result: "left-out", LeftOut: lo})
		if err == nil {
			err = l.write(line, now)
		}
		errs = append(errs, err)
	}
	clear(b.held)
	b.forget(now, l.opts.Budget.Interval)
	return errors.Join(errs...)
}

// maxBuckets: past this many callers' buckets, those refilled are
// dropped before a new one is made.
const maxBuckets = 4096

// forget drops the buckets that have refilled: such a caller is as one
// never seen, so the map holds only the callers of the last interval.
func (b *budgets) forget(now time.Time, interval time.Duration) {
	for k, bk := range b.buckets {
		if now.Sub(bk.at) >= interval {
			delete(b.buckets, k)
		}
	}
}

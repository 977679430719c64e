package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// series is the timed runs of one operation.
type series []time.Duration

func (s series) sorted() series {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func (s series) median() time.Duration {
	c := s.sorted()
	if len(c) == 0 {
		return 0
	}
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// percentile is the nearest-rank p-th percentile (0 < p < 1). With fewer
// than 1/(1-p) runs (10 for p90, 100 for p99) it would only be the slowest
// run, so it is not given.
func (s series) percentile(p float64) (time.Duration, bool) {
	if len(s) == 0 || float64(len(s)) < math.Round(1/(1-p)) {
		return 0, false
	}
	c := s.sorted()
	return c[int(math.Ceil(p*float64(len(c))))-1], true
}

func (s series) max() time.Duration {
	if len(s) == 0 {
		return 0
	}
	return slices.Max(s)
}

// loop says how many times a series runs: one untimed warm-up, then up
// to reps timed runs, stopping early once budget has passed and min runs
// are done.
type loop struct {
	reps, min int
	budget    time.Duration
}

// run calls fn for the warm-up (warm true) and each timed run; fn times
// what it measures itself, so that its setup and cleanup stay out.
func (l loop) run(ctx context.Context, what string, fn func(warm bool) error) error {
	begin := time.Now()
	if err := fn(true); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("%s (warm-up): %w", what, err)
	}
	runs := 0
	for ; runs < l.reps; runs++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if runs >= l.min && time.Since(begin) > l.budget {
			break
		}
		if err := fn(false); err != nil {
			if ctx.Err() != nil {
				err = ctx.Err() // what was killed failed because of it
			}
			return fmt.Errorf("%s (run %d): %w", what, runs+1, err)
		}
	}
	progress("%s: warm-up and %d runs in %v", what, runs, time.Since(begin).Round(time.Millisecond))
	return nil
}

// timed runs fn and returns how long it took.
func timed(fn func() error) (time.Duration, error) {
	begin := time.Now()
	err := fn()
	return time.Since(begin), err
}

// row is one line of the table.
type row struct {
	fs      string
	files   int
	changed int // files changed in the project, in a table with that column
	op      string
	s       series
	na      string // why the row has no timings
	ratio   string
	target  string
	verdict string
}

// table is the report: its rows, and which sizes ran on each filesystem.
type table struct {
	rows []row
	ran  []string // "btrfs: 1k, 10k, 100k"
	// pct is the percentile its second column gives: 0.9 for series of
	// 15 runs, 0.99 for the daemon's 200 calls.
	pct float64
	// ratioOf names what the ÷ column divides by: "cowfs", "create".
	ratioOf string
	// changed adds a column of the rows' changed files.
	changed bool
	note    string // printed below it
}

func (t *table) add(r row) { t.rows = append(t.rows, r) }

// insert puts r at index i, before the row that was there.
func (t *table) insert(i int, r row) { t.rows = slices.Insert(t.rows, i, r) }

func (t *table) sizesRan() string { return strings.Join(t.ran, "; ") }

func (t *table) markdown() string {
	var b strings.Builder
	changedHead, changedAlign := "", ""
	if t.changed {
		changedHead, changedAlign = " changed |", "--:|"
	}
	fmt.Fprintf(&b, "| fs | files |%s operation | median ms | p%.0f ms | runs | ÷ %s | target | verdict |\n", changedHead, t.pct*100, t.ratioOf)
	b.WriteString("|---|--:|" + changedAlign + "---|--:|--:|--:|--:|---|---|\n")
	for _, r := range t.rows {
		med, pct, runs, files := "n/a", "–", "–", "–"
		switch {
		case r.na != "":
			r.op += " (" + r.na + ")"
		case len(r.s) == 0:
			// A row of a size, not a time (memory): its figure is in
			// the operation.
			med = "–"
		default:
			med, runs = ms(r.s.median()), fmt.Sprint(len(r.s))
			if d, ok := r.s.percentile(t.pct); ok {
				pct = ms(d)
			}
		}
		if r.files > 0 {
			files = count(r.files)
		}
		if t.changed {
			files += fmt.Sprintf(" | %d", r.changed)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.fs, files, r.op, med, pct, runs, dash(r.ratio), dash(r.target), dash(r.verdict))
	}
	return b.String()
}

func dash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// ms formats a duration in milliseconds with about three significant digits.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// count writes a number of files as 1k, 10k, 100k when it is one.
func count(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// ratio is "×N": how many times a takes b.
func ratio(a, b time.Duration) string {
	if b <= 0 {
		return ""
	}
	r := float64(a) / float64(b)
	if r >= 10 {
		return fmt.Sprintf("×%.0f", r)
	}
	return fmt.Sprintf("×%.1f", r)
}

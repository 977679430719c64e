package main

import (
	"fmt"
	"math"
	"runtime"
	"time"
)

// addCreateRows adds the rows of one client's creates in a row.
func addCreateRows(t *table, creates series, n int) {
	k := window(len(creates))
	firstS, lastS := creates[:k], creates[len(creates)-k:]
	first, last := firstS.median(), lastS.median()
	rate := float64(len(creates)) / sum(creates).Seconds()
	t.add(row{fs: "btrfs", files: n, s: firstS,
		op:      fmt.Sprintf("`CreateSandbox` until ready, one client, one after another, all kept: creates 1-%d (the baseline; %d creates, %.0f a second)", k, len(creates), rate),
		target:  fmt.Sprintf("p50 < %d ms", scaleP50/time.Millisecond),
		verdict: fmt.Sprintf("%s ms: %s", ms(first), metOrMissed(first < scaleP50))})
	flat := math.Round(float64(last)/float64(first)*10)/10 <= flatScale
	t.add(row{fs: "btrfs", files: n, s: lastS,
		op:      fmt.Sprintf("the same, creates %d-%d (%d live before each)", len(creates)-k+1, len(creates), len(creates)-k),
		ratio:   ratio(last, first),
		target:  fmt.Sprintf("within ×%.1f of 1-%d; p50 < %d ms", flatScale, k, scaleP50/time.Millisecond),
		verdict: fmt.Sprintf("%s; %s ms: %s", map[bool]string{true: "flat", false: "not flat"}[flat], ms(last), metOrMissed(last < scaleP50))})
}

// window is how many calls the first and the last windows of n hold:
// a hundred, or half of fewer (a short run, -live under 200).
func window(n int) int { return min(scaleHundred, n/2) }

// addParallelRows adds the rows of parallelClients creating at once,
// beside one client's creates in a row (seq).
func addParallelRows(t *table, par parallelRun, start time.Time, seq series, n int) {
	k := window(len(par.calls))
	one := float64(len(seq)) / sum(seq).Seconds()
	all := par.all()
	p99, _ := all.percentile(0.99)
	rate := par.perSecond()
	t.add(row{fs: "btrfs", files: n, s: all,
		op: fmt.Sprintf("`CreateSandbox`, %d clients at once until %d live: %.0f a second (one client: %.0f a second)",
			parallelClients, len(all), rate, one),
		target: fmt.Sprintf("≥ %.0f a second; p99 < %d ms", scaleRate, scaleP99/time.Millisecond),
		verdict: fmt.Sprintf("%.0f a second: %s; p99 %s ms: %s", rate, metOrMissed(rate >= scaleRate),
			ms(p99), metOrMissed(p99 < scaleP99))})
	for _, w := range [][2]int{{1, k}, {len(all) - k + 1, len(all)}} {
		s, r := par.window(w[0], w[1], start)
		t.add(row{fs: "btrfs", files: n, s: s,
			op:      fmt.Sprintf("the same, creates %d-%d to end: %.0f a second", w[0], w[1], r),
			verdict: metOrMissed(r >= scaleRate)})
	}
}

// addMemoryRows adds the daemon's and the inits' memory at live live,
// beside the daemon just started and one init alone.
func addMemoryRows(t *table, fresh, daemon, oneInit, inits memInfo, floors [2]memInfo, live int) {
	t.add(row{fs: "btrfs", op: fmt.Sprintf("sandboxd's VmRSS, %d live: %s, %d threads (just started, none live: %s, %d threads)",
		live, mib(daemon.rss), daemon.threads, mib(fresh.rss), fresh.threads),
		verdict: fmt.Sprintf("no target; %s, %s a sandbox", plusMiB(daemon.rss, fresh.rss), kib((int64(daemon.rss)-int64(fresh.rss))/int64(live)))})
	pss := inits.pss / uint64(live)
	t.add(row{fs: "btrfs", op: fmt.Sprintf("an idle sandbox's init, %d live: Pss %s (all: %s), RssAnon %s; alone (1 live): Pss %s, RssAnon %s",
		live, kib(int64(pss)), mib(inits.pss), kib(int64(inits.anon)/int64(live)), kib(int64(oneInit.pss)), kib(int64(oneInit.anon))),
		target:  fmt.Sprintf("Pss < %d KiB", initPssTarget>>10),
		verdict: metOrMissed(pss < initPssTarget)})
	for i, what := range []string{"the smallest Go program that waits for a signal (tests/bench/gosleep): the floor of an init in Go", "coreutils' `sleep` (C)"} {
		t.add(row{fs: "btrfs", op: fmt.Sprintf("%s, alone: Pss %s, RssAnon %s, %d threads", what, kib(int64(floors[i].pss)), kib(int64(floors[i].anon)), floors[i].threads)})
	}
}

// addPrimitiveRows adds each primitive of a create, alone, at 0 and at
// live live.
func addPrimitiveRows(t *table, at0, atN primitives, live int) {
	for _, p := range []struct {
		op   string
		a, b series
	}{
		{"btrfs: the two snapshots of a create (the project's read-only base, and the sandbox's writable one of it)", at0.snapshots, atN.snapshots},
		{"btrfs: an empty subvolume (a sandbox's layer)", at0.subvolume, atN.subvolume},
		{"btrfs: the three deleted", at0.deletes, atN.deletes},
		{"systemd: a scope of one process started, in a slice of sandboxes' scopes", at0.scope, atN.scope},
		{"systemd: the same in an empty slice", at0.scopeAlone, atN.scopeAlone},
		{"systemd: that scope stopped", at0.stop, atN.stop},
	} {
		t.add(row{fs: "btrfs", op: p.op + ", 0 live (the baseline)", s: p.a})
		t.add(row{fs: "btrfs", op: fmt.Sprintf("the same, %d live", live), s: p.b, ratio: ratio(p.b.median(), p.a.median())})
	}
}

// addCPURow adds the machine's CPU time per create: with every CPU busy,
// creates a second cannot pass CPUs ÷ that.
func addCPURow(t *table, r scaleResult, n int) {
	if r.seqBusy <= 0 || r.parBusy <= 0 {
		return
	}
	cpus := runtime.NumCPU()
	t.add(row{fs: "btrfs", files: n,
		op: fmt.Sprintf("CPU time of the whole machine per create (the daemon with the kernel's btrfs work it asks for, the init's start, systemd, dbus-daemon, journald): one client %s ms, %d clients %s ms",
			ms(r.seqBusy), parallelClients, ms(r.parBusy)),
		verdict: fmt.Sprintf("no target; %d CPUs at that cost make at most %.0f creates a second", cpus, float64(cpus)/r.parBusy.Seconds())})
}

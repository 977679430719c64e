package main

import (
	"fmt"
	"math"
	"runtime"
	"time"
)

// addWarmRows adds the pool part's rows: the floors, then one client's
// claims beside its full creates, 8 clients' the same, the fill and
// refill, and the CPU of each; a window that did not run has no row.
func addWarmRows(t *table, r warmResult) {
	add := func(w createWindow, x row) {
		if len(w.s) > 0 {
			x.fs, x.files, x.s = "btrfs", targetSize, w.s
			t.add(x)
		}
	}
	floor := r.ping0.median() + r.commit.median()
	if len(r.ping0) > 0 {
		t.add(row{fs: "btrfs", s: r.ping0,
			op:      "floor of any call: `Peer.Ping` of sandboxd over the system bus (dbus-daemon's two hops and godbus's dispatch, none of sandboxd's work), one client, 0 live",
			verdict: "the floor of a claim"})
	}
	if len(r.commit) > 0 {
		t.add(row{fs: "btrfs", s: r.commit,
			op:      "floor of a claim's record: a 4 KiB write and fdatasync, twice (what one bbolt commit syncs), in the daemon's state directory, no bbolt",
			verdict: fmt.Sprintf("with a Ping: %s ms, the floor of a claim that writes its record once", ms(floor))})
	}
	if len(r.pingPar.calls) > 0 {
		t.add(row{fs: "btrfs", s: r.pingPar.all(),
			op: fmt.Sprintf("floor of calls a second: Ping, %d clients at once, %d calls: %.0f a second; CPU per call: %s",
				parallelClients, len(r.pingPar.calls), r.pingPar.perSecond(), r.pingCPU),
			verdict: fmt.Sprintf("no claims a second beyond %.0f", r.pingPar.perSecond())})
	}
	if len(r.pingL) > 0 {
		t.add(row{fs: "btrfs", s: r.pingL, ratio: ratio(r.pingL.median(), r.ping0.median()),
			op: fmt.Sprintf("the same Ping, one client, %d live", r.live)})
	}

	// One client: full creates, then claims, at few and at -live live.
	add(r.offSeq0, row{op: fmt.Sprintf("`CreateSandbox` with the pool off (a full create), one client, creates 1-%d in a row: %.0f a second",
		r.k, r.offSeq0.rate), verdict: "the claims' baseline"})
	add(r.onSeq0, claimRow(r, r.onSeq0, r.offSeq0, 1, floor))
	if len(r.offSeqL.s) > 0 {
		first, last := r.offSeq0.s.median(), r.offSeqL.s.median()
		flat := math.Round(float64(last)/float64(first)*10)/10 <= flatScale
		add(r.offSeqL, row{ratio: ratio(last, first),
			op: fmt.Sprintf("the same, pool off, creates %d-%d (%d-%d live before each)",
				r.offSeqL.from+1, r.offSeqL.to, r.offSeqL.from, r.offSeqL.to-1),
			target:  fmt.Sprintf("within ×%.1f of 1-%d", flatScale, r.k),
			verdict: fmt.Sprintf("%s: %s of 1-%d", map[bool]string{true: "flat", false: "not flat"}[flat], ratio(last, first), r.k)})
	}
	add(r.onSeqL, claimRow(r, r.onSeqL, r.offSeqL, 1, floor))
	for _, p := range []struct {
		op   string
		a, b series
	}{
		{"floor of a full create: the two btrfs snapshots alone (the project's read-only base, the sandbox's writable one of it)", r.prim0.snapshots, r.primL.snapshots},
		{"floor of a full create: a scope of one process started through systemd, in a slice of the sandboxes' scopes", r.prim0.scope, r.primL.scope},
	} {
		if len(p.a) == 0 {
			continue
		}
		t.add(row{fs: "btrfs", files: targetSize, op: p.op + ", 0 live", s: p.a})
		if len(p.b) > 0 {
			t.add(row{fs: "btrfs", files: targetSize, op: fmt.Sprintf("the same, %d live", r.live), s: p.b, ratio: ratio(p.b.median(), p.a.median()),
				verdict: "no target; the machine's own growth"})
		}
	}

	// Eight clients: the same.
	for _, p := range [][2]createWindow{{r.offPar0, r.onPar0}, {r.offParL, r.onParL}} {
		off, on := p[0], p[1]
		add(off, row{op: fmt.Sprintf("`CreateSandbox` with the pool off, %d clients at once, %d → %d live: %.0f a second",
			parallelClients, off.from, off.to, off.rate), verdict: "the claims' baseline"})
		add(on, claimRow(r, on, off, parallelClients, floor))
	}

	// The pool making members on its own.
	oneRate := r.offSeq0.rate
	for _, f := range []struct {
		what string
		f    fill
	}{
		{"the pool's first fill, after the create that started it", r.firstFill},
		{fmt.Sprintf("its refill after %d clients' claims drained it", parallelClients), r.refill},
		{fmt.Sprintf("its refill after %d clients' claims drained it at %d live", parallelClients, r.onParL.to), r.refillL},
	} {
		if f.f.made == 0 {
			continue
		}
		t.add(row{fs: "btrfs", files: targetSize,
			op: fmt.Sprintf("%s (%d ready): %d made in %s s: %.1f a second; CPU per member %s",
				f.what, f.f.left, f.f.made, fmt.Sprintf("%.2f", f.f.took.Seconds()), f.f.rate(), f.f.cpu),
			verdict: fmt.Sprintf("no target; ×%.1f one client's full creates (%.0f a second, pool off)", f.f.rate()/oneRate, oneRate)})
	}

	if len(r.scan0.s) > 0 {
		t.add(row{fs: "btrfs", files: targetSize, s: r.scan0.s,
			op: fmt.Sprintf("what a pool adds to each member's create: `changewatch.Writers` of the project (every process's descriptors and mappings in /proc), %d processes, 0 live", r.scan0.procs)})
	}
	if len(r.scanL.s) > 0 {
		t.add(row{fs: "btrfs", files: targetSize, s: r.scanL.s, ratio: ratio(r.scanL.s.median(), r.scan0.s.median()),
			op:      fmt.Sprintf("the same, %d processes, %d live", r.scanL.procs, r.live),
			verdict: "no target; grows with the processes"})
	}

	addWarmCPURows(t, r)
}

// claimRow is the row of claims made by clients clients in window on,
// beside the full creates of off (the same clients, about as many live).
func claimRow(r warmResult, on, off createWindow, clients int, floor time.Duration) row {
	who := "one client"
	if clients > 1 {
		who = fmt.Sprintf("%d clients at once", clients)
	}
	x := row{
		op: fmt.Sprintf("claim: `CreateSandbox` from a full pool of %d, %s, %d → %d live: %.0f a second (%d claims, %d full creates; the pool made %d meanwhile)",
			r.size, who, on.from, on.to, on.rate, on.claims, on.misses, on.made),
		target: fmt.Sprintf("p50 < %d ms; p99 < %d ms", claimP50/time.Millisecond, claimP99/time.Millisecond),
	}
	if len(off.s) > 0 {
		x.ratio = ratio(on.s.median(), off.s.median())
	}
	v := latencyVerdict(on.s)
	if clients > 1 {
		x.target = fmt.Sprintf("≥ %.0f a second; ", claimRate) + x.target
		v = fmt.Sprintf("%.0f a second: %s", on.rate, metOrMissed(on.rate >= claimRate)) + "; " + v
		if off.rate > 0 {
			v += fmt.Sprintf("; ×%.1f the pool off's rate", on.rate/off.rate)
		}
	}
	if floor > 0 {
		v += fmt.Sprintf("; floor %s ms", ms(floor))
	}
	x.verdict = v
	return x
}

// latencyVerdict is a series' p50 and p99 against a claim's targets.
func latencyVerdict(s series) string {
	p50 := s.median()
	v := fmt.Sprintf("p50 %s ms: %s", ms(p50), metOrMissed(p50 < claimP50))
	if p99, ok := s.percentile(0.99); ok {
		return v + fmt.Sprintf("; p99 %s ms: %s", ms(p99), metOrMissed(p99 < claimP99))
	}
	return v + "; p99: too few calls"
}

// addWarmCPURows adds the CPU of a full create and of a claim, each
// window's, and of a member the pool makes, beside a Ping's.
func addWarmCPURows(t *table, r warmResult) {
	cpus := runtime.NumCPU()
	bound := func(c cpuCost) string {
		if c.machine <= 0 {
			return "no target"
		}
		return fmt.Sprintf("no target; %d CPUs at that cost: at most %.0f a second", cpus, float64(cpus)/c.machine.Seconds())
	}
	for _, w := range []struct {
		what string
		w    createWindow
	}{
		{fmt.Sprintf("one client, creates 1-%d", r.k), r.offSeq0},
		{fmt.Sprintf("%d clients, %d → %d live", parallelClients, r.offPar0.from, r.offPar0.to), r.offPar0},
	} {
		if w.w.cpu.n == 0 {
			continue
		}
		t.add(row{fs: "btrfs", files: targetSize,
			op:      fmt.Sprintf("CPU per full create (the pool off), %s: %s", w.what, w.w.cpu),
			verdict: bound(w.w.cpu)})
	}
	for _, w := range []struct {
		what    string
		w, full createWindow
	}{
		{"one client", r.onSeq0, r.offSeq0},
		{fmt.Sprintf("%d clients", parallelClients), r.onPar0, r.offPar0},
		{"one client", r.onSeqL, r.offSeqL},
		{fmt.Sprintf("%d clients", parallelClients), r.onParL, r.offParL},
	} {
		if w.w.cpu.n == 0 {
			continue
		}
		own := w.w.claimOnly()
		x := row{fs: "btrfs", files: targetSize,
			op: fmt.Sprintf("CPU per claim, %s, %d → %d live: %s; the pool's refill beside it made %d (at the nearest fill's %s ms of the machine each), without them: %s",
				w.what, w.w.from, w.w.to, w.w.cpu, w.w.made, ms(w.w.memberCost.machine), own),
			verdict: bound(own)}
		if w.full.cpu.n > 0 {
			x.ratio = ratio(own.machine, w.full.cpu.machine)
		}
		t.add(x)
	}
	if f := r.firstFill; f.made > 0 && r.offSeq0.cpu.n > 0 {
		t.add(row{fs: "btrfs", files: targetSize, ratio: ratio(f.cpu.machine, r.offSeq0.cpu.machine),
			op:      fmt.Sprintf("CPU per member the pool makes (its first fill): %s", f.cpu),
			verdict: bound(f.cpu)})
	}
	if r.pingCPU.n > 0 {
		t.add(row{fs: "btrfs",
			op:      fmt.Sprintf("floor: CPU per Ping, %d clients at once: %s", parallelClients, r.pingCPU),
			verdict: bound(r.pingCPU)})
	}
}

// warmNote says how the pool table was measured.
func warmNote(r warmResult) string {
	s := fmt.Sprintf("The project of %s files, the daemon with `userns = \"require\"` (as the scale part), the caps of `[limits]` lifted. "+
		"With the pool off: one untimed create and destroy; a create's primitives alone, %d times each, as the scale part's, and %d scans of /proc for the project's writers, as a pool does before each member (both again at -live live); %d Pings of the daemon one after another, then %d by %d clients at once, and %d rounds of the commit's floor; "+
		"%d clients create %d sandboxes at once, destroyed after; one client creates %d in a row, all kept, the first and last %d timed (each from the call to its reply, ready); "+
		"%d of them destroyed, and %d clients create %d at once, to %d live; all destroyed. "+
		"Then the daemon restarts with `[limits] pool = %d`: its first create (full) starts the pool of the project and the bench's owner (root), and the bench polls `ListPools` every %v until `ready` = `size`; "+
		"one client makes %d (kept), the pool is let fill, %d clients make %d at once, and the pool refills (its rate from then until full); "+
		"up to %d live by %d clients at once (untimed), the pool full again, then %d clients make %d at once and, the pool full again, one client %d, up to %d live. "+
		"Claims and full creates are ListPools' claims and misses over each window; a member made meanwhile is one more ready, claimed or found stale. "+
		"Live counts are listed sandboxes; the pool's members, unlisted, come beside them. "+
		"CPU time is over each window, per call: the machine's (/proc/stat: other work on the machine and the kernel's threads in it), the testbed's processes' (each one's own and its waited-for children's), and of these sandboxd's (with the kernel's work in its calls), systemd's (pid 1) and dbus-daemon's; "+
		"the pool refills beside the claims, so a claim's own is the window's less the members made meanwhile, each at the cost per member of the fill measured nearest in live count (an estimate). "+
		"Ratios: a claim against the full creates of the same clients at about the same live count, in the same run.",
		count(targetSize), primitiveReps, scanRuns, pingRuns, pingCalls, parallelClients, commitRuns,
		parallelClients, r.size, r.live, r.k, r.k+r.size, parallelClients, r.size, r.live-r.k,
		r.size, poolPoll, r.k, parallelClients, r.size, r.live-r.k-r.size, parallelClients, parallelClients, r.size, r.k, r.live)
	if !r.atLive {
		s += fmt.Sprintf("\n\n-live %d is too few for windows at -live after those at few live (at least %d): those rows did not run.", r.live, 2*(r.k+r.size)+1)
	}
	if r.poolMissing != "" {
		s += "\n\nThe pool's rows did not run: " + r.poolMissing
	}
	if len(r.leftovers) > 0 {
		s += "\n\n" + leftoverErr(r.leftovers).Error()
	}
	return s
}

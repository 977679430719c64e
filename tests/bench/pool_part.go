package main

// The pool part (issue 34): creates that claim a ready sandbox of a warm
// pool, beside full creates in the same run, with one client and with
// eight, at a few live and at -live; the pool's fill and refill rates;
// and the CPU a claim and a full create cost. All in the project of
// targetSize files, in user namespaces, as the scale part.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/units"
)

// Targets from the issue.
const (
	claimP50  = 2 * time.Millisecond
	claimP99  = 10 * time.Millisecond
	claimRate = 200.0 // creates a second, 8 clients, from a pool of 200
)

// Runs of the floors.
const (
	pingRuns   = 200 // one client's Pings
	pingCalls  = 1600
	commitRuns = 100
)

// createWindow is one series of creates: one client's in a row, or
// parallelClients' at once; and, with the pool on, what the pool did
// meanwhile.
type createWindow struct {
	s          series  // each call's time
	rate       float64 // calls a second, over the window
	cpu        cpuCost // per call
	from, to   int     // live sandboxes (listed ones) before and after
	pooled     bool    // the daemon had a pool
	claims     int     // of the calls, claims (ListPools' claims)
	misses     int     // and full creates (its misses)
	made       int     // members the pool finished meanwhile
	memberCost cpuCost // the CPU of one member made, for claimOnly
}

// claimOnly is the window's CPU per call less that of the members the
// pool made beside it, at memberCost each: an estimate of a claim's own.
func (w createWindow) claimOnly() cpuCost {
	if w.cpu.n == 0 {
		return w.cpu
	}
	less := func(all, member time.Duration) time.Duration {
		return max(0, all-time.Duration(w.made)*member/time.Duration(w.cpu.n))
	}
	c, m := w.cpu, w.memberCost
	return cpuCost{machine: less(c.machine, m.machine), testbed: less(c.testbed, m.testbed), daemon: less(c.daemon, m.daemon),
		systemd: less(c.systemd, m.systemd), dbus: less(c.dbus, m.dbus), n: c.n}
}

// fill is the pool making members with no create asking: from empty
// after its first create, or from drained after claims.
type fill struct {
	left, made int // ready when it began; members made until full
	took       time.Duration
	cpu        cpuCost // per member made
}

func (f fill) rate() float64 { return float64(f.made) / f.took.Seconds() }

// warmResult is what the pool part measured; a series that did not run
// is empty.
type warmResult struct {
	live, size, k int
	atLive        bool // the windows at -live ran (-live big enough)

	ping0, pingL series      // one client's Pings, at 0 and at -live live
	pingPar      parallelRun // 8 clients' Pings
	pingCPU      cpuCost
	commit       series
	// A full create's primitives alone, at 0 and at -live live, and the
	// scan of /proc a pool does before each member's snapshot.
	prim0, primL primitives
	scan0, scanL writerScan

	// With the pool off: one client's first and last k of -live creates
	// in a row, and 8 clients' creates at 0 and at -live.
	offSeq0, offSeqL, offPar0, offParL createWindow
	// With the pool on.
	firstFill, refill fill
	refillL           fill // after 8 clients' claims at -live
	onSeq0, onPar0    createWindow
	onSeqL, onParL    createWindow
	leftovers         []string
	poolMissing       string // why the pool rows did not run
}

// warmer makes the windows of one configuration.
type warmer struct {
	d       *daemon
	project string
	cpu     cpuReader
	pooled  bool
}

func newWarmer(ctx context.Context, d *daemon, project string) (*warmer, error) {
	cpu, err := newCPUReader(ctx, d)
	return &warmer{d: d, project: project, cpu: cpu, pooled: d.pool > 0}, err
}

// window makes n sandboxes, kept, with clients clients (1: one after
// another), and says how long each took, at what rate, for what CPU,
// and what the pool did meanwhile.
func (w *warmer) window(ctx context.Context, clients, n int, label string) (win createWindow, err error) {
	var before warmPool
	if w.pooled {
		if before, _, err = w.d.poolOf(ctx, w.project); err != nil {
			return win, err
		}
	}
	win.from, win.pooled = len(w.d.live), w.pooled
	win.cpu, err = w.cpu.window(func() (int, error) {
		start := time.Now()
		if clients == 1 {
			s, _, err := w.d.createMany(ctx, w.project, n, label)
			win.s, win.rate = s, float64(len(s))/time.Since(start).Seconds()
			return len(s), err
		}
		par, _, err := createParallel(ctx, w.project, n)
		for _, id := range par.ids {
			w.d.live[id] = true
		}
		win.s, win.rate = par.all(), par.perSecond()
		return len(par.calls), err
	})
	win.to = len(w.d.live)
	if err != nil {
		return win, fmt.Errorf("%s: %w", label, err)
	}
	if w.pooled {
		after, _, err := w.d.poolOf(ctx, w.project)
		if err != nil {
			return win, err
		}
		win.claims, win.misses = int(after.Claims-before.Claims), int(after.Misses-before.Misses)
		win.made = after.Ready - before.Ready + win.claims + int(after.Stale-before.Stale)
	}
	progress("pool: %s: %d in %.1f s (%.0f a second)", label, len(win.s), float64(len(win.s))/win.rate, win.rate)
	return win, nil
}

// waitFill waits until the pool is full and says how fast it filled
// from now, and for what CPU per member.
func (w *warmer) waitFill(ctx context.Context, label string) (f fill, err error) {
	p, _, err := w.d.poolOf(ctx, w.project)
	if err != nil {
		return f, err
	}
	start := time.Now()
	var full warmPool
	var end time.Time
	f.left = p.Ready
	f.cpu, err = w.cpu.window(func() (int, error) {
		var err error
		full, end, err = w.d.waitFull(ctx, w.project)
		return full.Size - p.Ready, err
	})
	if err != nil {
		return f, fmt.Errorf("%s: %w", label, err)
	}
	f.made, f.took = full.Size-p.Ready, end.Sub(start)
	progress("pool: %s: %d made in %v (%.0f a second)", label, f.made, f.took.Round(time.Millisecond), f.rate())
	return f, nil
}

// benchWarm is the pool part. The daemon runs with user namespaces (as
// in the scale part) and no pool, then with a pool of cfg.poolSize; each
// configuration makes its sandboxes in the same order, and destroys them
// all at its end.
func benchWarm(ctx context.Context, cfg config, d *daemon, fs *btrfsFS) (res warmResult, err error) {
	cleanup := context.WithoutCancel(ctx)
	project := projectName(targetSize)
	res.live, res.size = cfg.live, cfg.poolSize
	res.k = min(scaleHundred, cfg.poolSize)
	// The windows at -live (claims from live-k-size to live) must come
	// after the small ones (1 to 1+k+size).
	res.atLive = cfg.live-res.k-res.size >= 1+res.k+res.size
	if !d.userns || d.pool != 0 {
		d.pool = 0
		if err := d.reconfigure(ctx, true); err != nil {
			return res, err
		}
	}
	defer func() {
		err = errors.Join(err, warmTeardown(cleanup, d, fs, &res))
	}()
	if err := warmOff(ctx, cfg, d, fs, project, &res); err != nil {
		return res, fmt.Errorf("the pool off: %w", err)
	}
	if err := destroyAll(ctx, d, fs); err != nil {
		return res, err
	}
	// The pool on: a daemon without one refuses the configuration.
	if _, err := daemonConfig(d.configPath, d.root, d.projects, true, cfg.poolSize); err != nil {
		res.poolMissing = err.Error()
		return res, err
	}
	d.pool = cfg.poolSize
	if err := d.reconfigure(ctx, true); err != nil {
		return res, err
	}
	if err := warmOn(ctx, d, fs, project, &res); err != nil {
		return res, fmt.Errorf("the pool on: %w", err)
	}
	return res, nil
}

// warmOff measures the floors and the full creates the claims stand
// beside: 8 clients at 0 live (then destroyed), one client's -live in a
// row, and 8 clients again from -live less k and the pool's size.
func warmOff(ctx context.Context, cfg config, d *daemon, fs *btrfsFS, project string, res *warmResult) error {
	w, err := newWarmer(ctx, d, project)
	if err != nil {
		return err
	}
	// One create and destroy, untimed, as every part's first.
	warm, err := d.create(ctx, project)
	if err == nil {
		err = d.destroy(ctx, warm)
	}
	if err == nil {
		err = fs.settle(ctx)
	}
	if err != nil {
		return err
	}
	projectDir := filepath.Join(fs.mount, projectPath(targetSize))
	slice := units.ScopeSlice(0, "bench-pool.scope")
	if res.prim0, err = measurePrimitives(ctx, fs, projectDir, slice); err != nil {
		return err
	}
	if res.scan0, err = scanWriters(projectDir); err != nil {
		return err
	}
	if res.ping0, err = d.pings(ctx, pingRuns); err != nil {
		return err
	}
	res.pingCPU, err = w.cpu.window(func() (int, error) {
		res.pingPar, err = pingParallel(ctx, pingCalls)
		return len(res.pingPar.calls), err
	})
	if err != nil {
		return err
	}
	if res.commit, err = commitFloor(commitRuns); err != nil {
		return err
	}
	if res.offPar0, err = w.window(ctx, parallelClients, res.size, "pool off, 8 clients, 0 live"); err != nil {
		return err
	}
	if err := destroyAll(ctx, d, fs); err != nil {
		return err
	}
	k := res.k
	if res.offSeq0, err = w.window(ctx, 1, k, fmt.Sprintf("pool off, one client, creates 1-%d", k)); err != nil {
		return err
	}
	if _, _, err := d.createMany(ctx, project, max(0, cfg.live-2*k), "pool off, one client"); err != nil {
		return err
	}
	if res.offSeqL, err = w.window(ctx, 1, k, fmt.Sprintf("pool off, one client, creates %d-%d", cfg.live-k+1, cfg.live)); err != nil {
		return err
	}
	if res.pingL, err = d.pings(ctx, pingRuns); err != nil {
		return err
	}
	if res.primL, err = measurePrimitives(ctx, fs, projectDir, slice); err != nil {
		return err
	}
	if res.scanL, err = scanWriters(projectDir); err != nil {
		return err
	}
	if !res.atLive {
		return nil
	}
	// 8 clients from -live less k and the pool's size, as the claims
	// will be.
	var some []string
	for id := range d.live {
		if len(some) == res.k+res.size {
			break
		}
		some = append(some, id)
	}
	if _, err := destroyParallel(ctx, some); err != nil {
		return err
	}
	forget(d, some)
	if err := fs.settle(ctx); err != nil {
		return err
	}
	res.offParL, err = w.window(ctx, parallelClients, res.size, fmt.Sprintf("pool off, 8 clients, %d live", len(d.live)))
	return err
}

// warmOn measures the pool: its first fill, one client's claims and
// then 8 clients' from a full pool, its refill after them; and at -live
// less k and the pool's size, 8 clients' claims and then one client's,
// up to -live (the pool full before each).
func warmOn(ctx context.Context, d *daemon, fs *btrfsFS, project string, res *warmResult) error {
	w, err := newWarmer(ctx, d, project)
	if err != nil {
		return err
	}
	// The owner's first create of the project is a full one, and starts
	// the pool with its options.
	if _, err := d.create(ctx, project); err != nil {
		return err
	}
	if res.firstFill, err = w.waitFill(ctx, "first fill"); err != nil {
		return err
	}
	k := res.k
	if res.onSeq0, err = w.window(ctx, 1, k, "claims, one client"); err != nil {
		return err
	}
	if _, err := w.waitFill(ctx, "refill after one client's claims"); err != nil {
		return err
	}
	if res.onPar0, err = w.window(ctx, parallelClients, res.size, "claims, 8 clients"); err != nil {
		return err
	}
	if res.refill, err = w.waitFill(ctx, "refill after 8 clients' claims"); err != nil {
		return err
	}
	// A member's cost grows with the live count: each window's are
	// taken at the fill measured nearest to it.
	res.onSeq0.memberCost, res.onPar0.memberCost = res.firstFill.cpu, res.refill.cpu
	if !res.atLive {
		return nil
	}
	// Up to -live less the claims to come, 8 clients at once (claims and
	// full creates as the pool keeps up), untimed.
	up := res.live - k - res.size - len(d.live)
	progress("pool: %d more sandboxes, 8 clients at once, to %d live", up, res.live-k-res.size)
	par, _, err := createParallel(ctx, project, up)
	for _, id := range par.ids {
		d.live[id] = true
	}
	if err != nil {
		return err
	}
	if err := fs.settle(ctx); err != nil {
		return err
	}
	if _, err := w.waitFill(ctx, "refill before the claims at -live"); err != nil {
		return err
	}
	if res.onParL, err = w.window(ctx, parallelClients, res.size, fmt.Sprintf("claims, 8 clients, %d live", len(d.live))); err != nil {
		return err
	}
	if res.refillL, err = w.waitFill(ctx, "refill after 8 clients' claims at -live"); err != nil {
		return err
	}
	if res.onSeqL, err = w.window(ctx, 1, k, fmt.Sprintf("claims, one client, %d live", len(d.live))); err != nil {
		return err
	}
	res.onSeqL.memberCost, res.onParL.memberCost = res.refillL.cpu, res.refillL.cpu
	return nil
}

// destroyAll destroys every sandbox the bench made, 8 clients at once,
// and lets btrfs clean them up.
func destroyAll(ctx context.Context, d *daemon, fs *btrfsFS) error {
	var ids []string
	for id := range d.live {
		ids = append(ids, id)
	}
	_, err := destroyParallel(ctx, ids)
	forget(d, ids)
	return errors.Join(err, fs.settle(ctx))
}

// warmTeardown destroys what the part made, turns the pool off (its
// members are unlisted, and only the daemon can end them), and checks
// that nothing of a sandbox is left: what is, it stops and reports.
func warmTeardown(ctx context.Context, d *daemon, fs *btrfsFS, res *warmResult) error {
	err := destroyAll(ctx, d, fs)
	if d.pool != 0 {
		d.pool = 0
		err = errors.Join(err, d.reconfigure(ctx, true))
	}
	if err != nil {
		return err
	}
	// The daemon destroys what its predecessor pooled after it is ready,
	// one at a time: waited for while their number goes down.
	last, lastChange := -1, time.Now()
	for {
		left, err := d.leftovers(ctx)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if len(left) != last {
			last, lastChange = len(left), time.Now()
		}
		if time.Since(lastChange) > poolStall {
			res.leftovers = left
			for _, l := range left {
				if unit, ok := strings.CutPrefix(l, "unit "); ok {
					_, _ = tool(ctx, "systemctl", "stop", unit)
				}
			}
			return leftoverErr(left)
		}
		time.Sleep(10 * poolPoll) // systemctl lists every unit
	}
}

package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// benchDaemonSizes is the daemon part: creates, destroys, commands and
// memory, at each of daemonSizes (projects at dirs), in sandboxes without
// user namespaces. It returns, for each size, what benchUserNS measures
// again with them.
func benchDaemonSizes(ctx context.Context, cfg config, d *daemon, t *table, fs *btrfsFS, dirs map[int]string) ([]*withoutNS, error) {
	pid, idle, err := d.memory(ctx)
	if err != nil {
		return nil, err
	}
	var mem []row // memory rows, after the timings
	mem = append(mem, row{fs: "btrfs", op: fmt.Sprintf("sandboxd's VmRSS, no sandboxes (just started): %s, %d threads", mib(idle.rss), idle.threads)})

	var ref *sizeResult
	var without []*withoutNS
	for _, n := range daemonSizes {
		w := &withoutNS{files: n}
		res, rows, err := benchDaemonSize(ctx, cfg, d, t, fs, n, dirs[n], ref, pid, idle, w)
		mem = append(mem, rows...)
		if err != nil {
			return nil, err
		}
		if ref == nil {
			ref = res
		}
		without = append(without, w)
	}
	_, after, err := d.memory(ctx)
	if err != nil {
		return nil, err
	}
	mem = append(mem, row{fs: "btrfs",
		op:      fmt.Sprintf("sandboxd's VmRSS, no sandboxes again (after %d creates and destroys): %s, %d threads", len(daemonSizes)*(cfg.creates+1), mib(after.rss), after.threads),
		verdict: fmt.Sprintf("no target; %s over just started", plusMiB(after.rss, idle.rss))})
	for _, r := range mem {
		t.add(r)
	}
	return without, nil
}

// projectName is the daemon's name of the project of n files.
func projectName(n int) string { return "bench-" + count(n) }

// projectPath is where the project of n files is, under the btrfs mount.
func projectPath(n int) string { return fmt.Sprintf("bench-daemon-p%d", n) }

// benchDaemonSize times cfg.creates CreateSandbox calls of the project of n
// files, one after the other, then measures memory with them all live,
// then times DestroySandbox of each; then `cp -a` of the project. It adds
// the timing rows to t and returns the memory rows. pid is the daemon's,
// and idle its memory with no sandboxes. The creates and the commands,
// and where their rows are, go in w.
func benchDaemonSize(ctx context.Context, cfg config, d *daemon, t *table, fs *btrfsFS, n int, dir string,
	ref *sizeResult, pid int, idle memInfo, w *withoutNS) (res *sizeResult, mem []row, err error) {
	label := "daemon " + count(n)
	project := projectName(n)
	begin := time.Now()
	// One untimed create and destroy: the first of a project pays for
	// cold caches of its subvolume.
	id, err := d.create(ctx, project)
	if err != nil {
		return nil, nil, fmt.Errorf("%s (warm-up): %w", label, err)
	}
	if err := d.checkUserNS(id); err != nil {
		return nil, nil, fmt.Errorf("%s (warm-up): %w", label, err)
	}
	if err := d.destroy(ctx, id); err != nil {
		return nil, nil, fmt.Errorf("%s (warm-up): %w", label, err)
	}
	var destroys series
	creates, ids, err := d.createMany(ctx, project, cfg.creates, label)
	if err != nil {
		return nil, nil, err
	}
	progress("%s: warm-up and %d creates in %v", label, len(ids), time.Since(begin).Round(time.Millisecond))

	// Memory while they all live.
	now, m, err := d.memory(ctx)
	if err != nil {
		return nil, nil, err
	}
	if now != pid {
		return nil, nil, fmt.Errorf("%s: sandboxd restarted during the creates (pid %d, was %d): see journalctl -u %s", label, now, pid, daemonUnit)
	}
	r := row{fs: "btrfs", files: n,
		op: fmt.Sprintf("sandboxd's VmRSS, %d live sandboxes: %s, %d threads", len(ids), mib(m.rss), m.threads)}
	r.verdict = fmt.Sprintf("%s over no sandboxes, %s a sandbox", plusMiB(m.rss, idle.rss), kib((int64(m.rss)-int64(idle.rss))/int64(len(ids))))
	if len(ids) == rssLive {
		r.target = fmt.Sprintf("< %d MiB with %d live", rssTarget>>20, rssLive)
		r.verdict = fmt.Sprintf("%s: %s; %s", mib(m.rss), metOrMissed(m.rss < rssTarget), r.verdict)
	}
	mem = append(mem, r)
	if n == daemonSizes[len(daemonSizes)-1] {
		ir, err := d.initMemory(ctx, ids)
		if err != nil {
			return nil, mem, err
		}
		ir.files = n
		mem = append(mem, ir)
	}

	begin = time.Now()
	for _, id := range ids {
		dt, err := timed(func() error { return d.destroy(ctx, id) })
		if err != nil {
			return nil, mem, fmt.Errorf("%s (destroy %d): %w", label, len(destroys)+1, err)
		}
		destroys = append(destroys, dt)
	}
	progress("%s: %d destroys in %v", label, len(destroys), time.Since(begin).Round(time.Millisecond))

	res = &sizeResult{files: n, snapshot: creates.median(), dele: destroys.median()}
	// A create gets slower as sandboxes pile up (each is two more btrfs
	// subvolumes, and a snapshot's commit grows with them): the medians
	// of the first and last tenth of the calls show by how much.
	k := max(1, len(creates)/10)
	cr := row{fs: "btrfs", files: n, s: creates,
		op: fmt.Sprintf("`CreateSandbox` over the system bus, until ready, without a user namespace; calls 1-%d: %s ms, %d-%d: %s ms; max %s ms",
			k, ms(creates[:k].median()), len(creates)-k+1, len(creates), ms(creates[len(creates)-k:].median()), ms(creates.max())),
		target: fmt.Sprintf("p50 < %d ms; flat", createTarget/time.Millisecond)}
	dr := row{fs: "btrfs", files: n, s: destroys,
		op: fmt.Sprintf("`DestroySandbox` of each; max %s ms", ms(destroys.max()))}
	verdicts := []string{"reference size"}
	if ref != nil {
		verdicts = []string{flatness(res.snapshot, ref.snapshot, n, ref.files)}
		dr.verdict = fmt.Sprintf("no target; %s of %s", ratio(res.dele, ref.dele), count(ref.files))
	}
	verdicts = append(verdicts, fmt.Sprintf("%s ms: %s", ms(res.snapshot), metOrMissed(res.snapshot < createTarget)))
	cr.verdict = strings.Join(verdicts, "; ")
	w.create, w.createRow = creates, len(t.rows)
	t.add(cr)
	t.add(dr)

	// Commands, and the copy a naive sandbox would make, on the same
	// filesystem; the destroyed snapshots are cleaned first, untimed.
	if err := fs.settle(ctx); err != nil {
		return nil, mem, err
	}
	live, err := d.create(ctx, project)
	if err != nil {
		return nil, mem, err
	}
	if err := benchRuntime(ctx, cfg, d, t, project, n, live, w); err != nil {
		return nil, mem, err
	}
	if err := d.destroy(ctx, live); err != nil {
		return nil, mem, err
	}
	if err := fs.settle(ctx); err != nil {
		return nil, mem, err
	}
	cp, err := benchCopy(ctx, cfg, &pool{name: "btrfs", fs: fs}, label, dir, n, false)
	if err != nil {
		return nil, mem, err
	}
	cp.fs, cp.files, cp.op = "btrfs", n, "`cp -a` of the project"
	cp.ratio = ratio(cp.s.median(), res.snapshot)
	t.add(cp)
	return res, mem, nil
}

// createMany times n creates of project in a row, and returns their times
// and the sandboxes, live.
func (d *daemon) createMany(ctx context.Context, project string, n int, label string) (series, []string, error) {
	var creates series
	var ids []string
	for range n {
		var id string
		dt, err := timed(func() (err error) {
			id, err = d.create(ctx, project)
			return err
		})
		if err != nil {
			return creates, ids, fmt.Errorf("%s (create %d): %w", label, len(ids)+1, err)
		}
		creates, ids = append(creates, dt), append(ids, id)
	}
	return creates, ids, nil
}

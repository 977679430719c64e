package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The fork part (issue 31): N forks of a sandbox of the 100k-file project
// that wrote 10k files of its own, until all are ready, beside N creates
// from the project and N `cp -a --reflink=always` of the sandbox's tree.

// forkCounts are the forks one Fork call makes, a row each.
var forkCounts = []int{1, 3, 10}

const (
	forkWritten = 10_000 // files the source sandbox writes before its forks
	forkReps    = 5      // timed runs of each fork and create series
	// forkWithin is the target: N forks within ×1.5 of N creates.
	forkWithin = 1.5
)

// forkNote says what the fork table measured.
const forkNote = "The source is a sandbox of the 100k-file project that wrote 10k files of 20-30 bytes " +
	"(100 per directory, by a shell loop spawned in it) before the first fork. " +
	"`Fork` is one call over the system bus with `Count` N, timed from the call until each fork's `State` reads ready; " +
	"the N creates are N `CreateSandbox` calls in a row from the project (each returns once ready); " +
	"the copies are N `cp -a --reflink=always` of the source's tree (its `Path`), each into a new subvolume of the same btrfs, their times summed: each copy is deleted and the filesystem settled, untimed, before the next (ten whole copies of the tree at once do not fit the testbed's pool), write-back excluded. " +
	"Each run's sandboxes and copies are destroyed and cleaned, untimed, before the next. " +
	"The row of a fork of a fresh sandbox (nothing written) shows whether a fork grows with what the source wrote. " +
	"Up to 5 runs of forks and creates (one untimed first), fewer once a series took the budget; the copies as the cowfs table's."

// benchForks adds the fork rows to t, and to its note where a fork ×1's
// time went. The project of targetSize files is the daemon's
// projectName(targetSize).
func benchForks(ctx context.Context, cfg config, d *daemon, t *table, fs *btrfsFS) (err error) {
	cleanup := context.WithoutCancel(ctx)
	project := projectName(targetSize)
	mode := "without a user namespace"
	if d.userns {
		mode = "in user namespaces"
	}
	// A fresh sandbox first: the reference a fork must stay flat against.
	fresh, err := d.create(ctx, project)
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	defer func() { err = errors.Join(err, d.destroy(cleanup, fresh)) }()
	src, err := d.create(ctx, project)
	if err != nil {
		return fmt.Errorf("fork: %w", err)
	}
	defer func() { err = errors.Join(err, d.destroy(cleanup, src), fs.settle(cleanup)) }()
	begin := time.Now()
	write := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do d=written/$((i/100)); [ -d $d ] || mkdir -p $d; echo "written by the sandbox $i" >$d/f$i; i=$((i+1)); done; sync`, forkWritten)
	if _, err := d.runToEnd(ctx, src, "sh", "-c", write); err != nil {
		return fmt.Errorf("fork: writing %d files in the source sandbox: %w", forkWritten, err)
	}
	progress("fork: the source sandbox %s wrote %d files in %v", src, forkWritten, time.Since(begin).Round(time.Millisecond))
	var tree string
	if err := d.sandbox(src).StoreProperty(sandboxd1.Member(sandboxd1.SandboxInterface, sandboxd1.PropPath), &tree); err != nil {
		return fmt.Errorf("fork: reading the source's Path: %w", err)
	}
	if err := fs.settle(ctx); err != nil {
		return err
	}

	freshForks, err := d.timeForks(ctx, cfg, fs, fresh, 1, "fork ×1 of a fresh sandbox")
	if err != nil {
		return err
	}
	for _, n := range forkCounts {
		since := time.Now()
		forks, err := d.timeForks(ctx, cfg, fs, src, n, fmt.Sprintf("fork ×%d", n))
		if err != nil {
			return err
		}
		forkSteps, err := d.journalSteps(ctx, since, "sandbox forked")
		if err != nil {
			return err
		}
		forkCreateSteps, err := d.journalSteps(ctx, since, "sandbox created")
		if err != nil {
			return err
		}
		since = time.Now()
		creates, err := d.timeCreates(ctx, cfg, fs, project, n)
		if err != nil {
			return err
		}
		createSteps, err := d.journalSteps(ctx, since, "sandbox created")
		if err != nil {
			return err
		}
		if n == 1 {
			t.note = fmt.Sprintf("Where a fork ×1's time went (medians, ms, from the daemon's journal lines, warm-up included; steps marked (beside) ran beside the others): the fork's own %s; its fork's create %s; a create from the project %s.",
				stepMedians(forkSteps), stepMedians(forkCreateSteps), stepMedians(createSteps))
		}
		copies, err := timeCopies(ctx, cfg, fs, tree, n)
		if err != nil {
			return err
		}
		fr := row{fs: "btrfs", files: targetSize, s: forks,
			op:     fmt.Sprintf("`Fork` ×%d of a sandbox that wrote %s files, %s, until all are ready", n, count(forkWritten), mode),
			ratio:  ratio(forks.median(), creates.median()),
			target: fmt.Sprintf("≤ ×%g of %d creates", forkWithin, n)}
		within := float64(forks.median()) <= forkWithin*float64(creates.median())
		fr.verdict = fmt.Sprintf("%s: %s of %d creates", metOrMissed(within), ratio(forks.median(), creates.median()), n)
		if n == 1 {
			fr.verdict += "; " + flatness(forks.median(), freshForks.median(), forkWritten, 1)
		}
		t.add(fr)
		t.add(row{fs: "btrfs", files: targetSize, s: creates, ratio: "×1",
			op: fmt.Sprintf("%d `CreateSandbox` in a row from the project, %s, each until ready", n, mode)})
		t.add(row{fs: "btrfs", files: targetSize, s: copies, ratio: ratio(copies.median(), creates.median()),
			op: fmt.Sprintf("%d `cp -a --reflink=always` of the sandbox's tree, one at a time (each deleted, untimed, before the next), summed", n)})
	}
	t.add(row{fs: "btrfs", files: targetSize, s: freshForks,
		op: fmt.Sprintf("`Fork` ×1 of a fresh sandbox (nothing written), %s, until ready", mode)})
	return nil
}

// fork makes n forks of sandbox id with one Fork call and returns them
// once each one's State reads ready.
func (d *daemon) fork(ctx context.Context, id string, n int) ([]string, error) {
	var ids, notCarried []string
	opts := map[string]dbus.Variant{sandboxd1.OptCount: dbus.MakeVariant(uint32(n))}
	if err := d.call(ctx, id, sandboxd1.MethodFork, []any{opts}, &ids, &notCarried); err != nil {
		return nil, err
	}
	for _, f := range ids {
		d.live[f] = true
	}
	if len(ids) != n {
		return ids, fmt.Errorf("forking sandbox %s %d ways: %d forks made", id, n, len(ids))
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	for _, f := range ids {
		for {
			var state string
			if err := d.sandbox(f).StoreProperty(sandboxd1.Member(sandboxd1.SandboxInterface, sandboxd1.PropState), &state); err != nil {
				return ids, fmt.Errorf("reading fork %s's state: %w", f, err)
			}
			if state == "ready" {
				break
			}
			select {
			case <-ctx.Done():
				return ids, fmt.Errorf("waiting for fork %s to be ready (%s): %w", f, state, ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	return ids, nil
}

// timeMade times makeSome, which makes sandboxes, in a loop named label;
// each run's sandboxes are destroyed after it, and then fs, if not nil,
// settled.
func (d *daemon) timeMade(ctx context.Context, cfg config, fs *btrfsFS, label string, makeSome func() ([]string, error)) (series, error) {
	var s series
	l := loop{reps: forkReps, min: minReps, budget: cfg.budget}
	err := l.run(ctx, label, func(warm bool) (err error) {
		var ids []string
		dt, err := timed(func() (err error) {
			ids, err = makeSome()
			return err
		})
		for _, id := range ids {
			err = errors.Join(err, d.destroy(context.WithoutCancel(ctx), id))
		}
		if fs != nil {
			err = errors.Join(err, fs.settle(context.WithoutCancel(ctx)))
		}
		if err != nil {
			return err
		}
		if !warm {
			s = append(s, dt)
		}
		return nil
	})
	return s, err
}

// timeForks times forks of src n ways, each run's forks destroyed after
// and fs settled, as the creates' (a fork's snapshot commits would wait
// on the btrfs cleaner's work of the last run's deletes otherwise).
func (d *daemon) timeForks(ctx context.Context, cfg config, fs *btrfsFS, src string, n int, label string) (series, error) {
	return d.timeMade(ctx, cfg, fs, label, func() ([]string, error) { return d.fork(ctx, src, n) })
}

// timeCreates times n creates in a row from project, destroyed after.
func (d *daemon) timeCreates(ctx context.Context, cfg config, fs *btrfsFS, project string, n int) (series, error) {
	return d.timeMade(ctx, cfg, fs, fmt.Sprintf("fork: %d creates", n), func() (ids []string, err error) {
		for range n {
			id, err := d.create(ctx, project)
			if err != nil {
				return ids, err
			}
			ids = append(ids, id)
		}
		return ids, nil
	})
}

// timeCopies times n `cp -a --reflink=always` of tree, each into a new
// subvolume of the same btrfs, deleted and settled untimed before the
// next (ten whole copies do not fit the pool); a run is their sum.
func timeCopies(ctx context.Context, cfg config, fs *btrfsFS, tree string, n int) (series, error) {
	var s series
	cleanup := context.WithoutCancel(ctx)
	l := loop{reps: cfg.copyReps, min: 1, budget: cfg.budget}
	err := l.run(ctx, fmt.Sprintf("fork: %d reflink copies", n), func(warm bool) error {
		var sum time.Duration
		for i := range n {
			dt, err := timeCopy(ctx, cleanup, fs, tree, fmt.Sprintf("bench-fork-copy-%d", i))
			if err != nil {
				return err
			}
			sum += dt
		}
		if !warm {
			s = append(s, sum)
		}
		return nil
	})
	return s, err
}

// timeCopy times one `cp -a --reflink=always` of tree into a new
// subvolume name, deleted after and the filesystem settled.
func timeCopy(ctx, cleanup context.Context, fs *btrfsFS, tree, name string) (dt time.Duration, err error) {
	to, err := fs.newScratch(ctx, name)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, fs.dropScratch(cleanup, name), fs.settle(cleanup)) }()
	return timed(func() error {
		if out, err := command(ctx, "cp", "-a", "--reflink=always", tree, filepath.Join(to, "tree")).CombinedOutput(); err != nil {
			return fmt.Errorf("copying %s: %w: %s", tree, err, firstLine(string(out)))
		}
		return nil
	})
}

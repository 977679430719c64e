package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
)

// Targets from the issue.
const (
	targetSize     = 100000
	snapshotTarget = 10 * time.Millisecond // btrfs snapshot at targetSize files
	changesTarget  = 10 * time.Millisecond // btrfs Changes of 10 changes at targetSize files
	// flatWithin is how much slower than at the smallest size a snapshot
	// may be at a larger one and still count as flat (O(1)): run-to-run
	// noise on a busy 2-core machine is of this order.
	flatWithin = 1.5
)

// bigTree is the size from which a cp runs -copy-reps times, not -reps.
const bigTree = 10000

// benchPool measures every size on one filesystem, smallest first, and
// lists the changes in the largest project.
func benchPool(ctx context.Context, cfg config, p *pool, t *table) error {
	sizes := slices.Clone(cfg.sizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	var ref *sizeResult // the smallest size, for flatness
	var ran []string
	defer func() {
		if len(ran) > 0 {
			t.ran = append(t.ran, p.name+": "+strings.Join(ran, ", "))
		}
	}()
	for i, n := range sizes {
		res, err := benchSize(ctx, cfg, p, t, n, i == len(sizes)-1, ref)
		if err != nil {
			return err
		}
		ran = append(ran, count(n))
		if ref == nil {
			ref = res
		}
	}
	return nil
}

// sizeResult is what later sizes compare with.
type sizeResult struct {
	files          int
	snapshot, dele time.Duration // medians
}

func benchSize(ctx context.Context, cfg config, p *pool, t *table, n int, largest bool, ref *sizeResult) (res *sizeResult, err error) {
	label := fmt.Sprintf("%s %s", p.name, count(n))
	b := p.backend
	cleanup := context.WithoutCancel(ctx)
	location, dir, err := p.fs.newProject(ctx, fmt.Sprintf("bench-p%d", n))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, p.fs.dropProject(cleanup, location)) }()
	if err := generate(ctx, label, dir, n); err != nil {
		return nil, err
	}
	if err := p.fs.settle(ctx); err != nil {
		return nil, err
	}
	project, err := b.Project(ctx, location)
	if err != nil {
		return nil, err
	}
	base, err := b.Snapshot(ctx, project, "base", true)
	if err != nil {
		return nil, fmt.Errorf("making the base: %w", err)
	}
	// On ZFS the base cannot go while volumes made from it remain: then
	// dropProject (-R) takes them all.
	defer func() {
		if derr := b.Delete(cleanup, base); derr != nil && err == nil {
			err = fmt.Errorf("deleting the base: %w", derr)
		}
	}()

	// What making and removing a sandbox costs.
	var snaps, dels series
	k := 0
	l := loop{reps: cfg.reps, min: minReps, budget: cfg.budget}
	err = l.run(ctx, label+": snapshot and delete", func(warm bool) error {
		k++
		var v cowfs.Volume
		ds, err := timed(func() (err error) {
			v, err = b.Snapshot(ctx, base, fmt.Sprintf("sandbox%d", k), false)
			return err
		})
		if err != nil {
			return fmt.Errorf("snapshotting the base: %w", err)
		}
		dd, err := timed(func() error { return b.Delete(ctx, v) })
		if err != nil {
			return fmt.Errorf("deleting a snapshot: %w", err)
		}
		if !warm {
			snaps, dels = append(snaps, ds), append(dels, dd)
		}
		return p.fs.settle(ctx)
	})
	if err != nil {
		return nil, err
	}
	res = &sizeResult{files: n, snapshot: snaps.median(), dele: dels.median()}
	snapRow := row{fs: p.name, files: n, op: "cowfs Snapshot (writable, of the base)", s: snaps, target: "flat"}
	delRow := row{fs: p.name, files: n, op: "cowfs Delete (of that snapshot)", s: dels}
	verdicts := []string{"reference size"}
	if ref != nil {
		verdicts = []string{flatness(res.snapshot, ref.snapshot, n, ref.files)}
		delRow.verdict = fmt.Sprintf("no target; %s of %s", ratio(res.dele, ref.dele), count(ref.files))
	}
	if p.name == "btrfs" {
		snapRow.target = fmt.Sprintf("flat; < %d ms at %s", snapshotTarget/time.Millisecond, count(targetSize))
		if n == targetSize {
			verdicts = append(verdicts, fmt.Sprintf("%s ms: %s", ms(res.snapshot), metOrMissed(res.snapshot < snapshotTarget)))
		}
	}
	snapRow.verdict = strings.Join(verdicts, "; ")
	t.add(snapRow)
	t.add(delRow)

	// The same tree copied, into a fresh volume of the same pool each run.
	for _, reflink := range []bool{false, true} {
		r, err := benchCopy(ctx, cfg, p, label, dir, n, reflink)
		if err != nil {
			return nil, err
		}
		r.fs, r.files = p.name, n
		if r.na == "" {
			r.ratio = ratio(r.s.median(), res.snapshot)
		}
		t.add(r)
	}

	if largest {
		if err := benchChanges(ctx, cfg, p, t, label, base, n); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// flatness says whether d, a median at n files, is flat: within
// flatWithin of ref, the median at refFiles files.
func flatness(d, ref time.Duration, n, refFiles int) string {
	// Compared as printed (one decimal), so that "×1.5" never reads as
	// "not flat".
	r := math.Round(float64(d)/float64(ref)*10) / 10
	word := "flat"
	if r > flatWithin {
		word = "not flat"
	}
	return fmt.Sprintf("%s: %s of %s, for ×%g the files", word, ratio(d, ref), count(refFiles), float64(n)/float64(refFiles))
}

func metOrMissed(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// benchCopy times `cp -a` (with --reflink=always when reflink) of the
// project's tree of n files into a new scratch volume.
func benchCopy(ctx context.Context, cfg config, p *pool, label, dir string, n int, reflink bool) (row, error) {
	argv := []string{"cp", "-a"}
	op := "`cp -a`"
	if reflink {
		argv = append(argv, "--reflink=always")
		op = "`cp -a --reflink=always`"
	}
	r := row{op: op}
	const scratch = "bench-copy"
	cleanup := context.WithoutCancel(ctx)
	// Small trees copy in well under a second: they get as many runs as
	// snapshots. Big ones on zfs-fuse take a minute: one run may be all
	// the budget allows.
	l := loop{reps: cfg.reps, min: 1, budget: cfg.budget}
	if n >= bigTree {
		l.reps = cfg.copyReps
	}
	err := l.run(ctx, fmt.Sprintf("%s: %s", label, op), func(warm bool) (err error) {
		to, err := p.fs.newScratch(ctx, scratch)
		if err != nil {
			return err
		}
		defer func() {
			err = errors.Join(err, p.fs.dropScratch(cleanup, scratch), p.fs.settle(cleanup))
		}()
		var out []byte
		d, err := timed(func() (err error) {
			out, err = command(ctx, append(argv, dir, filepath.Join(to, "tree"))...).CombinedOutput()
			return err
		})
		if err != nil {
			return fmt.Errorf("copying: %w: %s", err, firstLine(string(out)))
		}
		if !warm {
			r.s = append(r.s, d)
		}
		return nil
	})
	// What zfs-fuse cannot do is a result, not a failure: it has no clone
	// ioctl (EOPNOTSUPP), and across datasets, which are separate mounts,
	// the kernel refuses before asking it (EXDEV).
	if err != nil && reflink && ctx.Err() == nil && p.name == "zfs" &&
		(strings.Contains(err.Error(), "not supported") || strings.Contains(err.Error(), "cross-device")) {
		r.na = "n/a: zfs-fuse has no reflink"
		progress("%s: %s: not supported here", label, op)
		return r, nil
	}
	return r, err
}

// stderrOf is the first line a failed command printed on standard error.
func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return firstLine(string(exit.Stderr))
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// benchChanges makes a sandbox of the base, changes 10 files in it, takes
// a checkpoint, and times listing what changed from the base to the
// checkpoint: cowfs Changes, then rsync's dry run over the same two trees.
func benchChanges(ctx context.Context, cfg config, p *pool, t *table, label string, base cowfs.Volume, n int) (err error) {
	b := p.backend
	cleanup := context.WithoutCancel(ctx)
	sandbox, err := b.Snapshot(ctx, base, "sandbox", false)
	if err != nil {
		return fmt.Errorf("making the sandbox: %w", err)
	}
	defer func() {
		if derr := b.Delete(cleanup, sandbox); derr != nil {
			err = errors.Join(err, fmt.Errorf("deleting the sandbox: %w", derr))
		}
	}()
	if err := makeChanges(sandbox.Path, n); err != nil {
		return fmt.Errorf("changing the sandbox: %w", err)
	}
	if err := p.fs.settle(ctx); err != nil {
		return err
	}
	checkpoint, err := b.Snapshot(ctx, sandbox, "checkpoint", true)
	if err != nil {
		return fmt.Errorf("making the checkpoint: %w", err)
	}
	defer func() {
		if derr := b.Delete(cleanup, checkpoint); derr != nil {
			err = errors.Join(err, fmt.Errorf("deleting the checkpoint: %w", derr))
		}
	}()

	how := "send stream"
	if p.name == "zfs" {
		how = "zfs diff"
		if !b.Info().Capabilities.FastChanges {
			how = "walks both trees: zfs-fuse has no `zfs diff`"
		}
	}
	var changes series
	var found []cowfs.Change
	l := loop{reps: cfg.reps, min: minReps, budget: cfg.budget}
	err = l.run(ctx, label+": cowfs Changes", func(warm bool) error {
		d, err := timed(func() (err error) {
			found, err = b.Changes(ctx, base, checkpoint)
			return err
		})
		if err != nil {
			return fmt.Errorf("listing changes: %w", err)
		}
		if !warm {
			changes = append(changes, d)
		}
		return nil
	})
	if err != nil {
		return err
	}
	cr := row{fs: p.name, files: n, s: changes,
		op: fmt.Sprintf("cowfs Changes, %d changes (%s): %d listed", changeCount, how, len(found))}
	if p.name == "btrfs" {
		cr.target = fmt.Sprintf("< %d ms at %s", changesTarget/time.Millisecond, count(targetSize))
		if n == targetSize {
			cr.verdict = fmt.Sprintf("%s ms: %s", ms(changes.median()), metOrMissed(changes.median() < changesTarget))
		} else {
			cr.verdict = "not measured at " + count(targetSize)
		}
	}
	t.add(cr)

	rr := row{fs: p.name, files: n}
	if _, err := exec.LookPath("rsync"); err != nil {
		rr.op, rr.na = "`rsync -an --delete --itemize-changes`", "n/a: rsync not installed"
		t.add(rr)
		return nil
	}
	// What would make the base like the checkpoint: the changes from one
	// to the other, as rsync sees them (size and mtime, then by name).
	argv := []string{"rsync", "-an", "--delete", "--itemize-changes", checkpoint.Path + "/", base.Path + "/"}
	var items int
	var rsyncs series
	err = l.run(ctx, label+": rsync", func(warm bool) error {
		var out []byte
		d, err := timed(func() (err error) {
			out, err = command(ctx, argv...).Output()
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, stderrOf(err))
		}
		items = strings.Count(string(out), "\n")
		if !warm {
			rsyncs = append(rsyncs, d)
		}
		return nil
	})
	if err != nil {
		return err
	}
	rr.op = fmt.Sprintf("`rsync -an --delete --itemize-changes`, same trees: %d lines", items)
	rr.s = rsyncs
	rr.ratio = ratio(rsyncs.median(), changes.median())
	t.add(rr)
	return nil
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	dbtrfs "github.com/dennwc/btrfs"
	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// The promotion part measures what getting a sandbox's change back costs,
// through the daemon as an agent calls it: the change list (the Sandbox
// Diff method) and a promotion (Promote, then GetPromotion until the
// record says done), beside rsync of the same change from the sandbox's
// tree to a copy of the project, in the same run.

// Targets from the issue.
const (
	promoteTarget  = 20 * time.Millisecond // 10 changed files promoted at targetSize files, p50
	promoteTargetN = 10                    // the change promoteTarget is for
)

const (
	// pollEvery is how long the bench waits between two GetPromotion
	// calls. A call takes about half a millisecond; the promotion's own
	// record says when it was done, to the microsecond, so the poll only
	// has to notice it.
	pollEvery = time.Millisecond
	// rsyncCopyA and rsyncCopyB are the copies of the project rsync
	// writes to: snapshots of it, beside it on the same filesystem.
	rsyncCopyA = "bench-rsync-a"
	rsyncCopyB = "bench-rsync-b"
)

// promoSample is what one repetition measured.
type promoSample struct {
	diff, promote              time.Duration
	call, stage, rest          time.Duration // promote, split by the record's times
	byRecord                   time.Duration // promote until the record's time of done
	dry, full, files           time.Duration // the rsync baselines
	cold                       time.Duration // the untimed dry run, the first over both trees
	listed, recorded, dryLines int
}

// promoSeries is the samples of one project size and change size.
type promoSeries struct {
	n, changed int
	clustered  bool // the changed files are next to each other, not spread
	mix        changeMix
	samples    []promoSample
}

func (ps *promoSeries) pick(f func(promoSample) time.Duration) series {
	var s series
	for _, x := range ps.samples {
		s = append(s, f(x))
	}
	return s
}

// benchPromotions times Diff and promotions of each of cfg.changes
// changed files in the project of targetSize files, and of the fewest in
// the project of 1k files (to show that the cost does not follow the
// project), beside rsync of the same change; then the fewest once more,
// next to each other instead of spread over the tree. dirs are the
// projects' paths by size.
func benchPromotions(ctx context.Context, cfg config, d *daemon, fs *btrfsFS, t *table, dirs map[int]string) error {
	if _, err := command(ctx, "rsync", "--version").Output(); err != nil {
		return fmt.Errorf("rsync, the baseline, is not installed: %w", err)
	}
	changes := slices.Sorted(slices.Values(cfg.changes))
	small := changes[0]
	type run struct {
		n, changed int
		clustered  bool
	}
	runs := []run{{n: daemonSizes[0], changed: small}}
	for _, c := range changes {
		runs = append(runs, run{n: targetSize, changed: c})
	}
	// And the smallest change once more, in one part of the tree.
	runs = append(runs, run{n: targetSize, changed: small, clustered: true})
	var ref *promoSeries // the smallest change in the 1k project
	var first *promoSeries
	used := map[int]touched{} // by project size
	for _, r := range runs {
		if used[r.n] == nil {
			used[r.n] = touched{}
		}
		ps, err := benchPromotion(ctx, cfg, d, fs, r.n, dirs[r.n], r.changed, r.clustered, used[r.n])
		if err != nil {
			return err
		}
		if ref == nil {
			ref = ps
		} else if first == nil {
			first = ps
		}
		addPromotionRows(t, ps, ref, first)
	}
	// The floor: the rollback point and the change made durable, alone.
	floor, err := promotionFloor(ctx, cfg, fs, targetSize, dirs[targetSize], small, used[targetSize])
	if err != nil {
		return err
	}
	t.add(row{fs: "btrfs", files: targetSize, changed: small, s: floor,
		op:      fmt.Sprintf("the floor, no sandboxd: a read-only snapshot of the project (a rollback point), %d files changed in its tree as above, spread, and syncfs", small),
		target:  fmt.Sprintf("< %d ms", promoteTarget/time.Millisecond),
		verdict: fmt.Sprintf("%s ms: %s; what a promotion that keeps a rollback point and syncs cannot go below", ms(floor.median()), metOrMissed(floor.median() < promoteTarget))})
	return nil
}

// benchPromotion runs the repetitions of one project size and change
// size; each makes a sandbox, changes it, and promotes it.
func benchPromotion(ctx context.Context, cfg config, d *daemon, fs *btrfsFS, n int, dir string, changed int, clustered bool, used touched) (*promoSeries, error) {
	ps := &promoSeries{n: n, changed: changed, clustered: clustered}
	label := fmt.Sprintf("promotion %s, %d changed", count(n), changed)
	if clustered {
		label += " in one place"
	}
	l := loop{reps: cfg.promoteReps, min: minReps, budget: cfg.budget}
	err := l.run(ctx, label, func(warm bool) error {
		s, mix, err := promoteOnce(ctx, d, fs, n, dir, changed, clustered, warm, used)
		if err != nil {
			return err
		}
		ps.mix = mix
		if !warm {
			ps.samples = append(ps.samples, s)
		}
		return nil
	})
	return ps, err
}

// promoteOnce is one repetition, in a new sandbox of the project of n
// files at dir: it makes the change (in files no earlier run touched,
// next to each other if clustered), then times the daemon's Diff, its
// promotion until done, and, once the project is checked to have the
// change, rsync of the same change to two copies of the project as it was
// before.
//
// rsync comes last because it reads the sandbox's tree from outside,
// where reading a directory or a file sets its access time, and the
// change list would then hold those too (see tests/bench/README.md). A warm-up run
// (warm) leaves rsync out, and so does a clustered change, whose rsync
// costs what the same change spread over the tree does.
func promoteOnce(ctx context.Context, d *daemon, fs *btrfsFS, n int, dir string, changed int, clustered, warm bool, used touched) (s promoSample, mix changeMix, err error) {
	cleanup := context.WithoutCancel(ctx)
	project := projectName(n)
	id, err := d.create(ctx, project)
	if err != nil {
		return s, mix, err
	}
	defer func() {
		if derr := d.destroy(cleanup, id); derr != nil && err == nil {
			err = derr
		}
	}()
	var tree string
	if err := d.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id)).StoreProperty(sandboxd1.SandboxInterface+".Path", &tree); err != nil {
		return s, mix, fmt.Errorf("finding the tree of sandbox %s: %w", id, err)
	}
	mix, err = changeFiles(tree, n, changed, clustered, used)
	if err != nil {
		return s, mix, fmt.Errorf("changing sandbox %s: %w", id, err)
	}

	// The baselines' copies of the project as it is now (the sandbox's
	// base): writable snapshots of it, which rsync reads and writes like
	// any tree. The filesystem settles after, untimed: the change's dirty
	// data is written back, and deleted volumes are cleaned.
	baselines := !warm && !clustered
	copies := []string{filepath.Join(fs.mount, rsyncCopyA), filepath.Join(fs.mount, rsyncCopyB)}
	defer func() {
		for _, c := range copies {
			err = errors.Join(err, deleteSubvolume(c))
		}
	}()
	if baselines {
		for _, c := range copies {
			if err := dbtrfs.SnapshotSubVolume(dir, c, false); err != nil {
				return s, mix, fmt.Errorf("copying the project for rsync: %w", err)
			}
		}
	}
	if err := fs.settle(ctx); err != nil {
		return s, mix, err
	}

	var listed []sandboxd1.ChangeEntry
	if s.diff, err = timed(func() error { listed, err = d.diff(ctx, id); return err }); err != nil {
		return s, mix, err
	}
	s.listed = len(listed)
	// The diff's snapshot is deleted when it returns: its cleaning is
	// waited for, so that it does not run during the promotion.
	if err := fs.settle(ctx); err != nil {
		return s, mix, err
	}

	begin := time.Now()
	pid, err := d.promote(ctx, id)
	if err != nil {
		return s, mix, err
	}
	replied := time.Since(begin)
	p, err := d.waitPromotion(ctx, pid)
	s.promote = time.Since(begin)
	if err != nil {
		return s, mix, err
	}
	s.recorded = p.Changes
	s.call = replied
	if len(p.Stages) > 0 && !p.Stages[0].Started.IsZero() && !p.Stages[0].Ended.IsZero() {
		st := p.Stages[0]
		s.stage = st.Ended.Sub(st.Started)
		s.rest = p.Updated.Sub(st.Ended)
	}
	s.byRecord = p.Updated.Sub(begin)
	if err := checkPromoted(dir, tree, mix); err != nil {
		return s, mix, err
	}
	if !baselines {
		return s, mix, nil
	}
	return s, mix, rsyncBaselines(ctx, &s, tree, copies[0], copies[1], mix)
}

// rsyncBaselines times, from the sandbox's tree: a dry run that lists the
// change (Diff's baseline) and `rsync -a --delete` of the whole tree into
// full, after an untimed dry run that warms both trees' caches; then
// `rsync -a --files-from` of just the changed paths into ideal.
func rsyncBaselines(ctx context.Context, s *promoSample, tree, ideal, full string, mix changeMix) error {
	run := func(stdin string, argv ...string) (time.Duration, string, error) {
		cmd := command(ctx, argv...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		var out []byte
		d, err := timed(func() (err error) { out, err = cmd.Output(); return err })
		if err != nil {
			return d, "", fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, stderrOf(err))
		}
		return d, string(out), nil
	}
	dry := []string{"rsync", "-an", "--delete", "--itemize-changes", tree + "/", full + "/"}
	var err error
	if s.cold, _, err = run("", dry...); err != nil {
		return err
	}
	var out string
	if s.dry, out, err = run("", dry...); err != nil {
		return err
	}
	s.dryLines = strings.Count(out, "\n")
	if s.full, _, err = run("", "rsync", "-a", "--delete", tree+"/", full+"/"); err != nil {
		return err
	}
	list := strings.Join(mix.paths(), "\n") + "\n"
	if s.files, _, err = run(list, "rsync", "-a", "--files-from=-", "--delete-missing-args", tree+"/", ideal+"/"); err != nil {
		return err
	}
	// Both copies must have the change, or the baseline did less.
	for _, c := range []string{full, ideal} {
		if err := checkPromoted(c, tree, mix); err != nil {
			return fmt.Errorf("rsync's copy: %w", err)
		}
	}
	return nil
}

// changeMix is one repetition's change, as paths relative to the tree.
type changeMix struct {
	modified, added, deleted []string
}

func (m changeMix) paths() []string {
	return slices.Concat(m.modified, m.added, m.deleted)
}

func (m changeMix) String() string {
	return fmt.Sprintf("%d modified, %d added, %d deleted", len(m.modified), len(m.added), len(m.deleted))
}

// touched remembers, per project, the files an earlier run changed: a
// run changes others, so that a file deleted by one promotion is not
// modified by the next.
type touched map[int]bool

// pick is the first file from start on, and before end, that no run has
// touched.
func (t touched) pick(start, end int) (int, bool) {
	for i := start; i < end; i++ {
		if !t[i] {
			t[i] = true
			return i, true
		}
	}
	return 0, false
}

// changeFiles changes `changed` files of the tree of a project of n
// files: of each 10, 6 modified (a line appended), 3 added (in the
// directory of another changed file) and 1 deleted, each a file no
// earlier run touched. They are spread evenly over the tree, or, if
// clustered, next to each other from the middle of the tree on (10 in
// one directory).
func changeFiles(tree string, n, changed int, clustered bool, used touched) (changeMix, error) {
	var m changeMix
	stride := n / changed
	next := n / 2
	for k := range changed {
		var i int
		var ok bool
		if clustered {
			i, ok = used.pick(next, n)
			next = i + 1
		} else {
			i, ok = used.pick(k*stride, (k+1)*stride)
		}
		if !ok {
			return m, fmt.Errorf("changing %d of %d files once more: earlier runs have changed all the files they may", changed, n)
		}
		rel := filePath(i)
		path := filepath.Join(tree, rel)
		switch k % 10 {
		case 6, 7, 8:
			rel = filepath.Join(filepath.Dir(rel), fmt.Sprintf("added%d.go", i))
			if err := os.WriteFile(filepath.Join(tree, rel), content(n+k), 0o644); err != nil {
				return m, fmt.Errorf("adding a file: %w", err)
			}
			m.added = append(m.added, rel)
		case 9:
			if err := os.Remove(path); err != nil {
				return m, fmt.Errorf("deleting a file: %w", err)
			}
			m.deleted = append(m.deleted, rel)
		default:
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return m, fmt.Errorf("modifying a file: %w", err)
			}
			_, err = f.WriteString("// changed in the sandbox\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return m, fmt.Errorf("modifying a file: %w", err)
			}
			m.modified = append(m.modified, rel)
		}
	}
	return m, nil
}

// checkPromoted checks that the tree at dst has the change made in the
// sandbox's tree at src: a modified and an added file the same, a deleted
// one gone.
func checkPromoted(dst, src string, m changeMix) error {
	for _, rel := range []string{m.modified[0], m.added[0]} {
		want, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil {
			return fmt.Errorf("%s lacks the change: %w", dst, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s lacks the change: %s differs from the sandbox's", dst, rel)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, m.deleted[0])); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s lacks the change: %s, deleted in the sandbox, is still there (%v)", dst, m.deleted[0], err)
	}
	return nil
}

// diff calls Diff on sandbox id: its change list since its base.
func (d *daemon) diff(ctx context.Context, id string) ([]sandboxd1.ChangeEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var out []sandboxd1.ChangeEntry
	if err := d.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id)).CallWithContext(ctx, sandboxd1.SandboxInterface+".Diff", 0).Store(&out); err != nil {
		return nil, fmt.Errorf("listing the changes of sandbox %s: %w", id, err)
	}
	return out, nil
}

// promote starts promoting sandbox id and returns the promotion's id.
func (d *daemon) promote(ctx context.Context, id string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var pid string
	err := d.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id)).CallWithContext(ctx, sandboxd1.SandboxInterface+".Promote", 0, map[string]dbus.Variant{}).Store(&pid)
	if err != nil {
		return "", fmt.Errorf("promoting sandbox %s: %w", id, err)
	}
	return pid, nil
}

// waitPromotion calls GetPromotion until promotion pid has ended, and
// returns its record; a promotion that ended otherwise than done is an
// error.
func (d *daemon) waitPromotion(ctx context.Context, pid string) (state.Promotion, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	for {
		var p state.Promotion
		var record string
		if err := d.manager().CallWithContext(ctx, sandboxd1.ManagerInterface+".GetPromotion", 0, pid).Store(&record); err != nil {
			return p, fmt.Errorf("reading promotion %s: %w", pid, err)
		}
		if err := json.Unmarshal([]byte(record), &p); err != nil {
			return p, fmt.Errorf("reading promotion %s: %w", pid, err)
		}
		switch p.State {
		case state.PromotionRunning:
		case state.PromotionDone:
			return p, nil
		default:
			return p, fmt.Errorf("promotion %s ended %s: %s", pid, p.State, p.Error)
		}
		select {
		case <-ctx.Done():
			return p, fmt.Errorf("waiting for promotion %s: %w", pid, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// addPromotionRows adds the rows of one series: Diff and the promotion,
// each beside its rsync baselines (but a clustered change's: they are
// those of the same change spread). ref is the smallest change in the 1k
// project, first the smallest spread in the large one (nil while ps is
// either).
func addPromotionRows(t *table, ps, ref, first *promoSeries) {
	pick := func(f func(promoSample) time.Duration) series { return ps.pick(f) }
	diffOf := func(s promoSample) time.Duration { return s.diff }
	promoteOf := func(s promoSample) time.Duration { return s.promote }
	diff, prom := pick(diffOf), pick(promoteOf)
	last := ps.samples[len(ps.samples)-1]
	add := func(r row) {
		r.fs, r.files, r.changed = "btrfs", ps.n, ps.changed
		t.add(r)
	}
	// growth compares ps with the series it answers to: the 1k project
	// for the smallest change (is it flat in the project?), the smallest
	// change for the larger ones (how does it grow with the change?).
	growth := func(f func(promoSample) time.Duration) string {
		med := pick(f).median()
		switch {
		case ps == ref:
			return "reference size"
		case ps.clustered:
			return fmt.Sprintf("%s of the same change spread over the tree", ratio(med, first.pick(f).median()))
		case ps == first:
			return flatness(med, ref.pick(f).median(), ps.n, ref.n)
		}
		return fmt.Sprintf("%s of %d changed, for ×%g the change", ratio(med, first.pick(f).median()), first.changed, float64(ps.changed)/float64(first.changed))
	}
	// The targets: the cost flat in the project (the smallest
	// change, 1k against 100k files) and 10 files promoted in 20 ms.
	var flat, timed string
	if ps == ref || ps == first {
		flat = "flat in the project"
	}
	if ps.n == targetSize && ps.changed == promoteTargetN {
		timed = fmt.Sprintf("< %d ms", promoteTarget/time.Millisecond)
	}
	verdict := func(target, growth string) string {
		if target == "" {
			return "no target; " + growth
		}
		return growth
	}
	where := "spread over the tree"
	if ps.clustered {
		where = "next to each other (one directory)"
	}
	add(row{s: diff, target: flat, verdict: verdict(flat, growth(diffOf)),
		op: fmt.Sprintf("`Diff` over the system bus (the change list) of %s, %s: %d entries", ps.mix, where, last.listed)})
	if !ps.clustered {
		dry := pick(func(s promoSample) time.Duration { return s.dry })
		cold := pick(func(s promoSample) time.Duration { return s.cold })
		add(row{s: dry, ratio: ratio(dry.median(), diff.median()),
			op: fmt.Sprintf("`rsync -an --delete --itemize-changes`, the sandbox's tree to a copy of the project: %d lines (the first run over both trees, untimed here, took %s ms)",
				last.dryLines, ms(cold.median())),
			verdict: "no target; " + growth(func(s promoSample) time.Duration { return s.dry })})
	}

	call := pick(func(s promoSample) time.Duration { return s.call }).median()
	stage := pick(func(s promoSample) time.Duration { return s.stage }).median()
	rest := pick(func(s promoSample) time.Duration { return s.rest }).median()
	rec := pick(func(s promoSample) time.Duration { return s.byRecord }).median()
	target := strings.Join(slices.DeleteFunc([]string{timed, flat}, func(s string) bool { return s == "" }), "; ")
	pv := verdict(target, growth(promoteOf))
	if timed != "" {
		pv = fmt.Sprintf("%s ms: %s; %s", ms(prom.median()), metOrMissed(prom.median() < promoteTarget), pv)
	}
	add(row{s: prom, target: target, verdict: pv,
		op: fmt.Sprintf("`Promote` until `GetPromotion` says done (%d in the change set): the call %s ms (source snapshot, change list, rollback point, conflicts), "+
			"the stage %s ms (apply, syncfs), %s ms more to done; %s ms by the record's time of done",
			last.recorded, ms(call), ms(stage), ms(rest), ms(rec))})
	if ps.clustered {
		return
	}
	full := pick(func(s promoSample) time.Duration { return s.full })
	files := pick(func(s promoSample) time.Duration { return s.files })
	add(row{s: full, ratio: ratio(full.median(), prom.median()),
		op:      "`rsync -a --delete`, the whole tree, the sandbox's to a copy of the project",
		verdict: "no target; " + growth(func(s promoSample) time.Duration { return s.full })})
	add(row{s: files, ratio: ratio(files.median(), prom.median()),
		op:      "`rsync -a --files-from --delete-missing-args` of just the changed paths (the ideal baseline)",
		verdict: "no target; " + growth(func(s promoSample) time.Duration { return s.files })})
}

// printPromotions prints the promotion table and what it measured.
func printPromotions(w *os.File, cfg config, pr *table) {
	fmt.Fprint(w, "\nsandboxd's diff and promotion, over the system bus, beside rsync of the same change:\n\n"+pr.markdown())
	fmt.Fprintf(w, "\nEach run makes a new sandbox of the project (the daemon's, as above) and changes files in its tree from outside: "+
		"of each 10, 6 modified (a line appended), 3 added, 1 deleted; spread evenly over the tree, or, in the last rows, next to each other; "+
		"files no other run touched. Two writable snapshots of the project are taken as rsync's copies, and the filesystem settles (dirty data written back, "+
		"deleted subvolumes cleaned), untimed. Then `Diff` on the sandbox's object, timed from the call to its reply; the filesystem settles again; "+
		"then `Promote` (no checks, the one stage \"project\"), timed from the call until a `GetPromotion` (called every %v) reads done, "+
		"so the promotion's syncfs is in it. Its split comes from its record: the call is until `Promote` replies, the stage from the stage's start to its end, "+
		"the rest until the record says done; \"by the record\" is from the call to the record's time of done. The project is checked to have the change. "+
		"Then, from the sandbox's tree, rsync: an untimed dry run (the first over both trees, which warms their caches), the timed dry run, "+
		"`rsync -a --delete` of the whole tree into one copy, and `rsync -a --files-from=- --delete-missing-args` of the changed paths into the other; "+
		"each copy is checked to have the change; rsync's times stop when it exits (no write-back). "+
		"One untimed warm-up run (without rsync), then %d runs per series (fewer once a series has taken %v, at least 3); medians. "+
		"The change next to each other runs no rsync: the rows above are its baseline. The promotions change the projects, so this part runs last.\n",
		pollEvery, cfg.promoteReps, cfg.budget)
}

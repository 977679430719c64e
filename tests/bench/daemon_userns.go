package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// The daemon part's second pass: the same daemon restarted with each
// sandbox in a user namespace of its own (`[sandbox] userns = "require"`),
// so that a create also maps a block of host ids and makes idmapped mounts
// of the root's layers, the sandbox's volume and the project, and a command
// joins the namespace. Only CreateSandbox and Exec of `true` run again,
// with the same counts; their rows stand beside the first pass's, with the
// difference of the medians: what the namespace and its mounts cost.

// withoutNS is what the first pass measured at one project size, in
// sandboxes without user namespaces, and where its rows are in the table.
type withoutNS struct {
	files              int
	create, exec       series
	createRow, execRow int
}

// checkUserNS checks that sandbox id has a user namespace if the daemon
// was configured to give one, and none if not: the rows say which.
func (d *daemon) checkUserNS(id string) error {
	ids, err := d.hostIDs(id)
	if err != nil {
		return err
	}
	switch {
	case d.userns && len(ids) != 2:
		return fmt.Errorf("sandbox %s has no user namespace (HostIDs %v), though the daemon's configuration requires one", id, ids)
	case !d.userns && len(ids) != 0:
		return fmt.Errorf("sandbox %s has a user namespace (host ids %v), though the daemon's configuration says off", id, ids)
	case d.userns:
		progress("daemon: sandbox %s maps host ids %d-%d", id, ids[0], ids[1])
	}
	return nil
}

// benchUserNS restarts the daemon with user namespaces and times, at each
// size the first pass ran (without), cfg.creates creates in a row and
// Exec of `true` in a live sandbox, as the first pass did. It puts each
// row just under the first pass's row of the same call and size. The
// daemon is left with user namespaces.
func benchUserNS(ctx context.Context, cfg config, d *daemon, t *table, fs *btrfsFS, without []*withoutNS) error {
	if err := d.reconfigure(ctx, true); err != nil {
		return err
	}
	null, err := os.Open("/dev/null")
	if err != nil {
		return err
	}
	defer null.Close()
	type placed struct {
		at int
		r  row
	}
	var rows []placed
	var ref series // the first size's creates, for flatness
	for _, w := range without {
		creates, err := createSeries(ctx, cfg, d, fs, w.files)
		if err != nil {
			return err
		}
		if ref == nil {
			ref = creates
		}
		direct, inside, err := execSeries(ctx, cfg, d, fs, w.files, null)
		if err != nil {
			return err
		}
		rows = append(rows,
			placed{w.createRow, usernsCreateRow(w, creates, ref, without[0].files)},
			placed{w.execRow, usernsExecRow(w, direct, inside)})
	}
	// From the last row up, so that each insertion leaves the indices
	// of those still to come as they were.
	slices.SortStableFunc(rows, func(a, b placed) int { return b.at - a.at })
	for _, p := range rows {
		t.insert(p.at+1, p.r)
	}
	return nil
}

// createSeries times cfg.creates CreateSandbox calls in a row of the
// project of n files, after one untimed create and destroy, then destroys
// them all; as benchDaemonSize does, but without the memory.
func createSeries(ctx context.Context, cfg config, d *daemon, fs *btrfsFS, n int) (series, error) {
	label := "daemon " + count(n) + " in user namespaces"
	project := projectName(n)
	// Like the first pass's series, each starts on a settled filesystem.
	if err := fs.settle(ctx); err != nil {
		return nil, err
	}
	begin := time.Now()
	id, err := d.create(ctx, project)
	if err != nil {
		return nil, fmt.Errorf("%s (warm-up): %w", label, err)
	}
	if err := d.checkUserNS(id); err != nil {
		return nil, fmt.Errorf("%s (warm-up): %w", label, err)
	}
	if err := d.destroy(ctx, id); err != nil {
		return nil, fmt.Errorf("%s (warm-up): %w", label, err)
	}
	creates, ids, err := d.createMany(ctx, project, cfg.creates, label)
	if err != nil {
		return nil, err
	}
	progress("%s: warm-up and %d creates in %v", label, len(ids), time.Since(begin).Round(time.Millisecond))
	// Destroys are timed for the progress line only: this pass's rows
	// are creates and commands.
	begin = time.Now()
	var destroys series
	for _, id := range ids {
		dt, err := timed(func() error { return d.destroy(ctx, id) })
		if err != nil {
			return nil, fmt.Errorf("%s (destroy %d): %w", label, len(destroys)+1, err)
		}
		destroys = append(destroys, dt)
	}
	progress("%s: %d destroys in %v, median %s ms", label, len(destroys), time.Since(begin).Round(time.Millisecond), ms(destroys.median()))
	return creates, nil
}

// execSeries times Exec of `true` in a live sandbox of the project of n
// files, beside `true` forked by the bench, as benchRuntime does.
func execSeries(ctx context.Context, cfg config, d *daemon, fs *btrfsFS, n int, null *os.File) (direct, inside series, err error) {
	if err := fs.settle(ctx); err != nil {
		return nil, nil, err
	}
	live, err := d.create(ctx, projectName(n))
	if err != nil {
		return nil, nil, err
	}
	direct, inside, err = execTimes(ctx, cfg, d, live, null)
	if err != nil {
		return nil, nil, err
	}
	return direct, inside, d.destroy(ctx, live)
}

// usernsCreateRow is the row of creates in user namespaces at w's size,
// against w's creates without; ref is the creates in user namespaces of
// the first size (refFiles files).
func usernsCreateRow(w *withoutNS, creates, ref series, refFiles int) row {
	k := max(1, len(creates)/10)
	p50, before := creates.median(), w.create.median()
	verdicts := []string{fmt.Sprintf("%s ms over without (%s)", plusMs(p50-before), ratio(p50, before))}
	if w.files != refFiles {
		verdicts = append(verdicts, flatness(p50, ref.median(), w.files, refFiles))
	}
	verdicts = append(verdicts, fmt.Sprintf("%s ms: %s", ms(p50), metOrMissed(p50 < createTarget)))
	return row{fs: "btrfs", files: w.files, s: creates,
		op: fmt.Sprintf("`CreateSandbox` as above, in a user namespace of its own (host ids mapped, idmapped mounts of the root's %d layers, the volume and the project); calls 1-%d: %s ms, %d-%d: %s ms; max %s ms",
			len(rootLayers), k, ms(creates[:k].median()), len(creates)-k+1, len(creates), ms(creates[len(creates)-k:].median()), ms(creates.max())),
		target:  fmt.Sprintf("p50 < %d ms; flat", createTarget/time.Millisecond),
		verdict: strings.Join(verdicts, "; "),
	}
}

// usernsExecRow is the row of Exec of `true` in a sandbox in a user
// namespace, beside its own baseline (direct) and against w's Exec
// without.
func usernsExecRow(w *withoutNS, direct, inside series) row {
	over := inside.median() - direct.median()
	return row{fs: "btrfs", files: w.files, s: inside,
		op: fmt.Sprintf("`Exec` of `true` in a live sandbox in a user namespace, until `CommandExited`: %s ms over its own baseline (`true` forked by the bench beside each call: %s ms)",
			ms(over), ms(direct.median())),
		ratio:  ratio(inside.median(), direct.median()),
		target: fmt.Sprintf("overhead < %d ms", execOverheadTarget/time.Millisecond),
		verdict: fmt.Sprintf("%s ms over without (%s); %s", plusMs(inside.median()-w.exec.median()),
			ratio(inside.median(), w.exec.median()), metOrMissed(over < execOverheadTarget)),
	}
}

// plusMs is a difference of times in ms with its sign: "+3.12", "-0.40".
func plusMs(d time.Duration) string {
	if d < 0 {
		return "-" + ms(-d)
	}
	return "+" + ms(d)
}

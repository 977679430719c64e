package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// Targets of the runtime (issue 6).
const (
	execOverheadTarget = 5 * time.Millisecond  // Exec of `true` in a live sandbox, over running it directly
	firstCommandTarget = 30 * time.Millisecond // create + first command, at targetSize files
	execRuns           = 200
)

// benchRuntime measures commands in sandboxes of project (n files):
// `true` by Exec in a live sandbox (until CommandExited) beside `true`
// forked directly by this program, and a whole create + first command +
// destroy beside `unshare` of the same namespaces running `true`. The
// sandboxes have no user namespace; the Exec times, and where their row
// is, go in w.
func benchRuntime(ctx context.Context, cfg config, d *daemon, t *table, project string, n int, live string, w *withoutNS) error {
	null, err := os.Open("/dev/null")
	if err != nil {
		return err
	}
	defer null.Close()
	direct, inside, err := execTimes(ctx, cfg, d, live, null)
	if err != nil {
		return err
	}
	over := inside.median() - direct.median()
	t.add(row{fs: "btrfs", files: n, s: direct, op: "`true` forked and waited for by the bench itself (the baseline)"})
	w.exec, w.execRow = inside, len(t.rows)
	t.add(row{fs: "btrfs", files: n, s: inside,
		op:      fmt.Sprintf("`Exec` of `true` in a live sandbox without a user namespace, until `CommandExited`: %s ms over the baseline", ms(over)),
		ratio:   ratio(inside.median(), direct.median()),
		target:  fmt.Sprintf("overhead < %d ms", execOverheadTarget/time.Millisecond),
		verdict: metOrMissed(over < execOverheadTarget)})

	// Create + first command, the sandboxes kept (as an agent trying
	// several approaches side by side), then the whole cycle of create,
	// command and destroy, one after another.
	runs := max(cfg.creates/4, minReps)
	var unshare, first, cycle series
	var kept []string
	defer func() {
		for _, id := range kept {
			_ = d.destroy(context.WithoutCancel(ctx), id)
		}
	}()
	for range runs {
		du, err := timed(func() error {
			return exec.CommandContext(ctx, "unshare", "--mount", "--pid", "--fork", "--net", "--uts", "--ipc", "/bin/true").Run()
		})
		if err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		var id string
		df, err := timed(func() (err error) {
			if id, err = d.create(ctx, project); err != nil {
				return err
			}
			return d.execTrue(ctx, id, null)
		})
		if err != nil {
			return fmt.Errorf("create + first command of %s: %w", project, err)
		}
		unshare, first, kept = append(unshare, du), append(first, df), append(kept, id)
	}
	for len(kept) > 0 {
		if err := d.destroy(ctx, kept[0]); err != nil {
			return err
		}
		kept = kept[1:]
	}
	progress("create+exec: %d runs", runs)
	if err := (loop{reps: runs, min: minReps, budget: cfg.budget}).run(ctx, "create+exec+destroy", func(warm bool) error {
		dt, err := timed(func() error {
			id, err := d.create(ctx, project)
			if err != nil {
				return err
			}
			if err := d.execTrue(ctx, id, null); err != nil {
				return err
			}
			return d.destroy(ctx, id)
		})
		if !warm {
			cycle = append(cycle, dt)
		}
		return err
	}); err != nil {
		return fmt.Errorf("create + first command + destroy of %s: %w", project, err)
	}
	r := row{fs: "btrfs", files: n, s: first, op: fmt.Sprintf("`CreateSandbox` + `Exec` of `true` until `CommandExited`, %d in a row, kept", runs),
		ratio: ratio(first.median(), unshare.median())}
	if n == targetSize {
		r.target = fmt.Sprintf("< %d ms", firstCommandTarget/time.Millisecond)
		r.verdict = metOrMissed(first.median() < firstCommandTarget)
	}
	t.add(r)
	t.add(row{fs: "btrfs", files: n, s: cycle, op: "create, `true`, destroy, each cycle after the last (a destroy's cleanup slows the next create)"})
	t.add(row{fs: "btrfs", files: n, s: unshare, op: "`unshare` of the same namespaces running `true` (no copy, no overlay, no scope)"})
	return nil
}

// execTimes times Exec of `true` in sandbox live over the bus, until its
// CommandExited (inside), each run beside `true` forked and waited for by
// the bench itself (direct): execRuns of each after one warm-up, fewer
// once cfg.budget has passed.
func execTimes(ctx context.Context, cfg config, d *daemon, live string, null *os.File) (direct, inside series, err error) {
	err = (loop{reps: execRuns, min: minReps, budget: cfg.budget}).run(ctx, "exec", func(warm bool) error {
		dt, err := timed(func() error { return exec.CommandContext(ctx, "/bin/true").Run() })
		if err != nil {
			return err
		}
		dt2, err := timed(func() error { return d.execTrue(ctx, live, null) })
		if err != nil {
			return err
		}
		if !warm {
			direct, inside = append(direct, dt), append(inside, dt2)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("exec of true in sandbox %s: %w", live, err)
	}
	return direct, inside, nil
}

// execTrue runs /bin/true in sandbox id and waits for its CommandExited.
func (d *daemon) execTrue(ctx context.Context, id string, null *os.File) error {
	if d.signals == nil {
		d.signals, d.exited = make(chan *dbus.Signal, 64), map[string]int32{}
		d.conn.Signal(d.signals)
		if err := d.conn.AddMatchSignal(dbus.WithMatchInterface(sandboxd1.SandboxInterface), dbus.WithMatchMember("CommandExited")); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var cmd string
	fd := dbus.UnixFD(null.Fd())
	err := d.conn.Object(sandboxd1.BusName, sandboxd1.SandboxPath(id)).CallWithContext(ctx, sandboxd1.SandboxInterface+".Exec", 0,
		[]string{"/bin/true"}, map[string]dbus.Variant{}, fd, fd, fd).Store(&cmd)
	if err != nil {
		return fmt.Errorf("calling Exec in %s: %w", id, err)
	}
	// The signal can come before the reply: results are kept by id.
	for {
		if status, ok := d.exited[cmd]; ok {
			delete(d.exited, cmd)
			if status != 0 {
				return fmt.Errorf("true in %s exited %d", id, status)
			}
			return nil
		}
		select {
		case s := <-d.signals:
			if s.Name == sandboxd1.SandboxInterface+".CommandExited" && len(s.Body) == 4 {
				if c, ok := s.Body[0].(string); ok {
					d.exited[c], _ = s.Body[2].(int32)
				}
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for command %s in %s: %w", cmd, id, ctx.Err())
		}
	}
}

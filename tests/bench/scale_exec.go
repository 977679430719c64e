package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// execScaleRuns is how many times each way of running `true` runs.
const execScaleRuns = 100

// bwrapArgs run `true` in fresh namespaces of every kind bubblewrap
// makes, on the host's root read-only: no copy, no overlay, no scope.
var bwrapArgs = []string{"--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"}

// execWays are `true` run each way, one after the other in each round so
// that they share the machine's state: forked by the bench, in
// bubblewrap, `sandboxctl exec`, and Exec over the bus until its
// CommandExited. bwrap is "" when bubblewrap is not installed.
type execWays struct {
	fork, bwrap, ctl, dbus series
	bwrapMissing           bool
}

func measureExec(ctx context.Context, d *daemon, id string) (w execWays, err error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return w, err
	}
	defer null.Close()
	bwrap, lerr := exec.LookPath("bwrap")
	w.bwrapMissing = lerr != nil
	ctl := ctlBin(d.bin)
	for i := range execScaleRuns + 1 {
		warm := i == 0
		add := func(s *series, fn func() error) error {
			dt, err := timed(fn)
			if err == nil && !warm {
				*s = append(*s, dt)
			}
			return err
		}
		if err := add(&w.fork, func() error { return exec.CommandContext(ctx, "/bin/true").Run() }); err != nil {
			return w, fmt.Errorf("forking true: %w", err)
		}
		if !w.bwrapMissing {
			if err := add(&w.bwrap, func() error { return exec.CommandContext(ctx, bwrap, bwrapArgs...).Run() }); err != nil {
				return w, fmt.Errorf("bwrap %v: %w", bwrapArgs, err)
			}
		}
		if err := add(&w.ctl, func() error {
			out, err := exec.CommandContext(ctx, ctl, "exec", id, "--", "true").CombinedOutput()
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		}); err != nil {
			return w, fmt.Errorf("sandboxctl exec %s -- true: %w", id, err)
		}
		if err := add(&w.dbus, func() error { return d.execTrue(ctx, id, null) }); err != nil {
			return w, err
		}
	}
	return w, nil
}

// Targets of issue 20 for a command.
const (
	execOverFork  = 2 * time.Millisecond // Exec over the bus, over a fork
	ctlOverBwrap  = 3 * time.Millisecond // sandboxctl exec, over bwrap
	initPssTarget = 512 << 10            // an idle sandbox's init, Pss
)

// execRows are the rows of w, at live sandboxes.
func execRows(w execWays, live int) []row {
	fork, ctl, bus := w.fork.median(), w.ctl.median(), w.dbus.median()
	rows := []row{
		{fs: "btrfs", op: fmt.Sprintf("`true` forked and waited for by the bench (the baseline), %d live", live), s: w.fork},
	}
	bw := row{fs: "btrfs", op: "`bwrap " + strings.Join(bwrapArgs, " ") + "` (the baseline of sandboxctl)", s: w.bwrap}
	if w.bwrapMissing {
		bw.na = "bubblewrap is not installed"
	} else {
		bw.ratio = ratio(w.bwrap.median(), fork)
	}
	rows = append(rows, bw,
		row{fs: "btrfs", op: fmt.Sprintf("`Exec` of `true` over the bus until `CommandExited`, in a sandbox among %d live: %s ms over the fork", live, ms(bus-fork)),
			s: w.dbus, ratio: ratio(bus, fork), target: fmt.Sprintf("< %d ms over the fork", execOverFork/time.Millisecond),
			verdict: metOrMissed(bus-fork < execOverFork)})
	r := row{fs: "btrfs", op: "`sandboxctl exec S -- true`, the same sandbox (the program's own start included)", s: w.ctl, ratio: ratio(ctl, fork),
		target: fmt.Sprintf("< %d ms over bwrap", ctlOverBwrap/time.Millisecond)}
	if !w.bwrapMissing {
		b := w.bwrap.median()
		r.op += fmt.Sprintf(": %s ms over bwrap", plusMs(ctl-b))
		r.verdict = metOrMissed(ctl-b < ctlOverBwrap)
	}
	return append(rows, r)
}

// memoryFloors is the memory of the smallest Go program that waits, and
// of coreutils' sleep, each alone: what an init could cost at least.
func memoryFloors(ctx context.Context, d *daemon) (floors [2]memInfo, err error) {
	for i, argv := range [][]string{{sleeperBin(d.bin)}, {"sleep", "60"}} {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		if err := cmd.Start(); err != nil {
			return floors, err
		}
		time.Sleep(300 * time.Millisecond) // started, and settled
		floors[i], err = readMemory(cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err != nil {
			return floors, err
		}
	}
	return floors, nil
}

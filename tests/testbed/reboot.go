package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Reboot does to the testbed what a power cut and a boot do to a host:
// its systemd is killed (SIGKILL, by pid), so every process of its PID
// namespace dies and its mounts and loop devices go; its directory and
// images stay (btrfs.img, zfs.img, and root.img, the root's upper layer,
// where installed packages, /etc and /var/lib live); then it boots again,
// mounts the btrfs image at the same place, starts zfs-fuse and imports
// the pool (its data as it was, nothing made anew), and returns once
// systemd runs. /run and /tmp start empty, as after a boot. As after a
// power cut, what was not synced may be lost: zfs-fuse dies with its open
// transaction group, and here even an fsynced write was lost (its intent
// log is not replayed at import; sync(2) does not reach FUSE at all): a
// `zfs snapshot` commits the group. PID and
// StartTime name the new systemd, and the Info file says so.
//
// A test binary running inside dies with the testbed; a test asks for a
// reboot with RebootTest instead (Run reboots it and runs it again).
func (tb *Testbed) Reboot(ctx context.Context) error {
	if tb.PID == 0 || tb.Dir == "" {
		return fmt.Errorf("rebooting the testbed: %w", ErrNotUp)
	}
	begin := time.Now()
	if err := syscall.Kill(tb.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("rebooting the testbed: killing its systemd (pid %d): %w", tb.PID, err)
	}
	if tb.exited != nil {
		select {
		case <-tb.exited:
		case <-ctx.Done():
			return fmt.Errorf("rebooting the testbed: waiting for its systemd (pid %d) to die: %w", tb.PID, ctx.Err())
		}
		tb.exited = nil
	} else if err := killAndWait(tb.PID, tb.StartTime); err != nil {
		return fmt.Errorf("rebooting the testbed: %w", err)
	}
	tb.PID, tb.StartTime = 0, 0
	// The kernel tears the namespace's mounts down after its last process
	// is gone, and frees autoclear loop devices after that: mounting an
	// image again while its old loop device still holds it would mount
	// one filesystem twice.
	images, err := filepath.Glob(filepath.Join(tb.Dir, "shared", "*.img"))
	if err != nil {
		return fmt.Errorf("rebooting the testbed: %w", err)
	}
	for _, img := range images {
		err := waitFor(ctx, "loop devices on "+img+" to be freed", 30*time.Second, func() (bool, error) {
			devs, err := loopDevicesOf(img)
			return err == nil && len(devs) == 0, err
		})
		if err != nil {
			return fmt.Errorf("rebooting the testbed: %w", err)
		}
	}
	if err := tb.boot(ctx, tb.dieWithParent); err != nil {
		return fmt.Errorf("rebooting the testbed: %w", err)
	}
	if _, err := tb.Run(ctx, "mkdir", "-p", tb.Btrfs.Mount); err != nil {
		return fmt.Errorf("rebooting the testbed: %w", err)
	}
	if _, err := tb.Run(ctx, "mount", "-o", "loop", tb.Btrfs.Image, tb.Btrfs.Mount); err != nil {
		return fmt.Errorf("rebooting the testbed: mounting its btrfs again: %w", err)
	}
	if tb.ZFS.Pool != "" { // a host of UpHosts has none
		if err := tb.startZFSFuse(ctx); err != nil {
			return fmt.Errorf("rebooting the testbed: %w", err)
		}
		if err := tb.importPool(ctx); err != nil {
			return fmt.Errorf("rebooting the testbed: %w", err)
		}
	}
	if err := tb.writeInfo(); err != nil {
		return fmt.Errorf("rebooting the testbed: %w", err)
	}
	if tb.logf != nil {
		tb.logf("testbed: rebooted in %v (systemd pid %d)", time.Since(begin).Round(time.Millisecond), tb.PID)
	}
	return nil
}

// importPool imports the pool from its image, as a host's boot does, and
// mounts its datasets. zfs-fuse may have opened it already from its cache
// file (/etc/zfs/zpool.cache, kept in the root's layer): then it is only
// mounted.
func (tb *Testbed) importPool(ctx context.Context) error {
	out, err := tb.Run(ctx, "zpool", "list", "-H", "-o", "name")
	if err != nil {
		return fmt.Errorf("listing the zfs pools: %w", err)
	}
	if !slices.Contains(strings.Fields(out), tb.ZFS.Pool) {
		if _, err := tb.Run(ctx, "zpool", "import", "-d", filepath.Dir(tb.ZFS.Image), tb.ZFS.Pool); err != nil {
			return fmt.Errorf("importing the zfs pool %s from %s: %w", tb.ZFS.Pool, tb.ZFS.Image, err)
		}
	}
	if _, err := tb.Run(ctx, "zfs", "mount", "-a"); err != nil {
		return fmt.Errorf("mounting the zfs pool %s's datasets: %w", tb.ZFS.Pool, err)
	}
	return nil
}

// writeInfo writes the testbed's Info where Attach and Require read it.
func (tb *Testbed) writeInfo() error {
	data, err := json.MarshalIndent(&tb.Info, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tb.Dir, "shared", stateFile), data, 0o644); err != nil {
		return fmt.Errorf("writing the testbed state: %w", err)
	}
	return nil
}

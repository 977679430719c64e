package nsinit

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// mountCache mounts the owner's cache volume at CachePath: the daemon's
// idmapped clone in a user namespace (made without set-id or device
// files), spec.Cache bound elsewhere. Nothing is done without one.
func mountCache(r *root, spec *Spec, mounts *Mounts) error {
	if mounts != nil && mounts.Cache == nil || mounts == nil && spec.Cache == "" {
		return nil
	}
	if err := r.mkdirAll(CachePath, 0o755); err != nil {
		return err
	}
	if mounts != nil {
		return attachInside(r, mounts.Cache, CachePath)
	}
	if err := r.bind(spec.Cache, CachePath, false); err != nil {
		return err
	}
	err := r.at(CachePath, func(target string) error { return remount(target, unix.MS_NOSUID|unix.MS_NODEV) })
	if err != nil {
		_ = r.at(CachePath, func(target string) error { return unix.Unmount(target, unix.MNT_DETACH) })
		return fmt.Errorf("mounting the cache at %s without set-id files: %w", CachePath, err)
	}
	return nil
}

// CacheMounted reports whether the sandbox whose init is pid has its
// owner's cache at CachePath (the daemon's side: its mount table, as the
// init sees it; the sandbox's commands cannot mount).
func CacheMounted(pid int) (bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return false, fmt.Errorf("reading the mounts of sandbox init %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint ...
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == CachePath {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("reading the mounts of sandbox init %d: %w", pid, err)
	}
	return false, nil
}

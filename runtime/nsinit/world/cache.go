package world

import (
	"fmt"

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

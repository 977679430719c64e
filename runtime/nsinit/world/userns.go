package world

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The init's side of a sandbox in a user namespace: its world from the
// daemon's idmapped mounts.

// attach mounts the detached mount f (one of the daemon's) on target, a
// path (no symlink followed).
func attach(f *os.File, target string) error {
	if err := unix.MoveMount(int(f.Fd()), "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attaching a mount on %s: %w", target, err)
	}
	return nil
}

// attachInside mounts the detached mount f on p inside the root.
func attachInside(r *root, f *os.File, p string) error {
	fd, err := r.open(p)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	err = unix.MoveMount(int(f.Fd()), "", fd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("attaching a mount on %s in the sandbox: %w", p, err)
	}
	return nil
}

// mountIdmappedOverlay mounts the sandbox's root, an overlay of the host
// root's idmapped layers with the system layer's volume as its upper
// layer, and returns where, and where the layer's volume is.
//
// The init, root of its user namespace only, may not write in the
// daemon's runtime directory: it builds in a tmpfs of its own, mounted on
// /tmp of its mount namespace (a copy of the host's: the host's /tmp is
// not touched). Each of the daemon's mounts is attached there first:
// overlayfs takes private clones of its layers, which it may only do of
// mounts of a namespace the init owns, not of the daemon's detached ones
// (EPERM). The overlay is mounted by the init: one the daemon mounted
// would come up read-only, as the daemon's own uid has no id through the
// idmap to make the work directory with. userxattr: the overlay's own
// marks are user.overlay.* xattrs, which the namespace's root may write.
func mountIdmappedOverlay(spec *Spec, m *Mounts) (newRoot, layerDir string, err error) {
	const base = "/tmp"
	if err := unix.Mount("sandbox-build", base, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size=64k"); err != nil {
		return "", "", fmt.Errorf("mounting the init's own tmpfs on %s: %w", base, err)
	}
	var lowers []string
	for k, f := range append(m.Lowers, m.Layer) {
		dir := base + "/" + strconv.Itoa(k)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return "", "", fmt.Errorf("making the layers' directory: %w", err)
		}
		if err := attach(f, dir); err != nil {
			return "", "", fmt.Errorf("attaching layer %d of the sandbox's root: %w", k, err)
		}
		lowers = append(lowers, dir)
	}
	layer := lowers[len(lowers)-1]
	lowers = lowers[:len(lowers)-1]
	upper, work := layer+"/upper", layer+"/work"
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return "", "", fmt.Errorf("making the system layer: %w", err)
		}
	}
	if len(spec.StateDirs) > 0 {
		r, err := openRoot(upper)
		if err != nil {
			return "", "", err
		}
		err = makeStateDirs(r, spec.StateDirs)
		r.close()
		if err != nil {
			return "", "", fmt.Errorf("making the state directories the sandbox may not read: %w", err)
		}
	}
	newRoot = base + "/root"
	if err := os.Mkdir(newRoot, 0o700); err != nil {
		return "", "", fmt.Errorf("making the root's mountpoint: %w", err)
	}
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + upper + ",workdir=" + work + ",userxattr"
	if err := unix.Mount("sandbox", newRoot, "overlay", 0, opts); err != nil {
		return "", "", fmt.Errorf("mounting the sandbox's root (overlay of the idmapped layers of the host's root): %w", err)
	}
	return newRoot, layer, nil
}

// bindDevice puts the host's device node dev in place of name, an empty
// file made for it: a user namespace may not mknod.
func bindDevice(r *root, name string) error {
	err := r.at("/dev", func(dev string) error {
		fd, err := unix.Openat(unix.AT_FDCWD, dev+"/"+name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	})
	if err != nil {
		return fmt.Errorf("making /dev/%s in the sandbox: %w", name, err)
	}
	return r.bind("/dev/"+name, "/dev/"+name, false)
}

// bindSys binds the host's /sys (and what is mounted below it) read-only,
// for a sandbox in a user namespace on the host's network: sysfs may be
// mounted only by the owner of the network namespace, which is the
// host's.
func bindSys(r *root) error {
	err := r.at("/sys", func(target string) error {
		if err := unix.Mount("/sys", target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("binding the host's /sys in the sandbox: %w", err)
	}
	// Resolved again: the bind is above the descriptor's mount.
	return r.at("/sys", func(target string) error {
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOEXEC}
		if err := unix.MountSetattr(unix.AT_FDCWD, target, unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("making the sandbox's /sys read-only: %w", err)
		}
		return nil
	})
}

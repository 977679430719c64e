package caches

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// Where a copy into a volume may share the source's blocks uncounted
// (btrfs: cowfs.Capabilities.CloneAcrossVolumes), a quota on the cache
// volume bounds only what is written there, not what is reflinked: a
// sandbox's copy_file_range of 72 MiB from its project into a 32 MiB
// cache succeeded, and the copy stayed, charged to no live volume, after
// the sandbox was destroyed. There, with a cache_quota, the cache is a
// filesystem of its own: an ext4 image of cache_quota bytes in the
// owner's cachefs-uUID volume, loop-mounted by the daemon (nodev,
// nosuid, errors=remount-ro) at its fs/ directory, which sandboxes get
// as before. A reflink across filesystems fails (EXDEV), so a copy in is
// a real write, and the image's size bounds what the cache holds,
// whatever was deleted. (ZFS counts a clone in the dataset it lands in:
// its cache volume's quota holds.)
//
// The image is written in place (chattr +C, setNoCOW): copied on write,
// its blocks on the pool would grow past its size.
//
// The image is root's, mode 0600, in a directory of root's, mode 0700;
// sandboxes see the mounted filesystem's files, never the image's bytes.
// A tenant cannot hand root a crafted image to mount: it writes the
// filesystem only through the kernel's ext4 code, as any user of a
// mount does. The image is checked (e2fsck -p) before each mount; one
// that is not clean is made anew (a cache is a convenience).

const (
	cacheImage = "cache.img" // in the cachefs volume
	cacheMount = "fs"        // where the image is mounted, in the same
)

// cacheFSName is the volume of owner's cache filesystem.
func cacheFSName(owner uint32) string {
	return volname.PrefixCacheFS + strconv.FormatUint(uint64(owner), 10)
}

// onImage says whether caches are filesystems of their own.
func (c *Caches) onImage() bool {
	return c.cfg.Quota > 0 && c.h.Backend().Info().Capabilities.CloneAcrossVolumes
}

// imageCache returns where owner's cache filesystem is mounted: its
// volume, image and mount made as need be. Call it with the owner's lock
// held (shared: the making and mounting are serialized here, so that
// one image is never mounted twice).
func (c *Caches) imageCache(ctx context.Context, owner uint32) (string, error) {
	c.mount.Lock()
	defer c.mount.Unlock()
	v, err := c.h.Backend().Get(ctx, cacheFSName(owner))
	if errors.Is(err, cowfs.ErrNotFound) {
		v, err = c.h.Backend().Create(ctx, cacheFSName(owner))
	}
	if err != nil {
		return "", fmt.Errorf("opening the cache volume of uid %d: %w", owner, err)
	}
	if err := rootOnly(v.Path); err != nil {
		return "", err
	}
	mnt := filepath.Join(v.Path, cacheMount)
	if err := os.Mkdir(mnt, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("making the cache mount point %s: %w", mnt, err)
	}
	mounted, err := isMountPoint(v.Path, mnt)
	if err != nil {
		return "", err
	}
	if !mounted {
		if err := c.mountCacheImage(ctx, v.Path, mnt, owner); err != nil {
			return "", err
		}
	}
	if err := ownCacheRoot(mnt, owner); err != nil {
		return "", err
	}
	return mnt, nil
}

// mountCacheImage mounts the image in dir at mnt, made (or made anew,
// when it does not check clean) at the configured size.
func (c *Caches) mountCacheImage(ctx context.Context, dir, mnt string, owner uint32) error {
	img := filepath.Join(dir, cacheImage)
	st, err := os.Lstat(img)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := makeCacheImage(ctx, img, c.cfg.Quota, owner); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("reading the cache image %s: %w", img, err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("the cache image %s is not a regular file (%s); remove it: %w", img, st.Mode().Type(), supervisor.ErrInvalid)
	default:
		if uint64(st.Size()) != c.cfg.Quota && c.once(fmt.Sprintf("%d/size", owner)) {
			c.log.Warn("a cache filesystem keeps its size until the cache is cleared with no sandbox of its owner's",
				"CALLER_UID", owner, "size", st.Size(), "quota", c.cfg.Quota)
		}
		err := cowImage(img)
		if err == nil {
			err = checkCacheImage(ctx, img)
		}
		if err != nil {
			c.log.Warn("a cache image that is copied on write or does not check clean is made anew", "CALLER_UID", owner, "error", err)
			if err := os.Remove(img); err != nil {
				return fmt.Errorf("removing the cache image %s: %w", img, err)
			}
			if err := makeCacheImage(ctx, img, c.cfg.Quota, owner); err != nil {
				return err
			}
		}
	}
	out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nodev,nosuid,errors=remount-ro", img, mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mounting the cache image %s at %s: %w: %s", img, mnt, err, strings.TrimSpace(string(out)))
	}
	// mkfs's lost+found is no cache's; e2fsck makes it again if needed.
	// (Removal of a name, never a link followed: the path is root's up
	// to the mount.)
	_ = os.Remove(filepath.Join(mnt, "lost+found"))
	c.log.Info("mounted a cache filesystem", "CALLER_UID", owner, "image", img, "size", c.cfg.Quota)
	return nil
}

// makeCacheImage makes an ext4 image of size bytes at img, its root
// owner's (the name appears only once it is whole).
func makeCacheImage(ctx context.Context, img string, size uint64, owner uint32) error {
	tmp := img + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing a partly made cache image %s: %w", tmp, err)
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("making the cache image %s: %w", tmp, err)
	}
	// Before any block is written: the flag holds only for an empty file.
	err = setNoCOW(f)
	if err == nil {
		err = f.Truncate(int64(size))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("making the cache image %s of %d bytes: %w", tmp, size, err)
	}
	// -m 0: no blocks kept for root, who never writes there. No journal:
	// it took 64 MiB of the pool for each owner's cache of 2 GiB, empty
	// or not (30 owners filled a 2 GiB pool), and a cache needs none:
	// the image is checked before each mount and made anew unless clean.
	owners := fmt.Sprintf("root_owner=%d:%d", owner, primaryGID(owner))
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", owners, tmp).CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("making ext4 on the cache image %s (mkfs.ext4, from e2fsprogs): %w: %s", tmp, err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, img); err != nil {
		return fmt.Errorf("naming the cache image %s: %w", img, err)
	}
	return nil
}

// fsNoCOW is FS_NOCOW_FL (linux/fs.h; x/sys/unix has no name for it).
const fsNoCOW = 0x00800000

// setNoCOW marks the empty file f to be written in place. Copied on write
// (btrfs), a loop device's image grows without bound: an extent stays
// whole on disk while any block of it is still the file's, so a tenant
// rewriting a file in its cache from one block further each time (dd
// conv=notrunc, fsync) pinned 283 MiB of the pool behind a 32 MiB image
// in 60 rewrites. In place, the image holds its size, whatever is
// written. (The cache volume is never snapshotted, which would copy once
// more.) A filesystem without the flag copies nothing on write.
func setNoCOW(f *os.File) error {
	fd := int(f.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	if err == nil {
		err = unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsNoCOW))
	}
	if err != nil {
		return fmt.Errorf("marking %s to be written in place (chattr +C): %w", f.Name(), err)
	}
	return nil
}

// cowImage fails when the image at img would be copied on write (one
// made before setNoCOW was): it is made anew, as a cache is a
// convenience.
func cowImage(img string) error {
	f, err := os.OpenFile(img, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("opening the cache image %s: %w", img, err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the flags of the cache image %s: %w", img, err)
	}
	if flags&fsNoCOW == 0 {
		return fmt.Errorf("the cache image %s is copied on write (its size does not bound it on the pool): %w", img, supervisor.ErrInvalid)
	}
	return nil
}

// checkCacheImage runs e2fsck -p on img: exit 0 (clean) or 1 (fixed)
// pass; anything else fails.
func checkCacheImage(ctx context.Context, img string) error {
	out, err := exec.CommandContext(ctx, "e2fsck", "-p", img).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking the cache image %s (e2fsck -p): %w: %s", img, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// rootOnly makes the directory at path root's, mode 0700, by a
// descriptor of it, never a symlink followed.
func rootOnly(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the cache volume %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, 0, 0); err != nil {
		return fmt.Errorf("giving the cache volume %s to root: %w", path, err)
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return fmt.Errorf("setting the mode of the cache volume %s: %w", path, err)
	}
	return nil
}

// isMountPoint says whether the directory mnt, in dir, holds a
// filesystem of its own (another device than dir's). Both are root's
// alone: no sandbox can have replaced either.
func isMountPoint(dir, mnt string) (bool, error) {
	var d, m unix.Stat_t
	if err := unix.Lstat(dir, &d); err != nil {
		return false, fmt.Errorf("reading %s: %w", dir, err)
	}
	if err := unix.Lstat(mnt, &m); err != nil {
		return false, fmt.Errorf("reading %s: %w", mnt, err)
	}
	if m.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, fmt.Errorf("the cache mount point %s is not a directory: %w", mnt, supervisor.ErrInvalid)
	}
	return d.Dev != m.Dev, nil
}

// clearImageCache is Clear of a cache filesystem (the owner's lock
// held alone): with no sandbox of the owner's, it is unmounted and its
// volume deleted, with the owner's cache volume of before, if any, and
// made anew at the configured size; otherwise its contents are removed
// in place.
func (c *Caches) clearImageCache(ctx context.Context, owner uint32) error {
	v, found, inUse, err := c.cacheToClear(ctx, owner, cacheFSName(owner))
	if err != nil || !found {
		return err
	}
	mnt := filepath.Join(v.Path, cacheMount)
	mounted, err := isMountPoint(v.Path, mnt)
	if err != nil {
		return fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
	}
	if !inUse {
		err := error(nil)
		if mounted {
			err = unix.Unmount(mnt, 0)
		}
		if err == nil {
			err = c.h.Backend().Delete(ctx, v)
		}
		if err == nil {
			if old, gerr := c.h.Backend().Get(ctx, cacheName(owner)); gerr == nil {
				if derr := c.h.Backend().Delete(ctx, old); derr != nil {
					c.log.Warn("deleting a cache volume of before", "CALLER_UID", owner, "volume", old.Name, "error", derr)
				}
			}
			if _, err := c.imageCache(ctx, owner); err != nil {
				// The next sandbox makes it.
				c.log.Warn("making a cleared cache filesystem again", "CALLER_UID", owner, "error", err)
			}
			c.log.Info("cleared a cache filesystem", "CALLER_UID", owner, "volume", v.Name, "how", "deleted")
			return nil
		}
		// Held by something no record tells of: empty it in place.
		c.log.Warn("deleting a cache filesystem to clear it; emptying it instead", "CALLER_UID", owner, "error", err)
		if mounted, err = isMountPoint(v.Path, mnt); err != nil {
			return fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
		}
	}
	if !mounted {
		// Not in use: its next mount makes it anew.
		if err := os.Remove(filepath.Join(v.Path, cacheImage)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("clearing the cache of uid %d: %w", owner, err)
		}
		return nil
	}
	if err := emptyCache(ctx, mnt, owner); err != nil {
		return err
	}
	c.log.Info("cleared a cache filesystem", "CALLER_UID", owner, "volume", v.Name, "how", "emptied")
	return nil
}

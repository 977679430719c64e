// Package pool opens the cowfs backend that sandboxd's configuration names:
// an existing btrfs directory, an existing ZFS dataset, or (the default)
// the embedded pool: a sparse btrfs image under /var/lib/sandboxd that
// sandboxd makes and loop-mounts itself, so that a machine with neither
// btrfs nor ZFS can run sandboxes and nothing else on it changes.
package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/btrfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
	"github.com/sandboxd/sandboxd/cowfs/zfs"
)

// Backends.
const (
	Embedded = "embedded"
	Btrfs    = "btrfs"
	ZFS      = "zfs"
)

// MinEmbeddedSize is the smallest embedded image: mkfs.btrfs refuses
// much smaller devices, and a pool must hold a few sandboxes.
const MinEmbeddedSize = 256 << 20

// Config says which pool to open (the [storage] section of sandboxd.toml).
type Config struct {
	Backend string // Embedded (when empty), Btrfs or ZFS
	// Embedded pool: the image file, its size when made, where it mounts.
	Image      string
	Size       uint64
	Mountpoint string
	// BtrfsRoot is a directory on an existing btrfs filesystem.
	BtrfsRoot string
	// ZFSRoot is a dataset of an existing pool.
	ZFSRoot string
}

// Open opens the configured backend.
func Open(ctx context.Context, cfg Config) (cowfs.Backend, error) {
	switch cfg.Backend {
	case Embedded, "":
		root, err := MountEmbedded(ctx, cfg.Image, cfg.Size, cfg.Mountpoint)
		if err != nil {
			return nil, err
		}
		return btrfs.Open(ctx, root)
	case Btrfs:
		return btrfs.Open(ctx, cfg.BtrfsRoot)
	case ZFS:
		return zfs.Open(ctx, cfg.ZFSRoot)
	}
	return nil, fmt.Errorf("opening the pool: unknown backend %q (want %s, %s or %s)", cfg.Backend, Embedded, Btrfs, ZFS)
}

// MountEmbedded makes the embedded pool if it is not there (a sparse image
// of size bytes, formatted btrfs), mounts it at mountpoint unless it is
// mounted there already, and returns the directory that holds sandboxd's
// volumes. Only the image, the mountpoint and what is inside them change.
func MountEmbedded(ctx context.Context, image string, size uint64, mountpoint string) (string, error) {
	if !filepath.IsAbs(image) || !filepath.IsAbs(mountpoint) {
		return "", fmt.Errorf("embedded pool: image %q and mountpoint %q must be absolute paths: %w", image, mountpoint, cowfs.ErrInvalidName)
	}
	root := filepath.Join(mountpoint, "volumes")
	mounted, err := mountedFrom(mountpoint)
	if err != nil {
		return "", err
	}
	if mounted != "" {
		if !sameFile(mounted, image) {
			return "", fmt.Errorf("embedded pool: %s is mounted from %s, not from the image %s: %w", mountpoint, mounted, image, cowfs.ErrBusy)
		}
		return root, nil
	}
	if _, err := os.Stat(image); errors.Is(err, os.ErrNotExist) {
		if err := makeImage(ctx, image, size); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", fmt.Errorf("embedded pool: %w", err)
	}
	if err := os.MkdirAll(mountpoint, 0o700); err != nil {
		return "", fmt.Errorf("embedded pool: making the mountpoint: %w", err)
	}
	// The loop device frees itself (autoclear) when the mount goes.
	if _, err := command.Output(ctx, "mount", "-o", "loop", "-t", "btrfs", image, mountpoint); err != nil {
		return "", fmt.Errorf("embedded pool: mounting %s at %s: %w", image, mountpoint, err)
	}
	return root, nil
}

func makeImage(ctx context.Context, image string, size uint64) (err error) {
	if size < MinEmbeddedSize {
		return fmt.Errorf("embedded pool: size %d bytes is under the minimum of %d MiB", size, MinEmbeddedSize>>20)
	}
	if err := os.MkdirAll(filepath.Dir(image), 0o700); err != nil {
		return fmt.Errorf("embedded pool: %w", err)
	}
	// Make it under a temporary name: a crash mid-way leaves no half-made
	// image that a restart would try to mount.
	tmp := image + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("embedded pool: making %s: %w", image, err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return fmt.Errorf("embedded pool: sizing %s: %w", image, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if _, err := command.Output(ctx, "mkfs.btrfs", "-q", "-L", "sandboxd", tmp); err != nil {
		return fmt.Errorf("embedded pool: formatting %s: %w", image, err)
	}
	if err := os.Rename(tmp, image); err != nil {
		return fmt.Errorf("embedded pool: %w", err)
	}
	return nil
}

// mountedFrom returns the backing file of the loop device mounted at
// mountpoint, the device itself for another mount, or "" when nothing is
// mounted there.
func mountedFrom(mountpoint string) (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[4] != mountpoint {
			continue
		}
		// Fields after "-": fstype, source, options.
		for i := 5; i < len(f)-2; i++ {
			if f[i] != "-" {
				continue
			}
			dev := f[i+2]
			back, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
			if err != nil {
				return dev, nil
			}
			return strings.TrimSpace(string(back)), nil
		}
	}
	return "", nil
}

func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

package btrfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	dbtrfs "github.com/dennwc/btrfs"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

func (b *Backend) Snapshot(ctx context.Context, src cowfs.Volume, name string, readOnly bool) (cowfs.Volume, error) {
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s: %w", src.Name, err)
	}
	if err := b.absent(name, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s: %w", src.Name, err)
	}
	if err := dbtrfs.SnapshotSubVolume(src.ID, path, readOnly); err != nil {
		// A failed snapshot ioctl makes nothing; a stray directory from a
		// failure after it would be a subvolume, so remove what is there.
		if _, statErr := os.Lstat(path); statErr == nil {
			_ = b.removeTree(ctx, path)
		}
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s as %s: %w", src.Name, name, classify(err))
	}
	v, err := b.volume(name, path, cowfs.KindWritable, true)
	v.Origin = src.ID
	return v, err
}

func (b *Backend) Rollback(ctx context.Context, v, to cowfs.Volume) error {
	if err := b.ours(v, "rolling back"); err != nil {
		return err
	}
	if v.Kind != cowfs.KindWritable {
		return fmt.Errorf("rolling back %s: only a writable volume can be rolled back: %w", v.Name, cowfs.ErrReadOnly)
	}
	if to.Kind != cowfs.KindReadOnly {
		return fmt.Errorf("rolling back %s to %s: the target must be a read-only snapshot: %w", v.Name, to.Name, cowfs.ErrInvalidName)
	}
	return b.swapIn(ctx, v, to, "rb-"+v.Name)
}

func (b *Backend) RollbackProject(ctx context.Context, project, to cowfs.Volume) error {
	if project.Kind != cowfs.KindProject {
		return fmt.Errorf("rolling back project %s: not a project: %w", project.Name, cowfs.ErrInvalidName)
	}
	if to.Kind != cowfs.KindReadOnly || !to.Ours {
		return fmt.Errorf("rolling back project %s to %s: the target must be a read-only snapshot of sandboxd's: %w", project.Name, to.Name, cowfs.ErrInvalidName)
	}
	// The same swap as Rollback: the project's path is a subvolume of the
	// pool's filesystem (Project checked), so it can be exchanged.
	return b.swapIn(ctx, project, to, "rbp-"+to.Name)
}

// swapIn makes v's path hold a writable snapshot of to, in one atomic
// rename: after a crash, v's path holds either the old or the new tree.
// The old tree goes after, under tmp.
func (b *Backend) swapIn(ctx context.Context, v, to cowfs.Volume, tmp string) error {
	tmp = filepath.Join(b.root, tmpPrefix+tmp)
	if err := dbtrfs.SnapshotSubVolume(to.ID, tmp, false); err != nil {
		return fmt.Errorf("rolling back %s to %s: %w", v.Name, to.Name, classify(err))
	}
	// The new tree is a new subvolume: it gets v's quota groups and
	// limit, or a rollback would lift the sandbox's disk quota.
	if v.Kind != cowfs.KindProject {
		old, err := subvolumeID(v.ID)
		if err == nil {
			err = b.keepGroups(old, tmp)
		}
		if err != nil {
			_ = b.removeTree(ctx, tmp)
			return fmt.Errorf("rolling back %s to %s: keeping its quota: %w", v.Name, to.Name, err)
		}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, v.ID, unix.RENAME_EXCHANGE); err != nil {
		_ = b.removeTree(ctx, tmp)
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EXDEV) {
			return fmt.Errorf("rolling back %s to %s: %s is a mount point of its own, which cannot be swapped: %w", v.Name, to.Name, v.ID, cowfs.ErrBusy)
		}
		return fmt.Errorf("rolling back %s to %s: swapping: %w", v.Name, to.Name, classify(err))
	}
	if err := b.removeTree(ctx, tmp); err != nil {
		return fmt.Errorf("rolling back %s: removing the old tree: %w", v.Name, err)
	}
	return nil
}

func (b *Backend) ChangedSince(ctx context.Context, v, since cowfs.Volume) (bool, error) {
	gv, err := b.generation(v)
	if err != nil {
		return false, err
	}
	gs, err := b.generation(since)
	if err != nil {
		return false, err
	}
	return gv > gs, nil
}

// generation is the subvolume's ctransid: the transaction of its last
// change, copied into a snapshot when it is taken.
func (b *Backend) generation(v cowfs.Volume) (uint64, error) {
	fs, err := dbtrfs.Open(v.ID, true)
	if err != nil {
		return 0, fmt.Errorf("reading the generation of %s: %w", v.Name, notFound(err))
	}
	defer fs.Close()
	si, err := fs.SubvolumeByPath(v.ID)
	if err != nil {
		return 0, fmt.Errorf("reading the generation of %s: %w", v.Name, err)
	}
	return si.CTransID, nil
}

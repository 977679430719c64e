package cowfsfake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// readOnlyMode is a read-only volume's top directory's mode on disk.
const readOnlyMode = 0o555

func (b *Backend) Snapshot(ctx context.Context, src cowfs.Volume, name string, readOnly bool) (cowfs.Volume, error) {
	if err := b.enter(ctx, "Snapshot", name); err != nil {
		return cowfs.Volume{}, err
	}
	defer b.mu.Unlock()
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s: %w", src.Name, err)
	}
	if err := absent(name, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s: %w", src.Name, err)
	}
	srcRec, srcPath, err := b.find(src)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s: %w", src.Name, err)
	}
	// Copied under a temporary name: a failure leaves nothing under name.
	tmp := filepath.Join(b.root, tmpPrefix+"snap-"+name)
	rec, err := b.copyVolume(ctx, srcRec, srcPath, tmp, readOnly)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = removeTree(context.WithoutCancel(ctx), tmp)
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s as %s: %w", src.Name, name, err)
	}
	rec.Origin = src.ID
	if err := b.add(name, rec, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("snapshotting %s as %s: %w", src.Name, name, err)
	}
	return b.volume(name, rec), nil
}

// copyVolume copies the volume at srcPath (whose bookkeeping is srcRec)
// into the new directory dst, read-only or writable, and returns the
// copy's bookkeeping: each file keeps its identity. The caller names it.
func (b *Backend) copyVolume(ctx context.Context, srcRec *record, srcPath, dst string, readOnly bool) (*record, error) {
	tree, err := readTree(ctx, srcPath)
	if err != nil {
		return nil, err
	}
	b.identify(srcRec, tree, true)
	rootMode := srcRec.RootMode
	if srcRec.Kind != cowfs.KindReadOnly {
		top, err := stat(srcPath)
		if err != nil {
			return nil, err
		}
		rootMode = os.FileMode(top.mode)
	}
	copied, err := copyTree(ctx, srcPath, dst, tree)
	if err != nil {
		return nil, err
	}
	rec := &record{Kind: cowfs.KindWritable, Created: time.Now(), RootMode: rootMode, UUID: newUUID()}
	recordCopy(rec, tree, copied)
	mode := rootMode
	if readOnly {
		rec.Kind, mode = cowfs.KindReadOnly, readOnlyMode
	}
	if err := os.Chmod(dst, mode); err != nil {
		return nil, err
	}
	return rec, nil
}

func (b *Backend) Rollback(ctx context.Context, v, to cowfs.Volume) error {
	if err := b.enter(ctx, "Rollback", v.Name); err != nil {
		return err
	}
	defer b.mu.Unlock()
	rec, err := b.ours(v, "rolling back")
	if err != nil {
		return err
	}
	if rec.Kind != cowfs.KindWritable {
		return fmt.Errorf("rolling back %s: only a writable volume can be rolled back: %w", v.Name, cowfs.ErrReadOnly)
	}
	toRec, toPath, err := b.find(to)
	if err != nil || toRec.Kind != cowfs.KindReadOnly {
		return fmt.Errorf("rolling back %s to %s: the target must be a read-only snapshot: %w", v.Name, to.Name, errors.Join(err, cowfs.ErrInvalidName))
	}
	files, err := b.swapIn(ctx, v.ID, toRec, toPath, "rb-"+filepath.Base(v.ID))
	if err != nil {
		return fmt.Errorf("rolling back %s to %s: %w", v.Name, to.Name, err)
	}
	rec.Files = files
	return b.save()
}

func (b *Backend) RollbackProject(ctx context.Context, project, to cowfs.Volume) error {
	if err := b.enter(ctx, "RollbackProject", project.Name); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if project.Kind != cowfs.KindProject {
		return fmt.Errorf("rolling back project %s: not a project: %w", project.Name, cowfs.ErrInvalidName)
	}
	if to.Kind != cowfs.KindReadOnly || !to.Ours {
		return fmt.Errorf("rolling back project %s to %s: the target must be a read-only snapshot of sandboxd's: %w", project.Name, to.Name, cowfs.ErrInvalidName)
	}
	key, rec, err := b.projectKey(project.ID)
	if err != nil {
		return fmt.Errorf("rolling back project %s: %w", project.Name, err)
	}
	toRec, toPath, err := b.find(to)
	if err != nil || toRec.Kind != cowfs.KindReadOnly {
		return fmt.Errorf("rolling back project %s to %s: the target must be a read-only snapshot of sandboxd's: %w", project.Name, to.Name, errors.Join(err, cowfs.ErrInvalidName))
	}
	files, err := b.swapIn(ctx, project.ID, toRec, toPath, "rbp-"+filepath.Base(to.ID))
	if err != nil {
		return fmt.Errorf("rolling back project %s to %s: %w", project.Name, to.Name, err)
	}
	// The project is the new directory now, with a key of its own.
	top, err := stat(project.ID)
	if err != nil {
		return fmt.Errorf("rolling back project %s: %w", project.Name, err)
	}
	delete(b.state.Projects, key)
	rec.Files = files
	b.state.Projects[top.key] = rec
	return b.save()
}

// swapIn makes path hold a writable copy of the read-only volume at
// toPath, in one atomic rename (RENAME_EXCHANGE): after a crash, path
// holds either the old tree or the new. It returns the new tree's files.
func (b *Backend) swapIn(ctx context.Context, path string, toRec *record, toPath, tmp string) (map[string]fileID, error) {
	tmp = filepath.Join(b.root, tmpPrefix+tmp)
	rec, err := b.copyVolume(ctx, toRec, toPath, tmp, false)
	if err != nil {
		_ = removeTree(context.WithoutCancel(ctx), tmp)
		return nil, err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE); err != nil {
		_ = removeTree(context.WithoutCancel(ctx), tmp)
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EXDEV) {
			return nil, fmt.Errorf("%s is a mount point, or on another filesystem than the root, and cannot be swapped: %w", path, cowfs.ErrBusy)
		}
		return nil, fmt.Errorf("swapping: %w", notFound(err))
	}
	if err := removeTree(context.WithoutCancel(ctx), tmp); err != nil {
		return nil, fmt.Errorf("removing the old tree: %w", err)
	}
	return rec.Files, nil
}

package zfs

import (
	"context"
	"fmt"
	"strings"

	gozfs "github.com/mistifyio/go-zfs/v4"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
)

// Snapshot: a read-only volume is SRC@name plus a read-only clone (of
// SRC itself when SRC is a snapshot); a writable one is a clone of SRC
// (when SRC is a snapshot) or of a new SRC@name. Whatever a failure interrupts is undone.
func (b *Backend) Snapshot(ctx context.Context, src cowfs.Volume, name string, readOnly bool) (v cowfs.Volume, err error) {
	ds, err := b.dataset(name)
	if err != nil {
		return v, fmt.Errorf("snapshotting %s: %w", src.Name, err)
	}
	if err := b.absent(ctx, name, ds); err != nil {
		return v, fmt.Errorf("snapshotting %s: %w", src.Name, err)
	}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	origin := src.ID
	if !strings.Contains(origin, "@") {
		snap := src.ID + "@" + name
		if _, err := command.Output(ctx, "zfs", "snapshot", snap); err != nil {
			return v, fmt.Errorf("snapshotting %s as %s: %w", src.Name, name, classify(err))
		}
		undo = append(undo, func() { _ = b.destroy(context.WithoutCancel(ctx), snap) })
		if _, err := command.Output(ctx, "zfs", "set", propManaged+"=yes", snap); err != nil {
			return v, fmt.Errorf("marking snapshot %s: %w", snap, classify(err))
		}
		origin = snap
	}
	// A read-only snapshot of a read-only volume is another read-only clone
	// of its snapshot, which the two share (Delete holds it while either
	// needs it): a snapshot is never changed.
	kind := cowfs.KindWritable
	args := []string{"zfs", "clone", "-o", propManaged + "=yes"}
	if readOnly {
		kind = cowfs.KindReadOnly
		args = append(args, "-o", "readonly=on")
	}
	args = append(args, "-o", propKind+"="+string(kind), origin, ds)
	if _, err := command.Output(ctx, args...); err != nil {
		return v, fmt.Errorf("snapshotting %s as %s: %w", src.Name, name, classify(err))
	}
	undo = append(undo, func() { _ = b.destroy(context.WithoutCancel(ctx), ds) })
	return b.volume(ctx, name, ds)
}

func (b *Backend) Rollback(ctx context.Context, v, to cowfs.Volume) error {
	ds, err := b.ours(v, "rolling back")
	if err != nil {
		return err
	}
	if v.Kind != cowfs.KindWritable {
		return fmt.Errorf("rolling back %s: only a writable volume can be rolled back: %w", v.Name, cowfs.ErrReadOnly)
	}
	if to.Kind != cowfs.KindReadOnly || !strings.HasPrefix(to.ID, ds+"@") {
		return fmt.Errorf("rolling back %s to %s: ZFS rolls back only to a snapshot of the volume itself: %w", v.Name, to.Name, cowfs.ErrUnsupported)
	}
	snap := &gozfs.Dataset{Name: to.ID, Type: gozfs.DatasetSnapshot}
	if err := snap.Rollback(false); err != nil {
		err = classify(err)
		if strings.Contains(err.Error(), "more recent snapshots") {
			return fmt.Errorf("rolling back %s to %s: later snapshots of it exist (checkpoints, or one its forks were made from), and ZFS would destroy them: %w", v.Name, to.Name, cowfs.ErrBusy)
		}
		return fmt.Errorf("rolling back %s to %s: %w", v.Name, to.Name, err)
	}
	return nil
}

func (b *Backend) RollbackProject(ctx context.Context, project, to cowfs.Volume) error {
	if project.Kind != cowfs.KindProject {
		return fmt.Errorf("rolling back project %s: not a project: %w", project.Name, cowfs.ErrInvalidName)
	}
	// Snapshot of a project made project@NAME and a read-only clone of it;
	// ZFS rolls a dataset back to one of its own snapshots, atomically.
	if to.Kind != cowfs.KindReadOnly || !to.Ours || !strings.HasPrefix(to.ID, project.ID+"@") {
		return fmt.Errorf("rolling back project %s to %s: not a snapshot sandboxd took of it: %w", project.Name, to.Name, cowfs.ErrInvalidName)
	}
	snap := &gozfs.Dataset{Name: to.ID, Type: gozfs.DatasetSnapshot}
	if err := snap.Rollback(false); err != nil {
		err = classify(err)
		if strings.Contains(err.Error(), "more recent snapshots") {
			return fmt.Errorf("rolling back project %s to %s: later snapshots of it exist (sandboxes made since), and ZFS would destroy them: %w", project.Name, to.Name, cowfs.ErrBusy)
		}
		return fmt.Errorf("rolling back project %s to %s: %w", project.Name, to.Name, err)
	}
	return nil
}

func (b *Backend) ChangedSince(ctx context.Context, v, since cowfs.Volume) (bool, error) {
	if !b.info.Capabilities.Generation {
		return false, fmt.Errorf("telling whether %s changed since %s: this ZFS (%s) has no \"written@\" property: %w", v.Name, since.Name, b.info.Version, cowfs.ErrUnsupported)
	}
	_, snapName, ok := strings.Cut(since.ID, "@")
	if !ok {
		return false, fmt.Errorf("telling whether %s changed since %s: not a snapshot: %w", v.Name, since.Name, cowfs.ErrInvalidName)
	}
	written, err := (&gozfs.Dataset{Name: v.ID}).GetProperty("written@" + snapName)
	if err != nil {
		return false, fmt.Errorf("telling whether %s changed since %s: %w", v.Name, since.Name, classify(err))
	}
	return written != "0", nil
}

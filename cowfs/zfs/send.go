package zfs

import (
	"context"
	"fmt"
	"io"
	"strings"

	gozfs "github.com/mistifyio/go-zfs/v4"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
)

func (b *Backend) Changes(ctx context.Context, from, to cowfs.Volume) ([]cowfs.Change, error) {
	if !from.ReadOnly() {
		return nil, fmt.Errorf("listing changes from %s: not a read-only snapshot: %w", from.Name, cowfs.ErrInvalidName)
	}
	if b.info.Capabilities.FastChanges {
		changes, err := diff(from, to)
		if err != nil {
			return nil, fmt.Errorf("listing changes from %s to %s: %w", from.Name, to.Name, err)
		}
		return changes, nil
	}
	changes, err := cowfs.WalkChanges(ctx, from.Path, to.Path)
	if err != nil {
		return nil, fmt.Errorf("listing changes from %s to %s: %w", from.Name, to.Name, err)
	}
	return changes, nil
}

// diff asks `zfs diff` (OpenZFS), through go-zfs.
func diff(from, to cowfs.Volume) ([]cowfs.Change, error) {
	target := to.ID
	inodes, err := (&gozfs.Dataset{Name: target}).Diff(from.ID)
	if err != nil {
		return nil, classify(err)
	}
	prefix := strings.TrimSuffix(to.Path, "/") + "/"
	rel := func(p string) string { return strings.TrimPrefix(p, prefix) }
	var changes []cowfs.Change
	for _, in := range inodes {
		c := cowfs.Change{Path: rel(in.Path), Type: diffType(in.Type)}
		switch in.Change {
		case gozfs.Created:
			c.Kind = cowfs.Added
		case gozfs.Removed:
			c.Kind = cowfs.Deleted
		case gozfs.Renamed:
			c.Kind, c.NewPath = cowfs.Renamed, rel(in.NewPath)
		default:
			c.Kind = cowfs.Modified
			if c.Type == cowfs.TypeDir {
				continue // a directory "modified" because an entry changed
			}
		}
		changes = append(changes, c)
	}
	return changes, nil
}

func diffType(t gozfs.InodeType) cowfs.FileType {
	switch t {
	case gozfs.File:
		return cowfs.TypeFile
	case gozfs.Directory:
		return cowfs.TypeDir
	case gozfs.SymbolicLink:
		return cowfs.TypeSymlink
	case gozfs.NamedPipe:
		return cowfs.TypeFIFO
	case gozfs.Socket:
		return cowfs.TypeSocket
	case gozfs.BlockDevice, gozfs.CharacterDevice:
		return cowfs.TypeDevice
	}
	return cowfs.TypeUnknown
}

func (b *Backend) Send(ctx context.Context, w io.Writer, from *cowfs.Volume, to cowfs.Volume) error {
	if !to.ReadOnly() || from != nil && !from.ReadOnly() {
		return fmt.Errorf("sending %s: ZFS sends only snapshots: %w", to.Name, cowfs.ErrReadOnly)
	}
	snap := &gozfs.Dataset{Name: to.ID, Type: gozfs.DatasetSnapshot}
	var err error
	if from == nil {
		err = snap.SendSnapshot(w)
	} else {
		err = snap.IncrementalSend(&gozfs.Dataset{Name: from.ID, Type: gozfs.DatasetSnapshot}, w)
	}
	if err != nil {
		return fmt.Errorf("sending %s: %w", to.Name, classify(err))
	}
	return nil
}

// Receive receives into a temporary dataset, then shows its
// snapshot as the read-only volume name. On any failure it is destroyed.
func (b *Backend) Receive(ctx context.Context, r io.Reader, name string) (v cowfs.Volume, err error) {
	ds, err := b.dataset(name)
	if err != nil {
		return v, fmt.Errorf("receiving: %w", err)
	}
	if err := b.absent(ctx, name, ds); err != nil {
		return v, fmt.Errorf("receiving: %w", err)
	}
	staging := b.root + "/recv" + tmpMark + name
	defer func() {
		if err != nil {
			_ = b.destroy(context.WithoutCancel(ctx), staging, "-r")
		}
	}()
	// No -u (zfs-fuse lacks it): the staging dataset is mounted a moment.
	if _, err := command.Run(ctx, command.Cmd{Argv: []string{"zfs", "receive", staging}, Stdin: r}); err != nil {
		return v, fmt.Errorf("receiving %s: %w", name, classify(err))
	}
	lines, err := command.Lines(ctx, "zfs", "list", "-H", "-t", "snapshot", "-r", "-o", "name", staging)
	if err != nil || len(lines) != 1 {
		return v, fmt.Errorf("receiving %s: the stream made %d snapshots, want 1: %w", name, len(lines), cowfs.ErrCorruptStream)
	}
	// Name the snapshot after the volume, as Snapshot does, so Delete
	// finds and removes it with the volume.
	snap := staging + "@" + name
	if _, err := command.Output(ctx, "zfs", "rename", lines[0][0], snap); err != nil {
		return v, fmt.Errorf("receiving %s: %w", name, classify(err))
	}
	if _, err := command.Output(ctx, "zfs", "set", propManaged+"=yes", snap); err != nil {
		return v, fmt.Errorf("receiving %s: %w", name, classify(err))
	}
	if _, err := command.Output(ctx, "zfs", "clone", "-o", propManaged+"=yes", "-o", "readonly=on",
		"-o", propKind+"="+string(cowfs.KindReadOnly), snap, ds); err != nil {
		return v, fmt.Errorf("receiving %s: %w", name, classify(err))
	}
	return b.volume(ctx, name, ds)
}

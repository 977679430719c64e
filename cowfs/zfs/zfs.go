// Package zfs is the cowfs backend for ZFS, on OpenZFS and on zfs-fuse
// (pool version 23, the testbed's).
//
// Every volume of sandboxd's is a dataset directly under the root dataset,
// so that each has files to look at (zfs-fuse shows no .zfs directory):
//
//   - a writable volume N is the dataset ROOT/N, empty or a clone;
//   - a read-only volume N is the snapshot SRC@N (its ID: what sends,
//     rollbacks and clones use) and a read-only clone ROOT/N (its files).
//
// All of them, snapshots included, carry the user property
// org.sandboxd:managed=yes set locally, which is how a reconcile tells
// sandboxd's from the user's.
//
// github.com/mistifyio/go-zfs does the sends, destroys, properties and
// rollbacks. Its Snapshot, Clone, ReceiveSnapshot and listings end with
// `zfs list -p`, which zfs-fuse lacks: those go through our exec wrapper
// with portable flags.
package zfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	gozfs "github.com/mistifyio/go-zfs/v4"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
)

const (
	propManaged = "org.sandboxd:managed"
	propKind    = "org.sandboxd:kind"
	// tmpMark is in every temporary dataset name: ZFS allows ':' in names,
	// volume names do not, so they never collide.
	tmpMark = ":"
)

// Backend is a ZFS pool rooted at a dataset.
type Backend struct {
	root string // the root dataset, e.g. tank/sandboxd
	pool string
	info cowfs.Info
}

var _ cowfs.Backend = (*Backend)(nil)

// Open opens (making it if needed) the root dataset. A missing pool is
// ErrNotFound, naming it.
func Open(ctx context.Context, root string) (*Backend, error) {
	if err := cowfs.ValidateDataset(root); err != nil {
		return nil, fmt.Errorf("opening zfs root: %w", err)
	}
	pool, _, _ := strings.Cut(root, "/")
	if _, err := command.Output(ctx, "zpool", "list", "-H", "-o", "name", pool); err != nil {
		return nil, fmt.Errorf("opening zfs root %s: pool %s: %w", root, pool, classify(err))
	}
	b := &Backend{root: root, pool: pool}
	if _, err := command.Output(ctx, "zfs", "list", "-H", "-o", "name", root); err != nil {
		if !errors.Is(classify(err), cowfs.ErrNotFound) {
			return nil, fmt.Errorf("opening zfs root %s: %w", root, classify(err))
		}
		if _, err := command.Output(ctx, "zfs", "create", "-p", "-o", propManaged+"=yes", root); err != nil {
			return nil, fmt.Errorf("making zfs root %s: %w", root, classify(err))
		}
	}
	b.info = cowfs.Info{Backend: "zfs", Root: root, Version: version(ctx, pool)}
	caps := &b.info.Capabilities
	caps.Quota = true
	caps.SeparateMounts = true
	// zfs-fuse answers "unrecognized command" to what it lacks.
	_, err := command.Output(ctx, "zfs", "diff")
	caps.FastChanges = err == nil || !strings.Contains(command.Stderr(err), "unrecognized command")
	_, err = command.Output(ctx, "zfs", "get", "-H", "-o", "value", "written", root)
	caps.Generation = err == nil
	caps.OverlayUpper = overlayUpper(b.info.Version)
	if err := b.removeLeftovers(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

func version(ctx context.Context, pool string) string {
	if out, err := command.Output(ctx, "zfs", "version"); err == nil {
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return line
	}
	// zfs-fuse's `zpool get` takes no flags: read the VALUE column.
	lines, err := command.Lines(ctx, "zpool", "get", "version", pool)
	if err != nil || len(lines) < 2 {
		return "unknown"
	}
	f := strings.Fields(strings.Join(lines[len(lines)-1], " "))
	if len(f) < 3 {
		return "unknown"
	}
	return "zfs-fuse, pool version " + f[2]
}

// overlayUpper reports whether a ZFS of this version can carry an
// overlayfs upper layer: OpenZFS from 2.2 (`zfs version` prints
// "zfs-2.2.0-1"); not zfs-fuse.
func overlayUpper(version string) bool {
	v, ok := strings.CutPrefix(version, "zfs-")
	if !ok {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 2
}

func (b *Backend) Info() cowfs.Info { return b.info }

func (b *Backend) Close() error { return nil }

// dataset returns ROOT/name after checking the name.
func (b *Backend) dataset(name string) (string, error) {
	if err := cowfs.ValidateName(name); err != nil {
		return "", err
	}
	return b.root + "/" + name, nil
}

// props reads properties of one dataset (or snapshot) with `zfs get -Hp`,
// which zfs-fuse has (unlike `zfs list -p`).
func props(ctx context.Context, target string, names ...string) (map[string]string, error) {
	lines, err := command.Lines(ctx, "zfs", "get", "-Hp", "-o", "property,value,source", strings.Join(names, ","), target)
	if err != nil {
		return nil, classify(err)
	}
	values := map[string]string{}
	for _, f := range lines {
		if len(f) >= 3 {
			values[f[0]] = f[1]
			values[f[0]+".source"] = f[2]
		}
	}
	return values, nil
}

var volumeProps = []string{"origin", "mountpoint", "creation", propKind, propManaged}

// volume reads sandboxd's volume at dataset ds.
func (b *Backend) volume(ctx context.Context, name, ds string) (cowfs.Volume, error) {
	p, err := props(ctx, ds, volumeProps...)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("volume %s: %w", name, err)
	}
	return b.volumeFrom(name, ds, p), nil
}

func (b *Backend) volumeFrom(name, ds string, p map[string]string) cowfs.Volume {
	v := cowfs.Volume{
		Name:   name,
		ID:     ds,
		Path:   p["mountpoint"],
		Kind:   cowfs.KindWritable,
		Origin: dash(p["origin"]),
		Ours:   p[propManaged] == "yes" && p[propManaged+".source"] == "local",
	}
	if p[propKind] == string(cowfs.KindReadOnly) {
		v.Kind = cowfs.KindReadOnly
		v.ID = v.Origin // the snapshot is the volume; the clone shows its files
	}
	if secs, err := strconv.ParseInt(p["creation"], 10, 64); err == nil {
		v.Created = time.Unix(secs, 0)
	}
	return v
}

func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

func (b *Backend) Project(ctx context.Context, location string) (cowfs.Volume, error) {
	if err := cowfs.ValidateDataset(location); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project: %w", err)
	}
	if pool, _, _ := strings.Cut(location, "/"); pool != b.pool {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: in pool %s, but the root %s is in %s: %w", location, pool, b.root, b.pool, cowfs.ErrOutsidePool)
	}
	if location == b.root || strings.HasPrefix(location, b.root+"/") {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: it is under sandboxd's root %s: %w", location, b.root, cowfs.ErrInvalidName)
	}
	p, err := props(ctx, location, "type", "mountpoint", "creation")
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: %w", location, err)
	}
	if p["type"] != "filesystem" {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: a %s, not a filesystem dataset: %w", location, p["type"], cowfs.ErrNotVolume)
	}
	v := cowfs.Volume{Name: location, ID: location, Path: p["mountpoint"], Kind: cowfs.KindProject}
	if secs, err := strconv.ParseInt(p["creation"], 10, 64); err == nil {
		v.Created = time.Unix(secs, 0)
	}
	return v, nil
}

// absent says ErrExists when the dataset exists.
func (b *Backend) absent(ctx context.Context, name, ds string) error {
	_, err := command.Output(ctx, "zfs", "list", "-H", "-o", "name", ds)
	switch err := classify(err); {
	case err == nil:
		return fmt.Errorf("volume %s: %w", name, cowfs.ErrExists)
	case errors.Is(err, cowfs.ErrNotFound):
		return nil
	default:
		return fmt.Errorf("volume %s: %w", name, err)
	}
}

func (b *Backend) Create(ctx context.Context, name string) (cowfs.Volume, error) {
	ds, err := b.dataset(name)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume: %w", err)
	}
	if err := b.absent(ctx, name, ds); err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume: %w", err)
	}
	if _, err := command.Output(ctx, "zfs", "create", "-o", propManaged+"=yes", "-o", propKind+"=writable", ds); err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume %s: %w", name, classify(err))
	}
	return b.volume(ctx, name, ds)
}

// Snapshot: a read-only volume is SRC@name plus a read-only clone; a
// writable one is a clone of SRC (when SRC is a snapshot) or of a new
// SRC@name. Whatever a failure interrupts is undone.
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
	} else if readOnly {
		return v, fmt.Errorf("snapshotting %s: it is read-only already; make a writable snapshot of it: %w", src.Name, cowfs.ErrUnsupported)
	}
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

func (b *Backend) Get(ctx context.Context, name string) (cowfs.Volume, error) {
	ds, err := b.dataset(name)
	if err != nil {
		return cowfs.Volume{}, err
	}
	return b.volume(ctx, name, ds)
}

func (b *Backend) List(ctx context.Context) ([]cowfs.Volume, error) {
	// zfs-fuse's `zfs get` has no -t: snapshots come too, and are skipped.
	lines, err := command.Lines(ctx, "zfs", "get", "-Hp", "-r", "-d", "1",
		"-o", "name,property,value,source", strings.Join(volumeProps, ","), b.root)
	if err != nil {
		return nil, fmt.Errorf("listing volumes in %s: %w", b.root, classify(err))
	}
	byDS := map[string]map[string]string{}
	var order []string
	for _, f := range lines {
		if len(f) < 4 || f[0] == b.root || strings.Contains(f[0], "@") {
			continue
		}
		if byDS[f[0]] == nil {
			byDS[f[0]] = map[string]string{}
			order = append(order, f[0])
		}
		byDS[f[0]][f[1]] = f[2]
		byDS[f[0]][f[1]+".source"] = f[3]
	}
	var vols []cowfs.Volume
	for _, ds := range order {
		name := path.Base(ds)
		if cowfs.ValidateName(name) != nil {
			continue // a temporary dataset
		}
		vols = append(vols, b.volumeFrom(name, ds, byDS[ds]))
	}
	return vols, nil
}

// removeLeftovers destroys the temporary datasets a crash left under the
// root (their names hold ':').
func (b *Backend) removeLeftovers(ctx context.Context) error {
	lines, err := command.Lines(ctx, "zfs", "list", "-H", "-r", "-d", "1", "-t", "filesystem", "-o", "name", b.root)
	if err != nil {
		return fmt.Errorf("listing %s: %w", b.root, classify(err))
	}
	for _, f := range lines {
		if strings.Contains(path.Base(f[0]), tmpMark) {
			if err := b.destroy(ctx, f[0], "-r"); err != nil {
				return fmt.Errorf("removing leftover %s: %w", f[0], err)
			}
		}
	}
	return nil
}

// clonesOf lists the datasets of the pool whose origin is snap.
func (b *Backend) clonesOf(ctx context.Context, snap string) ([]string, error) {
	lines, err := command.Lines(ctx, "zfs", "get", "-H", "-r", "-o", "name,value", "origin", b.pool)
	if err != nil {
		return nil, classify(err)
	}
	var clones []string
	for _, f := range lines {
		if len(f) == 2 && f[1] == snap {
			clones = append(clones, f[0])
		}
	}
	return clones, nil
}

// destroy unmounts (zfs-fuse will not destroy a mounted dataset) and
// destroys target, retrying while zfs-fuse still calls it busy just after
// the unmount.
func (b *Backend) destroy(ctx context.Context, target string, flags ...string) error {
	if !strings.Contains(target, "@") {
		_, _ = command.Output(ctx, "zfs", "unmount", target)
	}
	args := append(append([]string{"zfs", "destroy"}, flags...), target)
	wait := 10 * time.Millisecond
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := command.Output(ctx, args...)
		err = classify(err)
		if err == nil || !errors.Is(err, cowfs.ErrBusy) || time.Now().After(deadline) ||
			strings.Contains(err.Error(), "dependent clones") || strings.Contains(err.Error(), "has children") {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

func (b *Backend) ours(v cowfs.Volume, doing string) (string, error) {
	ds, err := b.dataset(v.Name)
	if err != nil || !v.Ours {
		return "", fmt.Errorf("%s %s: %w", doing, v.Name, cowfs.ErrNotOurs)
	}
	return ds, nil
}

func (b *Backend) Delete(ctx context.Context, v cowfs.Volume) error {
	ds, err := b.ours(v, "deleting")
	if err != nil {
		return err
	}
	cur, err := b.volume(ctx, v.Name, ds)
	if err != nil {
		return fmt.Errorf("deleting %s: %w", v.Name, err)
	}
	// The snapshot this volume made for itself (SRC@name), if any: it goes
	// with it unless other clones still use it.
	origin := cur.Origin
	if cur.Kind == cowfs.KindReadOnly {
		origin = cur.ID
	}
	ownOrigin := strings.HasSuffix(origin, "@"+v.Name)
	if ownOrigin {
		clones, err := b.clonesOf(ctx, origin)
		if err != nil {
			return fmt.Errorf("deleting %s: %w", v.Name, err)
		}
		var others []string
		for _, c := range clones {
			if c != ds {
				others = append(others, c)
			}
		}
		if len(others) > 0 {
			return fmt.Errorf("deleting %s: volumes made from it still exist (%s): %w", v.Name, strings.Join(others, ", "), cowfs.ErrBusy)
		}
	}
	if err := b.destroy(ctx, ds); err != nil {
		if strings.Contains(err.Error(), "has children") {
			return fmt.Errorf("deleting %s: it has snapshots (checkpoints): delete them first: %w", v.Name, cowfs.ErrBusy)
		}
		return fmt.Errorf("deleting %s: %w", v.Name, err)
	}
	if ownOrigin {
		if err := b.destroy(ctx, origin); err != nil {
			return fmt.Errorf("deleting %s: its snapshot %s: %w", v.Name, origin, err)
		}
		// A received volume's snapshot lives in a temporary-named dataset.
		if src, _, _ := strings.Cut(origin, "@"); strings.Contains(path.Base(src), tmpMark) {
			if err := b.destroy(ctx, src, "-r"); err != nil {
				return fmt.Errorf("deleting %s: %w", v.Name, err)
			}
		}
	}
	return nil
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
			return fmt.Errorf("rolling back %s to %s: later snapshots of it exist, and ZFS would destroy them: %w", v.Name, to.Name, cowfs.ErrBusy)
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

func (b *Backend) SetQuota(ctx context.Context, v cowfs.Volume, bytes uint64) error {
	ds, err := b.ours(v, "setting the quota of")
	if err != nil {
		return err
	}
	// "quota", not "refquota": a clone's "used" counts only what it wrote,
	// its "referenced" counts the whole project it shares.
	limit := "none"
	if bytes > 0 {
		limit = strconv.FormatUint(bytes, 10)
	}
	if err := (&gozfs.Dataset{Name: ds}).SetProperty("quota", limit); err != nil {
		return fmt.Errorf("setting the quota of %s: %w", v.Name, classify(err))
	}
	return nil
}

func (b *Backend) Usage(ctx context.Context, v cowfs.Volume) (cowfs.Usage, error) {
	ds, err := b.dataset(v.Name)
	if err != nil || v.Kind == cowfs.KindProject {
		ds = v.ID
	}
	d := &gozfs.Dataset{Name: ds}
	var u cowfs.Usage
	for _, f := range []struct {
		prop string
		dst  *uint64
	}{{"used", &u.Exclusive}, {"referenced", &u.Referenced}, {"quota", &u.Quota}} {
		s, err := d.GetProperty(f.prop)
		if err != nil {
			return u, fmt.Errorf("reading the usage of %s: %w", v.Name, classify(err))
		}
		if s == "-" || s == "none" {
			continue
		}
		if *f.dst, err = strconv.ParseUint(s, 10, 64); err != nil {
			return u, fmt.Errorf("reading the usage of %s: %s=%q: %w", v.Name, f.prop, s, err)
		}
	}
	return u, nil
}

// classify maps what zfs and zpool print to the sentinels, for errors from
// our exec wrapper and from go-zfs alike.
func classify(err error) error {
	if err == nil {
		return nil
	}
	stderr := command.Stderr(err)
	var ge *gozfs.Error
	if errors.As(err, &ge) {
		stderr = ge.Stderr
	}
	msg := strings.ToLower(stderr)
	var sentinel error
	switch {
	case strings.Contains(msg, "does not exist") || strings.Contains(msg, "no such pool") ||
		strings.Contains(msg, "no such dataset") || strings.Contains(msg, "could not find any snapshots"):
		sentinel = cowfs.ErrNotFound
	case strings.Contains(msg, "already exists"):
		sentinel = cowfs.ErrExists
	case strings.Contains(msg, "busy") || strings.Contains(msg, "has children") ||
		strings.Contains(msg, "dependent clones") || strings.Contains(msg, "more recent snapshots"):
		sentinel = cowfs.ErrBusy
	case strings.Contains(msg, "out of space") || strings.Contains(msg, "no space"):
		sentinel = cowfs.ErrNoSpace
	case strings.Contains(msg, "quota exceeded"):
		sentinel = cowfs.ErrQuotaExceeded
	case strings.Contains(msg, "invalid backup stream") || strings.Contains(msg, "invalid stream") ||
		strings.Contains(msg, "checksum mismatch") || strings.Contains(msg, "stream is corrupt") ||
		strings.Contains(msg, "premature end") || strings.Contains(msg, "input stream") ||
		strings.Contains(msg, "incomplete stream") || strings.Contains(msg, "bad magic") ||
		strings.Contains(msg, "failed to read from stream"):
		sentinel = cowfs.ErrCorruptStream
	}
	if sentinel == nil {
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

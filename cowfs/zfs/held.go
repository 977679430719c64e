package zfs

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
)

// A ZFS snapshot lives while a clone of it does, and a dataset while a
// snapshot of it does. So that a volume can be deleted while volumes
// made from it live (a fork outliving its source), Delete keeps what a
// clone still needs, held: marked org.sandboxd:held=yes (List and Get do
// not see it; its name stays taken) and destroyed by the Delete that
// ends its last clone, or by Open after a crash. Held are:
//
//   - a read-only volume's snapshot SRC@N, its read-only clone ROOT/N
//     destroyed;
//   - a writable volume ROOT/N whose snapshots are all held, unmounted
//     (canmount=noauto) and rolled back to its last snapshot (what it
//     wrote after is freed).
//
// Marked, not renamed: zfs-fuse remounts the clones of what it renames,
// which fails while a sandbox uses them. Not `zfs promote` of a clone
// either: a promoted clone takes over its origin's snapshots and is
// charged for their blocks, so a fork would count what its source wrote
// against its own quota.
const propHeld = "org.sandboxd:held"

// held says which of target and the snapshots below it are held.
func held(ctx context.Context, target string) (map[string]bool, error) {
	lines, err := command.Lines(ctx, "zfs", "get", "-H", "-r", "-o", "name,value", propHeld, target)
	if err != nil {
		return nil, classify(err)
	}
	m := map[string]bool{}
	for _, f := range lines {
		if len(f) == 2 && f[1] == "yes" {
			m[f[0]] = true
		}
	}
	return m, nil
}

func hold(ctx context.Context, target string) error {
	if _, err := command.Output(ctx, "zfs", "set", propHeld+"=yes", target); err != nil {
		return fmt.Errorf("keeping %s for its clones: %w", target, classify(err))
	}
	return nil
}

// origins maps each snapshot of the pool that has clones to them.
func (b *Backend) origins(ctx context.Context) (map[string][]string, error) {
	lines, err := command.Lines(ctx, "zfs", "get", "-H", "-r", "-o", "name,value", "origin", b.pool)
	if err != nil {
		return nil, classify(err)
	}
	m := map[string][]string{}
	for _, f := range lines {
		if len(f) == 2 && f[1] != "-" {
			m[f[1]] = append(m[f[1]], f[0])
		}
	}
	return m, nil
}

// snapshotsOf lists the snapshots of dataset ds, oldest first.
func snapshotsOf(ctx context.Context, ds string) ([]string, error) {
	lines, err := command.Lines(ctx, "zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-r", ds)
	if err != nil {
		return nil, classify(err)
	}
	var snaps []string
	for _, f := range lines {
		if len(f) > 0 && strings.HasPrefix(f[0], ds+"@") {
			snaps = append(snaps, f[0])
		}
	}
	return snaps, nil
}

// holdDataset is Delete of writable volume name (dataset ds) that has
// snapshots: refused (ErrBusy) while one is a live volume's; otherwise
// the held ones no clone needs go, and if one is still needed ds is
// held. kept says whether it was (false: ds is gone).
func (b *Backend) holdDataset(ctx context.Context, name, ds string) (kept bool, err error) {
	snaps, err := snapshotsOf(ctx, ds)
	if err != nil {
		return false, fmt.Errorf("deleting %s: %w", name, err)
	}
	isHeld, err := held(ctx, ds)
	if err != nil {
		return false, fmt.Errorf("deleting %s: %w", name, err)
	}
	for _, s := range snaps {
		if !isHeld[s] {
			return false, fmt.Errorf("deleting %s: it has snapshots (checkpoints): delete them first: %w", name, cowfs.ErrBusy)
		}
	}
	clones, err := b.origins(ctx)
	if err != nil {
		return false, fmt.Errorf("deleting %s: %w", name, err)
	}
	var needed []string
	for _, s := range snaps {
		if len(clones[s]) > 0 {
			needed = append(needed, s)
		} else if err := b.destroy(ctx, s); err != nil {
			return false, fmt.Errorf("deleting %s: its snapshot %s: %w", name, s, err)
		}
	}
	if len(needed) == 0 {
		if err := b.destroy(ctx, ds); err != nil {
			return false, fmt.Errorf("deleting %s: %w", name, err)
		}
		return false, nil
	}
	// Later snapshots are gone: the last needed one is the latest, and a
	// rollback to it frees what ds wrote since. Marked held last: until
	// then it is the volume still, and a Delete again does this again.
	last := needed[len(needed)-1]
	for _, args := range [][]string{
		{"zfs", "set", "canmount=noauto", ds},
		{"zfs", "unmount", ds},
		{"zfs", "rollback", last},
		{"zfs", "set", propHeld + "=yes", ds},
	} {
		if _, err := command.Output(ctx, args...); err != nil && args[1] != "unmount" {
			return false, fmt.Errorf("deleting %s, kept for the volumes made from it (%s): %w", name, strings.Join(clones[last], ", "), classify(err))
		}
	}
	return true, nil
}

// sweep destroys the held snapshot snap if no clone needs it any more,
// then the held or temporary dataset it was of once it has no snapshot
// left, and so on up that dataset's origin.
func (b *Backend) sweep(ctx context.Context, snap string) error {
	for snap != "" {
		isHeld, err := held(ctx, snap)
		if err != nil || !isHeld[snap] {
			return err
		}
		clones, err := b.origins(ctx)
		if err != nil {
			return fmt.Errorf("dropping held snapshot %s: %w", snap, err)
		}
		if len(clones[snap]) > 0 {
			return nil
		}
		if err := b.destroy(ctx, snap); err != nil {
			return fmt.Errorf("dropping held snapshot %s: %w", snap, err)
		}
		ds, _, _ := strings.Cut(snap, "@")
		if snap, err = b.dropDataset(ctx, ds); err != nil {
			return err
		}
	}
	return nil
}

// dropDataset destroys ds, when it is a held or temporary dataset of
// sandboxd's with no snapshot left, and returns its origin ("" when it
// stays or had none).
func (b *Backend) dropDataset(ctx context.Context, ds string) (string, error) {
	if !strings.HasPrefix(ds, b.root+"/") {
		return "", nil // a project's
	}
	p, err := props(ctx, ds, "origin", propHeld)
	if err != nil {
		return "", fmt.Errorf("dropping held dataset %s: %w", ds, err)
	}
	if !(p[propHeld] == "yes" && p[propHeld+".source"] == "local" || strings.Contains(path.Base(ds), tmpMark)) {
		return "", nil // a live volume
	}
	if snaps, err := snapshotsOf(ctx, ds); err != nil || len(snaps) > 0 {
		return "", err
	}
	if err := b.destroy(ctx, ds, "-r"); err != nil {
		return "", fmt.Errorf("dropping held dataset %s: %w", ds, err)
	}
	return dash(p["origin"]), nil
}

// removeHeld destroys what was held and no clone needs any more (left
// by a crash between a clone's destroy and its sweep), anywhere in the
// pool. One that will not go is tried again at the next Open: a start
// is not refused for it.
func (b *Backend) removeHeld(ctx context.Context) error {
	isHeld, err := held(ctx, b.pool)
	if err != nil {
		return fmt.Errorf("listing what is held in %s: %w", b.pool, err)
	}
	for target := range isHeld {
		if strings.Contains(target, "@") {
			_ = b.sweep(ctx, target)
		} else if origin, err := b.dropDataset(ctx, target); err == nil {
			_ = b.sweep(ctx, origin)
		}
	}
	return nil
}

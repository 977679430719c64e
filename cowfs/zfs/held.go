package zfs

import (
	"context"
	"fmt"
	"path"
	"strings"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
	"github.com/sandboxd/sandboxd/internal/randid"
)

// A ZFS snapshot lives while a clone of it does, and a dataset while a
// snapshot of it does. So that a volume can be deleted while volumes
// made from it live (a fork outliving its source), Delete keeps what a
// clone still needs, held: renamed out of the way (its name is free
// again, List and Get do not see it) and destroyed by the Delete that
// ends its last clone, or by Open after a crash. Held are:
//
//   - a read-only volume's snapshot SRC@N, renamed SRC@N:held-RAND, its
//     read-only clone ROOT/N destroyed;
//   - a writable volume ROOT/N whose snapshots are all held, renamed
//     ROOT/N:held-RAND, unmounted and rolled back to its last snapshot
//     (what it wrote after is freed).
//
// Not `zfs promote` of a clone: a promoted clone takes over its origin's
// snapshots and is charged for their blocks, so a fork would count what
// its source wrote against its own quota.
const heldMark = tmpMark + "held-"

func heldName(name string) string { return name + heldMark + randid.Hex(4) }

// isHeld says whether a snapshot or dataset is one Delete kept.
func isHeld(target string) bool {
	if _, snap, ok := strings.Cut(target, "@"); ok {
		return strings.Contains(snap, heldMark)
	}
	return strings.Contains(path.Base(target), heldMark)
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

// holdSnapshot renames snap (SRC@N) to SRC@N:held-RAND.
func holdSnapshot(ctx context.Context, snap string) (string, error) {
	src, name, _ := strings.Cut(snap, "@")
	held := src + "@" + heldName(name)
	if _, err := command.Output(ctx, "zfs", "rename", snap, held); err != nil {
		return "", fmt.Errorf("keeping snapshot %s for its clones: %w", snap, classify(err))
	}
	return held, nil
}

// holdDataset is Delete of writable volume name (dataset ds) that has
// snapshots: refused (ErrBusy) while one is a live volume's; otherwise
// the held ones no clone needs go, and if one is still needed ds is
// held. held says whether it was (false: ds is gone).
func (b *Backend) holdDataset(ctx context.Context, name, ds string) (held bool, err error) {
	snaps, err := snapshotsOf(ctx, ds)
	if err != nil {
		return false, fmt.Errorf("deleting %s: %w", name, err)
	}
	for _, s := range snaps {
		if !isHeld(s) {
			return false, fmt.Errorf("deleting %s: it has snapshots (checkpoints): delete them first: %w", name, cowfs.ErrBusy)
		}
	}
	clones, err := b.origins(ctx)
	if err != nil {
		return false, fmt.Errorf("deleting %s: %w", name, err)
	}
	var kept []string
	for _, s := range snaps {
		if len(clones[s]) > 0 {
			kept = append(kept, s)
		} else if err := b.destroy(ctx, s); err != nil {
			return false, fmt.Errorf("deleting %s: its snapshot %s: %w", name, s, err)
		}
	}
	if len(kept) == 0 {
		if err := b.destroy(ctx, ds); err != nil {
			return false, fmt.Errorf("deleting %s: %w", name, err)
		}
		return false, nil
	}
	// Later snapshots are gone: the last kept one is the latest, and a
	// rollback to it frees what ds wrote since. Unmounted first, and not
	// mounted again by the rename.
	for _, args := range [][]string{
		{"zfs", "set", "canmount=noauto", ds},
		{"zfs", "unmount", ds},
		{"zfs", "rollback", kept[len(kept)-1]},
		{"zfs", "rename", ds, b.root + "/" + heldName(name)},
	} {
		if _, err := command.Output(ctx, args...); err != nil && args[1] != "unmount" {
			return false, fmt.Errorf("deleting %s, kept for the volumes made from it (%s): %w", name, strings.Join(clones[kept[len(kept)-1]], ", "), classify(err))
		}
	}
	return true, nil
}

// sweep destroys the held snapshot snap if no clone needs it any more,
// then the held or temporary dataset it was of once it has no snapshot
// left, and so on up that dataset's origin.
func (b *Backend) sweep(ctx context.Context, snap string) error {
	for isHeld(snap) {
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
		if !strings.HasPrefix(ds, b.root+"/") || !strings.Contains(path.Base(ds), tmpMark) {
			return nil // a project's, or a live volume's
		}
		if snap, err = b.dropDataset(ctx, ds); err != nil || snap == "" {
			return err
		}
	}
	return nil
}

// dropDataset destroys the held or temporary dataset ds if it has no
// snapshot left, and returns its origin ("" when it stays or had none).
func (b *Backend) dropDataset(ctx context.Context, ds string) (string, error) {
	snaps, err := snapshotsOf(ctx, ds)
	if err != nil || len(snaps) > 0 {
		return "", err
	}
	p, err := props(ctx, ds, "origin")
	if err != nil {
		return "", fmt.Errorf("dropping held dataset %s: %w", ds, err)
	}
	if err := b.destroy(ctx, ds, "-r"); err != nil {
		return "", fmt.Errorf("dropping held dataset %s: %w", ds, err)
	}
	return dash(p["origin"]), nil
}

// removeHeld destroys what was held and no clone needs any more (left
// by a crash between a clone's destroy and its sweep): held datasets
// under the root and held snapshots anywhere in the pool. One that will
// not go is tried again at the next Open: a start is not refused for it.
func (b *Backend) removeHeld(ctx context.Context) error {
	lines, err := command.Lines(ctx, "zfs", "list", "-H", "-t", "snapshot", "-o", "name", "-r", b.pool)
	if err != nil {
		return fmt.Errorf("listing snapshots in %s: %w", b.pool, classify(err))
	}
	for _, f := range lines {
		if len(f) == 0 || !isHeld(f[0]) {
			continue
		}
		if p, err := props(ctx, f[0], propManaged); err != nil || p[propManaged] != "yes" {
			continue // not one of sandboxd's
		}
		_ = b.sweep(ctx, f[0])
	}
	return nil
}

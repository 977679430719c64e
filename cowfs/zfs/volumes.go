package zfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/cowfs/internal/command"
)

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

var volumeProps = []string{"origin", "mountpoint", "creation", propKind, propManaged, propHeld}

// volume reads sandboxd's volume at dataset ds.
func (b *Backend) volume(ctx context.Context, name, ds string) (cowfs.Volume, error) {
	p, err := props(ctx, ds, volumeProps...)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("volume %s: %w", name, err)
	}
	if p[propHeld] == "yes" {
		return cowfs.Volume{}, fmt.Errorf("volume %s: deleted, kept only for the volumes made from it: %w", name, cowfs.ErrNotFound)
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
		if cowfs.ValidateName(name) != nil || byDS[ds][propHeld] == "yes" {
			continue // a temporary dataset, or a held one (held.go)
		}
		vols = append(vols, b.volumeFrom(name, ds, byDS[ds]))
	}
	return vols, nil
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
	// with it unless other clones still use it. A read-only volume's is
	// then held for them (held.go); a writable one's is its alone.
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
		switch {
		case len(others) > 0 && cur.Kind != cowfs.KindReadOnly:
			return fmt.Errorf("deleting %s: volumes made from it still exist (%s): %w", v.Name, strings.Join(others, ", "), cowfs.ErrBusy)
		case len(others) > 0:
			if err := hold(ctx, origin); err != nil {
				return fmt.Errorf("deleting %s: %w", v.Name, err)
			}
			ownOrigin = false
		}
	}
	kept := false
	if err := b.destroy(ctx, ds); err != nil {
		if !strings.Contains(err.Error(), "has children") {
			return fmt.Errorf("deleting %s: %w", v.Name, err)
		}
		if kept, err = b.holdDataset(ctx, v.Name, ds); err != nil {
			return err
		}
	}
	switch {
	case ownOrigin && kept:
		// The held dataset is a clone of it: held with it.
		return hold(ctx, origin)
	case ownOrigin:
		if err := b.destroy(ctx, origin); err != nil {
			return fmt.Errorf("deleting %s: its snapshot %s: %w", v.Name, origin, err)
		}
		// A received volume's snapshot lives in a temporary-named dataset.
		if src, _, _ := strings.Cut(origin, "@"); strings.Contains(path.Base(src), tmpMark) {
			if err := b.destroy(ctx, src, "-r"); err != nil {
				return fmt.Errorf("deleting %s: %w", v.Name, err)
			}
		}
	case !kept:
		if err := b.sweep(ctx, origin); err != nil {
			return fmt.Errorf("deleting %s: %w", v.Name, err)
		}
	}
	return nil
}

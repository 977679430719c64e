package btrfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	dbtrfs "github.com/dennwc/btrfs"

	"github.com/sandboxd/sandboxd/cowfs"
)

// path returns where sandboxd's volume name lives, after checking the name.
func (b *Backend) path(name string) (string, error) {
	if err := cowfs.ValidateName(name); err != nil {
		return "", err
	}
	return filepath.Join(b.root, name), nil
}

func (b *Backend) volume(name, path string, kind cowfs.Kind, ours bool) (cowfs.Volume, error) {
	v := cowfs.Volume{Name: name, ID: path, Path: path, Kind: kind, Ours: ours}
	fs, err := dbtrfs.Open(path, true)
	if err != nil {
		return v, fmt.Errorf("opening subvolume %s: %w", path, notFound(err))
	}
	defer fs.Close()
	ro, err := dbtrfs.IsReadOnly(path)
	if err != nil {
		return v, fmt.Errorf("reading flags of subvolume %s: %w", path, err)
	}
	if ours {
		v.Kind = cowfs.KindWritable
		if ro {
			v.Kind = cowfs.KindReadOnly
		}
	}
	if si, err := fs.SubvolumeByPath(path); err == nil {
		v.Created = si.OTime
	}
	return v, nil
}

func (b *Backend) Project(ctx context.Context, location string) (cowfs.Volume, error) {
	if !filepath.IsAbs(location) {
		return cowfs.Volume{}, fmt.Errorf("opening project %q: not an absolute path: %w", location, cowfs.ErrInvalidName)
	}
	path := filepath.Clean(location)
	if st, err := os.Lstat(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: %w", path, notFound(err))
	} else if st.Mode()&os.ModeSymlink != 0 {
		// The project is what is at its path, not what a link there
		// points at (another's subvolume, /).
		return cowfs.Volume{}, fmt.Errorf("opening project %s: a symlink: %w", path, cowfs.ErrNotVolume)
	}
	if err := checkBtrfs(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project: %w", err)
	}
	if ok, err := dbtrfs.IsSubVolume(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: %w", path, err)
	} else if !ok {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: a directory, not a btrfs subvolume: %w", path, cowfs.ErrNotVolume)
	}
	if id, err := fsid(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: %w", path, err)
	} else if id != b.fsid {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: on btrfs filesystem %s, but the pool's root %s is on %s: %w", path, id, b.root, b.fsid, cowfs.ErrOutsidePool)
	}
	if filepath.Dir(path) == b.root {
		return cowfs.Volume{}, fmt.Errorf("opening project %s: it is a volume of sandboxd's, under its root: %w", path, cowfs.ErrInvalidName)
	}
	return b.volume(location, path, cowfs.KindProject, false)
}

func (b *Backend) Create(ctx context.Context, name string) (cowfs.Volume, error) {
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume: %w", err)
	}
	if err := b.absent(name, path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume: %w", err)
	}
	if err := dbtrfs.CreateSubVolume(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("creating volume %s: %w", name, classify(err))
	}
	return b.volume(name, path, cowfs.KindWritable, true)
}

// absent says ErrExists if anything is at path.
func (b *Backend) absent(name, path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("volume %s: %w", name, cowfs.ErrExists)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("volume %s: %w", name, err)
	}
	return nil
}

func (b *Backend) Get(ctx context.Context, name string) (cowfs.Volume, error) {
	path, err := b.path(name)
	if err != nil {
		return cowfs.Volume{}, err
	}
	if ok, err := dbtrfs.IsSubVolume(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("volume %s: %w", name, notFound(err))
	} else if !ok {
		return cowfs.Volume{}, fmt.Errorf("volume %s: %s is not a subvolume: %w", name, path, cowfs.ErrNotVolume)
	}
	return b.volume(name, path, cowfs.KindWritable, true)
}

func (b *Backend) List(ctx context.Context) ([]cowfs.Volume, error) {
	entries, err := os.ReadDir(b.root)
	if err != nil {
		return nil, fmt.Errorf("listing volumes in %s: %w", b.root, err)
	}
	var vols []cowfs.Volume
	for _, e := range entries {
		if !e.IsDir() || cowfs.ValidateName(e.Name()) != nil {
			continue
		}
		path := filepath.Join(b.root, e.Name())
		if ok, err := dbtrfs.IsSubVolume(path); err != nil || !ok {
			continue
		}
		v, err := b.volume(e.Name(), path, cowfs.KindWritable, true)
		if errors.Is(err, cowfs.ErrNotFound) {
			continue // deleted while we listed
		}
		if err != nil {
			return nil, err
		}
		vols = append(vols, v)
	}
	return vols, nil
}

// ours checks that v is one of sandboxd's volumes, directly under the root.
func (b *Backend) ours(v cowfs.Volume, doing string) error {
	if !v.Ours || filepath.Dir(v.ID) != b.root {
		return fmt.Errorf("%s %s: %w", doing, v.Name, cowfs.ErrNotOurs)
	}
	return nil
}

func (b *Backend) Delete(ctx context.Context, v cowfs.Volume) error {
	if err := b.ours(v, "deleting"); err != nil {
		return err
	}
	if _, err := os.Lstat(v.ID); err != nil {
		return fmt.Errorf("deleting %s: %w", v.Name, notFound(err))
	}
	// Rename first: a crash mid-way leaves a leftover that Open removes,
	// never a half-deleted volume under its own name.
	tmp := filepath.Join(b.root, tmpPrefix+"del-"+v.Name)
	if err := os.Rename(v.ID, tmp); err != nil {
		return fmt.Errorf("deleting %s: %w", v.Name, classify(err))
	}
	if err := b.removeTree(ctx, tmp); err != nil {
		return fmt.Errorf("deleting %s: %w", v.Name, err)
	}
	return nil
}

// removeTree deletes the subvolume (or plain directory) at path, with any
// subvolumes nested in it (a sandbox may have made some).
func (b *Backend) removeTree(ctx context.Context, path string) error {
	isSub, err := dbtrfs.IsSubVolume(path)
	if err != nil {
		return notFound(err)
	}
	if isSub {
		// Read-only snapshots cannot lose entries, so nested subvolumes can
		// only be in writable ones; try the fast way first.
		err := dbtrfs.DeleteSubVolume(path)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.ENOTEMPTY) {
			return classify(err)
		}
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		child := filepath.Join(path, e.Name())
		if e.IsDir() {
			if err := b.removeTree(ctx, child); err != nil {
				return err
			}
		} else if !isSub {
			if err := os.Remove(child); err != nil {
				return err
			}
		}
	}
	if isSub {
		return classify(dbtrfs.DeleteSubVolume(path))
	}
	return os.Remove(path)
}

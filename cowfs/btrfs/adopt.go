package btrfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	dbtrfs "github.com/dennwc/btrfs"

	"github.com/sandboxd/sandboxd/cowfs"
)

var _ cowfs.ProjectMaker = (*Backend)(nil)

// OnPool says whether dir is on the pool's btrfs filesystem.
func (b *Backend) OnPool(dir string) (bool, error) {
	magic, _, err := cowfs.FSType(dir)
	if err != nil {
		return false, err
	}
	if magic != cowfs.MagicBtrfs {
		return false, nil
	}
	// The filesystem's id is read at a subvolume: the nearest that holds
	// dir (its own, or the filesystem's top).
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if sub, err := dbtrfs.IsSubVolume(p); err == nil && sub {
			id, err := fsid(p)
			if err != nil {
				return false, fmt.Errorf("reading the filesystem of %s: %w", dir, err)
			}
			return id == b.fsid, nil
		}
		if p == "/" {
			return false, fmt.Errorf("reading the filesystem of %s: no subvolume holds it", dir)
		}
	}
}

// MakeProject makes an empty subvolume at path, on the pool's filesystem
// and not directly under the root.
func (b *Backend) MakeProject(ctx context.Context, path string) (cowfs.Volume, error) {
	if err := b.projectPath(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("making project volume %s: %w", path, err)
	}
	if err := dbtrfs.CreateSubVolume(path); err != nil {
		return cowfs.Volume{}, fmt.Errorf("making project volume %s: %w", path, classify(err))
	}
	return b.Project(ctx, path)
}

// RemoveProject deletes the subvolume at path (and any nested in it).
func (b *Backend) RemoveProject(ctx context.Context, path string) error {
	if err := b.projectPath(path); err != nil {
		return fmt.Errorf("removing project volume %s: %w", path, err)
	}
	if ok, err := b.IsVolume(path); err != nil {
		return fmt.Errorf("removing project volume %s: %w", path, err)
	} else if !ok {
		return fmt.Errorf("removing project volume %s: a directory, not a subvolume: %w", path, cowfs.ErrNotVolume)
	}
	return b.removeTree(ctx, path)
}

// IsVolume says whether path is a subvolume (not a symlink to one).
func (b *Backend) IsVolume(path string) (bool, error) {
	if st, err := os.Lstat(path); err != nil {
		return false, notFound(err)
	} else if st.Mode()&os.ModeSymlink != 0 {
		return false, nil
	}
	ok, err := dbtrfs.IsSubVolume(path)
	if err != nil {
		return false, notFound(err)
	}
	return ok, nil
}

// projectPath checks that path may be a project volume: absolute, clean,
// its directory on the pool's filesystem, not sandboxd's root or under it.
func (b *Backend) projectPath(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("not an absolute, clean path: %w", cowfs.ErrInvalidName)
	}
	if path == b.root || filepath.Dir(path) == b.root || isUnder(path, b.root) {
		return fmt.Errorf("under sandboxd's root %s: %w", b.root, cowfs.ErrInvalidName)
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		return notFound(err)
	}
	on, err := b.OnPool(filepath.Dir(path))
	if err != nil {
		return err
	}
	if !on {
		return fmt.Errorf("%s is not on the pool's filesystem: %w", filepath.Dir(path), cowfs.ErrOutsidePool)
	}
	return nil
}

func isUnder(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

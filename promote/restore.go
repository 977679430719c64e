package promote

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// Restore undoes Apply of changes on the tree at dst, path by path: each
// path the changes touched (a rename's both sides) is made again what it
// is in old, the snapshot of dst taken before Apply (the rollback point),
// or removed if old has none. Every other path of dst is left as it is,
// so that what others wrote to dst since old was taken stays.
//
// A path the changes moved whole (a renamed directory) comes back whole
// from old; a directory that was only changed gets back its own
// metadata, its entries being changes of their own.
func Restore(ctx context.Context, changes []cowfs.Change, old, dst string) (Applied, error) {
	reverse, err := reverseChanges(changes, old)
	if err != nil {
		return Applied{}, err
	}
	return Apply(ctx, reverse, old, dst)
}

// reverseChanges is the change list that makes each path of changes in
// a tree what it is in old.
func reverseChanges(changes []cowfs.Change, old string) ([]cowfs.Change, error) {
	root, err := unix.Open(old, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("undoing changes: opening %s: %w", old, err)
	}
	defer unix.Close(root)
	whole := map[string]bool{} // paths to restore with everything below
	var order []string
	touch := func(p string, tree bool) {
		if _, seen := whole[p]; !seen {
			order = append(order, p)
		}
		whole[p] = whole[p] || tree
	}
	for _, c := range changes {
		if err := checkRel(c.Path); err != nil {
			return nil, fmt.Errorf("undoing changes: %w", err)
		}
		dir := c.Type == cowfs.TypeDir
		switch c.Kind {
		case cowfs.Renamed:
			if err := checkRel(c.NewPath); err != nil {
				return nil, fmt.Errorf("undoing changes: %w", err)
			}
			touch(c.Path, dir)
			touch(c.NewPath, dir)
		default:
			touch(c.Path, false)
		}
	}
	var reverse []cowfs.Change
	for _, p := range order {
		typ, err := typeIn(root, p)
		if err != nil {
			return nil, fmt.Errorf("undoing changes: reading %s in %s: %w", p, old, err)
		}
		switch {
		case typ == cowfs.TypeUnknown:
			if p != "." {
				reverse = append(reverse, cowfs.Change{Kind: cowfs.Deleted, Path: p})
			}
		case whole[p] && typ == cowfs.TypeDir && p != ".":
			// Removed, then put back with its tree (Apply's rename).
			reverse = append(reverse, cowfs.Change{Kind: cowfs.Renamed, Type: cowfs.TypeDir, Path: p, NewPath: p})
		default:
			reverse = append(reverse, cowfs.Change{Kind: cowfs.Modified, Type: typ, Path: p})
		}
	}
	slices.SortStableFunc(reverse, func(a, b cowfs.Change) int { return depth(a.Path) - depth(b.Path) })
	return reverse, nil
}

// typeIn is p's type below root (TypeUnknown: not there, or not reached
// without a symlink: then nothing of old is put there either).
func typeIn(root int, p string) (cowfs.FileType, error) {
	dir, err := openDir(root, path.Dir(p), unix.O_PATH)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, ErrUnsafePath) {
		return cowfs.TypeUnknown, nil
	}
	if err != nil {
		return cowfs.TypeUnknown, err
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstatat(dir, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return cowfs.TypeUnknown, nil
	} else if err != nil {
		return cowfs.TypeUnknown, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return cowfs.TypeDir, nil
	case unix.S_IFLNK:
		return cowfs.TypeSymlink, nil
	case unix.S_IFIFO:
		return cowfs.TypeFIFO, nil
	case unix.S_IFSOCK:
		return cowfs.TypeSocket, nil
	case unix.S_IFCHR, unix.S_IFBLK:
		return cowfs.TypeDevice, nil
	}
	return cowfs.TypeFile, nil
}

package promote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// Restored says what Restore did, and what it left.
type Restored struct {
	Applied
	// Kept lists the paths the promotion had written that Restore left
	// in place because others made entries in them since (a directory
	// the promotion added, or one it moved, that now holds their files),
	// or put something of another kind where the promotion wrote.
	Kept []string
}

// Restore undoes Apply of changes (from the promotion's source src) on
// the tree at dst, path by path, from old: the snapshot of dst taken
// before Apply (the rollback point). Every other path of dst is left as
// it is, so that what others wrote to dst since old was taken stays:
//
//   - a path old does not have (the promotion added it, or it is the new
//     side of a rename) loses only the entries the promotion wrote there:
//     the tree at that path in src, walked and removed name by name; a
//     directory that still holds other entries afterwards stays, and is
//     listed in Restored.Kept;
//   - a directory the promotion moved away is put back from old with its
//     tree, into a new directory;
//   - any other path is made again what it is in old (a file replaced by
//     a copy, a directory's own metadata set in place).
func Restore(ctx context.Context, changes []cowfs.Change, src, old, dst string) (Restored, error) {
	var r Restored
	p, err := reverse(changes, src, old)
	if err != nil {
		return r, err
	}
	ap, done, err := newApplier(old, dst, src, ApplyOptions{Expected: old}, &r.Applied)
	if err != nil {
		return r, fmt.Errorf("undoing changes: %w", err)
	}
	defer done()
	ap.keepDirs = true
	err = ap.run(ctx, p, dst, false)
	slices.Sort(ap.kept)
	r.Kept = slices.Compact(ap.kept)
	return r, err
}

// reverse is the plan that makes each path of changes in a tree what it
// is in old, taking out what the promotion wrote from src.
func reverse(changes []cowfs.Change, src, old string) (steps, error) {
	var p steps
	oldFD, err := unix.Open(old, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return p, fmt.Errorf("undoing changes: opening %s: %w", old, err)
	}
	defer unix.Close(oldFD)
	srcFD, err := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return p, fmt.Errorf("undoing changes: opening %s: %w", src, err)
	}
	defer unix.Close(srcFD)
	whole := map[string]bool{} // directories the changes moved away whole
	var order []string
	touch := func(p string, tree bool) {
		if _, seen := whole[p]; !seen {
			order = append(order, p)
		}
		whole[p] = whole[p] || tree
	}
	for _, c := range changes {
		if err := checkRel(c.Path); err != nil {
			return p, fmt.Errorf("undoing changes: %w", err)
		}
		switch c.Kind {
		case cowfs.Renamed:
			if err := checkRel(c.NewPath); err != nil {
				return p, fmt.Errorf("undoing changes: %w", err)
			}
			touch(c.Path, c.Type == cowfs.TypeDir)
			touch(c.NewPath, false)
		default:
			touch(c.Path, false)
		}
	}
	metaSeen := map[string]bool{}
	for _, path := range order {
		typ, err := typeIn(oldFD, path)
		if err != nil {
			return p, fmt.Errorf("undoing changes: reading %s in %s: %w", path, old, err)
		}
		srcTyp, err := typeIn(srcFD, path)
		if err != nil {
			return p, fmt.Errorf("undoing changes: reading %s in %s: %w", path, src, err)
		}
		// What the promotion wrote at path goes first, entry by entry,
		// unless old has the same directory there (then its entries are
		// changes of their own).
		if path != "." && srcTyp != cowfs.TypeUnknown && !(srcTyp == cowfs.TypeDir && typ == cowfs.TypeDir && !whole[path]) {
			p.unput = append(p.unput, path)
		}
		switch {
		case typ == cowfs.TypeUnknown:
		case typ == cowfs.TypeDir:
			p.put = append(p.put, putStep{path: path, tree: whole[path] && path != "."})
			if !metaSeen[path] {
				metaSeen[path] = true
				p.meta = append(p.meta, path)
			}
		default:
			p.put = append(p.put, putStep{path: path})
		}
	}
	slices.SortStableFunc(p.unput, func(a, b string) int { return depth(b) - depth(a) })
	slices.SortStableFunc(p.put, func(a, b putStep) int { return depth(a.path) - depth(b.path) })
	slices.SortStableFunc(p.meta, func(a, b string) int { return depth(b) - depth(a) })
	return p, nil
}

// removeOwn takes out of dst what the promotion wrote at p: the entries
// of the promotion's source there, name by name.
func (ap *applier) removeOwn(p string) error {
	ownDir, err := openDir(ap.own, path.Dir(p), unix.O_PATH)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, ErrUnsafePath) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("in the promotion's source: %w", err)
	}
	defer unix.Close(ownDir)
	dir, err := openDir(ap.dst, path.Dir(p), unix.O_RDONLY)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	return ap.removeOwnAt(ownDir, dir, p)
}

// removeOwnAt removes p (named so in ownDir and dir) as the promotion's
// source has it: a file by its name, a directory by its entries and then
// itself if nothing else is left in it.
func (ap *applier) removeOwnAt(ownDir, dir int, p string) error {
	name := path.Base(p)
	var own, cur unix.Stat_t
	if err := unix.Fstatat(ownDir, name, &own, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s in the promotion's source: %w", p, err)
	}
	if err := unix.Fstatat(dir, name, &cur, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	ownIsDir, curIsDir := own.Mode&unix.S_IFMT == unix.S_IFDIR, cur.Mode&unix.S_IFMT == unix.S_IFDIR
	switch {
	case !ownIsDir && curIsDir, ownIsDir && !curIsDir:
		// Someone put an entry of another kind there since: theirs.
		ap.kept = append(ap.kept, p)
		return nil
	case !ownIsDir:
		if err := unix.Unlinkat(dir, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("removing %s: %w", p, err)
		}
		ap.a.Removed++
		return nil
	}
	ownSub, err := unix.Openat(ownDir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s in the promotion's source: %w", p, err)
	}
	ownF := os.NewFile(uintptr(ownSub), name)
	defer ownF.Close()
	sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENOENT) {
		ap.kept = append(ap.kept, p) // swapped meanwhile: not the promotion's
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", p, err)
	}
	defer unix.Close(sub)
	names, err := ownF.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("reading %s in the promotion's source: %w", p, err)
	}
	for _, n := range names {
		if err := ap.removeOwnAt(ownSub, sub, p+"/"+n); err != nil {
			return err
		}
	}
	err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
	switch {
	case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST):
		ap.kept = append(ap.kept, p) // others' entries inside
		return nil
	case err != nil && !errors.Is(err, unix.ENOENT):
		return fmt.Errorf("removing the directory %s: %w", p, err)
	}
	ap.a.Removed++
	return nil
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

// ChangedByOthers lists the paths at which dst differs from old (the
// rollback point, taken before Apply of changes from src) that are not
// the promotion's own: none means no one else changed dst since old was
// taken, so that putting all of dst back to old loses nothing of theirs.
// The promotion's own paths are those of changes (both sides of a
// rename), what a renamed directory holds in src or old, and, for a
// directory's own times, the directories above them. It reads both trees
// whole (cowfs.WalkChanges: snapshots keep inode numbers), and is meant
// for the rare path where Restore failed.
func ChangedByOthers(ctx context.Context, changes []cowfs.Change, src, old, dst string) ([]string, error) {
	diff, err := cowfs.WalkChanges(ctx, old, dst)
	if err != nil {
		return nil, fmt.Errorf("comparing %s with the rollback point %s: %w", dst, old, err)
	}
	own, above := map[string]bool{}, map[string]bool{".": true}
	var movedTo, movedFrom []string
	for _, c := range changes {
		paths := []string{c.Path}
		if c.Kind == cowfs.Renamed {
			paths = append(paths, c.NewPath)
			if c.Type == cowfs.TypeDir {
				movedFrom, movedTo = append(movedFrom, c.Path), append(movedTo, c.NewPath)
			}
		}
		for _, p := range paths {
			own[p] = true
			for d := path.Dir(p); d != "."; d = path.Dir(d) {
				above[d] = true
			}
		}
	}
	srcFD, err := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", src, err)
	}
	defer unix.Close(srcFD)
	oldFD, err := unix.Open(old, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", old, err)
	}
	defer unix.Close(oldFD)
	ours := func(p string, c cowfs.Change) bool {
		if own[p] || above[p] && c.Type == cowfs.TypeDir && (c.Kind == cowfs.Modified || c.Kind == cowfs.Metadata) {
			return true
		}
		for _, roots := range []struct {
			dirs []string
			fd   int
		}{{movedTo, srcFD}, {movedFrom, oldFD}} {
			for _, d := range roots.dirs {
				if under(p, d) {
					if t, err := typeIn(roots.fd, p); err == nil && t != cowfs.TypeUnknown {
						return true
					}
				}
			}
		}
		return false
	}
	var others []string
	for _, c := range diff {
		for _, p := range []string{c.Path, c.NewPath} {
			if p != "" && !ours(p, c) && !slices.Contains(others, p) {
				others = append(others, p)
			}
		}
	}
	slices.Sort(others)
	return others, nil
}

// under says whether p is below directory d.
func under(p, d string) bool {
	return len(p) > len(d) && p[:len(d)] == d && p[len(d)] == '/'
}

// ChangePaths names the paths of changes for a message, the first max
// of them and how many more.
func ChangePaths(changes []cowfs.Change, max int) string {
	var paths []string
	for _, c := range changes {
		if c.Kind == cowfs.Renamed {
			paths = append(paths, c.Path+" -> "+c.NewPath)
		} else {
			paths = append(paths, c.Path)
		}
	}
	if len(paths) > max {
		return fmt.Sprintf("%s and %d more", strings.Join(paths[:max], ", "), len(paths)-max)
	}
	return strings.Join(paths, ", ")
}

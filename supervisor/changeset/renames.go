package changeset

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/ignore"
	"github.com/sandboxd/sandboxd/internal/subtree"
)

// A promotion applies the rename of a directory by copying the whole tree
// below its new name from the sandbox (promote's plan): what the ignore
// rules leave out in that tree (a __pycache__ of bytecode, a .env) went
// with it, though no change list named it, so no diff showed it and no
// rule kept it in the sandbox; and a rename with one name left out moved
// a file into an ignored path, or removed one from it, on the host.
// openRenames turns such renames into what they do, listed path by path,
// for leaveOut to filter as any other.

// renamedEntry is a path below a renamed directory, in the sandbox.
type renamedEntry struct {
	path string
	typ  cowfs.FileType
}

// openRenames replaces each kept rename of a directory whose tree in the
// snapshot at now holds a path rules leave out by the removal of its old
// name and its new name added with every path below it. The other
// changes below the new name are dropped (the adds carry them); a rename
// into it from elsewhere keeps only its removal. A rename with one name
// left out keeps the other's half: the removal of a kept old name (what
// it moved into an ignored path, bytecode into __pycache__, stays in the
// sandbox), or the new name added (a file of the host's that the rules
// leave out is not removed). Other renames stay as they are.
func openRenames(ctx context.Context, rules *ignore.Project, now string, changes []cowfs.Change) ([]cowfs.Change, error) {
	if rules == nil || rules.Empty() {
		return changes, nil
	}
	trees := map[string][]renamedEntry{} // by new name: the renames opened
	from := map[string]string{}          // their old names
	keepOld := map[string]bool{}         // opened renames whose old name is left out
	half := map[int]cowfs.ChangeKind{}   // renames reduced to one half: Deleted or Added
	var root = -1
	defer func() {
		if root >= 0 {
			unix.Close(root)
		}
	}()
	for i, c := range changes {
		if c.Kind != cowfs.Renamed {
			continue
		}
		dir := c.Type == cowfs.TypeDir
		oldOut, newOut := rules.Match(c.Path, dir), rules.Match(c.NewPath, dir)
		switch {
		case oldOut && newOut:
			continue // leaveOut leaves it out
		case newOut:
			half[i] = cowfs.Deleted
			continue
		case oldOut && !dir:
			half[i] = cowfs.Added
			continue
		case !dir:
			continue
		}
		if root < 0 {
			var err error
			if root, err = unix.Open(now, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
				return nil, fmt.Errorf("opening the sandbox's snapshot %s: %w", now, err)
			}
		}
		entries, err := renamedTree(ctx, root, c.NewPath)
		if err != nil {
			return nil, fmt.Errorf("listing %s, renamed from %s: %w", c.NewPath, c.Path, err)
		}
		if oldOut || slices.ContainsFunc(entries, func(e renamedEntry) bool { return rules.Match(e.path, e.typ == cowfs.TypeDir) }) {
			trees[c.NewPath], from[c.NewPath], keepOld[c.NewPath] = entries, c.Path, oldOut
		}
	}
	if len(trees) == 0 && len(half) == 0 {
		return changes, nil
	}
	out := make([]cowfs.Change, 0, len(changes))
	for i, c := range changes {
		switch half[i] {
		case cowfs.Deleted:
			out = append(out, cowfs.Change{Kind: cowfs.Deleted, Type: c.Type, Path: c.Path})
			continue
		case cowfs.Added:
			c = cowfs.Change{Kind: cowfs.Added, Type: c.Type, Path: c.NewPath}
		}
		newSide := c.Path
		if c.Kind == cowfs.Renamed {
			newSide = c.NewPath
		}
		if top, ok := below(newSide, trees); ok && c.Kind != cowfs.Deleted {
			// Carried by the adds of an opened tree; a rename into it
			// from outside its old name still removes its old path.
			if c.Kind == cowfs.Renamed && !subtree.Within(c.Path, from[top]) {
				out = append(out, cowfs.Change{Kind: cowfs.Deleted, Type: c.Type, Path: c.Path})
			}
			continue
		}
		entries, opened := trees[newSide]
		if !opened || c.Kind != cowfs.Renamed {
			out = append(out, c)
			continue
		}
		if !keepOld[newSide] {
			out = append(out, cowfs.Change{Kind: cowfs.Deleted, Type: cowfs.TypeDir, Path: c.Path})
		}
		out = append(out, cowfs.Change{Kind: cowfs.Added, Type: cowfs.TypeDir, Path: c.NewPath})
		for _, e := range entries {
			out = append(out, cowfs.Change{Kind: cowfs.Added, Type: e.typ, Path: e.path})
		}
	}
	return out, nil
}

// below says whether p is strictly below one of the names in trees, and
// which (the highest).
func below(p string, trees map[string][]renamedEntry) (string, bool) {
	top, found := "", false
	for dir := p; ; {
		i := strings.LastIndexByte(dir, '/')
		if i < 0 {
			return top, found
		}
		dir = dir[:i]
		if _, ok := trees[dir]; ok {
			top, found = dir, true
		}
	}
}

// renamedTree lists every path below directory dir in the tree at root,
// dir resolved beneath root through no symlink, none followed below.
func renamedTree(ctx context.Context, root int, dir string) ([]renamedEntry, error) {
	fd, err := unix.Openat2(root, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, err
	}
	return listTree(ctx, fd, dir, nil)
}

// listTree adds every entry below the directory fd holds (shown as dir)
// to out, and closes fd.
func listTree(ctx context.Context, fd int, dir string, out []renamedEntry) ([]renamedEntry, error) {
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return out, err
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return out, fmt.Errorf("%s/%s: %w", dir, n, err)
		}
		e := renamedEntry{path: dir + "/" + n, typ: cowfs.TypeOfMode(st.Mode)}
		out = append(out, e)
		if e.typ != cowfs.TypeDir {
			continue
		}
		sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return out, fmt.Errorf("%s: %w", e.path, err)
		}
		if out, err = listTree(ctx, sub, e.path, out); err != nil {
			return out, err
		}
	}
	return out, nil
}

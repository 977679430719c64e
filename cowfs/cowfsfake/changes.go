package cowfsfake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/sandboxd/sandboxd/cowfs"
)

// Changes walks both trees. A file is known in both by the identity the
// fake gave it (copied along by each snapshot), as a copy-on-write
// snapshot keeps an inode: a path whose identity moved is a rename.
func (b *Backend) Changes(ctx context.Context, from, to cowfs.Volume) ([]cowfs.Change, error) {
	if err := b.enter(ctx, "Changes", from.Name); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	changes, err := b.changes(ctx, from, to)
	if err != nil {
		return nil, fmt.Errorf("listing changes from %s to %s: %w", from.Name, to.Name, err)
	}
	return changes, nil
}

// ChangedSince compares the trees too: whether anything of v differs
// from since, which must be a read-only snapshot.
func (b *Backend) ChangedSince(ctx context.Context, v, since cowfs.Volume) (bool, error) {
	if err := b.enter(ctx, "ChangedSince", v.Name); err != nil {
		return false, err
	}
	defer b.mu.Unlock()
	changes, err := b.changes(ctx, since, v)
	if err != nil {
		return false, fmt.Errorf("telling whether %s changed since %s: %w", v.Name, since.Name, err)
	}
	return len(changes) > 0, nil
}

func (b *Backend) changes(ctx context.Context, from, to cowfs.Volume) ([]cowfs.Change, error) {
	fromRec, fromPath, err := b.find(from)
	if err != nil {
		return nil, err
	}
	if fromRec.Kind != cowfs.KindReadOnly {
		return nil, fmt.Errorf("%s is not a read-only snapshot: %w", from.Name, cowfs.ErrReadOnly)
	}
	toRec, toPath, err := b.find(to)
	if err != nil {
		return nil, err
	}
	fromTree, err := readTree(ctx, fromPath)
	if err != nil {
		return nil, err
	}
	toTree, err := readTree(ctx, toPath)
	if err != nil {
		return nil, err
	}
	b.identify(fromRec, fromTree, false)
	b.identify(toRec, toTree, false)
	return diff(fromPath, toPath, fromTree, toTree)
}

// diff lists what differs from the tree at fromDir to the one at toDir,
// as cowfs.WalkChanges does with inode numbers, but by identity (0: a
// file made since, known to no other tree).
func diff(fromDir, toDir string, from, to map[string]*entry) ([]cowfs.Change, error) {
	fromByID := map[uint64]string{}
	for path, e := range from {
		if e.id != 0 {
			fromByID[e.id] = path
		}
	}
	var changes []cowfs.Change
	renamedFrom := map[string]bool{}
	for path, t := range to {
		f, existed := from[path]
		if existed && t.id != 0 && f.id == t.id && f.typ == t.typ {
			kind, err := compare(f, t, filepath.Join(fromDir, path), filepath.Join(toDir, path))
			if err != nil {
				return nil, err
			}
			if kind != "" {
				changes = append(changes, cowfs.Change{Path: path, Kind: kind, Type: t.typ})
			}
			continue
		}
		if old, moved := fromByID[t.id]; t.id != 0 && moved && old != path && from[old].typ == t.typ {
			if still := to[old]; still == nil || still.id != t.id {
				changes = append(changes, cowfs.Change{Path: old, NewPath: path, Kind: cowfs.Renamed, Type: t.typ})
				renamedFrom[old] = true
				kind, err := compare(from[old], t, filepath.Join(fromDir, old), filepath.Join(toDir, path))
				if err != nil {
					return nil, err
				}
				if kind == cowfs.Modified {
					changes = append(changes, cowfs.Change{Path: path, Kind: cowfs.Modified, Type: t.typ})
				}
				if existed {
					changes = append(changes, cowfs.Change{Path: path, Kind: cowfs.Deleted, Type: f.typ})
				}
				continue
			}
		}
		if existed {
			// Replaced by another file at the same path.
			changes = append(changes, cowfs.Change{Path: path, Kind: cowfs.Modified, Type: t.typ})
		} else {
			changes = append(changes, cowfs.Change{Path: path, Kind: cowfs.Added, Type: t.typ})
		}
	}
	for path, f := range from {
		if _, ok := to[path]; !ok && !renamedFrom[path] {
			changes = append(changes, cowfs.Change{Path: path, Kind: cowfs.Deleted, Type: f.typ})
		}
	}
	sort.Slice(changes, func(i, j int) bool {
		if changes[i].Path != changes[j].Path {
			return changes[i].Path < changes[j].Path
		}
		return changes[i].Kind < changes[j].Kind
	})
	return changes, nil
}

// compare says how one file's two states differ ("" when they do not).
// A directory's times move whenever an entry in it changes, so only its
// mode and owner count; a file's content counts, read when its size and
// time say nothing (a copy cannot keep a change time to tell by).
func compare(f, t *entry, fromPath, toPath string) (cowfs.ChangeKind, error) {
	meta := f.mode != t.mode || f.uid != t.uid || f.gid != t.gid
	switch {
	case f.typ == cowfs.TypeDir:
		if meta {
			return cowfs.Metadata, nil
		}
		return "", nil
	case f.size != t.size || f.mtime != t.mtime:
		return cowfs.Modified, nil
	}
	same, err := sameContent(f, fromPath, toPath)
	if err != nil {
		return "", err
	}
	switch {
	case !same:
		return cowfs.Modified, nil
	case meta:
		return cowfs.Metadata, nil
	}
	return "", nil
}

func sameContent(e *entry, a, b string) (bool, error) {
	switch e.typ {
	case cowfs.TypeSymlink:
		ta, err := os.Readlink(a)
		if err != nil {
			return false, err
		}
		tb, err := os.Readlink(b)
		return ta == tb, err
	case cowfs.TypeFile:
	default:
		return true, nil
	}
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, errA := io.ReadFull(fa, bufA)
		nb, errB := io.ReadFull(fb, bufB)
		if !bytes.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		if errA == io.EOF || errA == io.ErrUnexpectedEOF {
			return errB == io.EOF || errB == io.ErrUnexpectedEOF, nil
		}
		if errA != nil {
			return false, errA
		}
		if errB != nil {
			return false, errB
		}
	}
}

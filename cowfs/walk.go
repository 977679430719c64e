package cowfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// entry is what WalkChanges compares of one path.
type entry struct {
	ino        uint64
	typ        FileType
	mode       fs.FileMode
	uid, gid   uint32
	size       int64
	mtim, ctim syscall.Timespec
}

// WalkChanges lists what differs from the tree at fromDir to the tree at
// toDir by reading both, for backends that cannot ask the filesystem
// (zfs-fuse has no `zfs diff`). It relies on what copy-on-write snapshots
// and clones keep: an untouched entry has the same inode number and times
// in both trees, so a path whose inode moved is a rename, and times tell
// content changes (mtime) from metadata changes (ctime alone). Its cost
// grows with the size of the trees, not of the change.
func WalkChanges(ctx context.Context, fromDir, toDir string) ([]Change, error) {
	// The two reads are independent and bound by the filesystem's latency
	// (on FUSE, a round trip per entry): run them at once.
	var from map[string]entry
	var fromErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		from, fromErr = readTree(ctx, fromDir)
	}()
	to, err := readTree(ctx, toDir)
	<-done
	if err := errors.Join(fromErr, err); err != nil {
		return nil, err
	}
	// Where each inode of the old tree went, for renames. Hard links share
	// an inode: they are not tracked as renames.
	fromByIno := map[uint64]string{}
	for path, e := range from {
		fromByIno[e.ino] = path
	}
	toInos := map[uint64]bool{}
	for _, e := range to {
		toInos[e.ino] = true
	}
	var changes []Change
	renamedFrom := map[string]bool{}
	for path, t := range to {
		f, existed := from[path]
		switch {
		case existed && f.ino == t.ino && f.typ == t.typ:
			if kind, changed := compareEntry(f, t); changed {
				changes = append(changes, Change{Path: path, Kind: kind, Type: t.typ})
			}
		default:
			old, moved := fromByIno[t.ino]
			if moved && old != path && from[old].typ == t.typ {
				if _, stillThere := to[old]; !stillThere || to[old].ino != t.ino {
					changes = append(changes, Change{Path: old, NewPath: path, Kind: Renamed, Type: t.typ})
					renamedFrom[old] = true
					if kind, changed := compareEntry(from[old], t); changed && kind == Modified {
						changes = append(changes, Change{Path: path, Kind: Modified, Type: t.typ})
					}
					if existed {
						changes = append(changes, Change{Path: path, Kind: Deleted, Type: f.typ})
					}
					continue
				}
			}
			if existed {
				// Replaced by another inode at the same path.
				changes = append(changes, Change{Path: path, Kind: Modified, Type: t.typ})
			} else {
				changes = append(changes, Change{Path: path, Kind: Added, Type: t.typ})
			}
		}
	}
	for path, f := range from {
		if _, ok := to[path]; !ok && !renamedFrom[path] {
			changes = append(changes, Change{Path: path, Kind: Deleted, Type: f.typ})
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

// compareEntry compares one inode's two states. Directories' times move
// whenever an entry in them changes, so only their mode and owner count.
func compareEntry(f, t entry) (ChangeKind, bool) {
	meta := f.mode != t.mode || f.uid != t.uid || f.gid != t.gid
	if f.typ == TypeDir {
		return Metadata, meta
	}
	if f.size != t.size || f.mtim != t.mtim {
		return Modified, true
	}
	if meta || f.ctim != t.ctim {
		return Metadata, true
	}
	return "", false
}

func readTree(ctx context.Context, root string) (map[string]entry, error) {
	tree := map[string]entry{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if path == root {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		tree[filepath.ToSlash(rel)] = entry{
			ino: st.Ino, typ: TypeOfMode(st.Mode), mode: fs.FileMode(st.Mode & 0o7777),
			uid: st.Uid, gid: st.Gid, size: st.Size, mtim: st.Mtim, ctim: st.Ctim,
		}
		return nil
	})
	if err != nil {
		return nil, &os.PathError{Op: "reading tree", Path: root, Err: err}
	}
	return tree, nil
}

// TypeOfMode returns the FileType of a stat mode (its S_IFMT bits).
func TypeOfMode(mode uint32) FileType {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return TypeFile
	case syscall.S_IFDIR:
		return TypeDir
	case syscall.S_IFLNK:
		return TypeSymlink
	case syscall.S_IFIFO:
		return TypeFIFO
	case syscall.S_IFSOCK:
		return TypeSocket
	case syscall.S_IFCHR, syscall.S_IFBLK:
		return TypeDevice
	}
	return TypeUnknown
}

// TypeOf returns the FileType of a file mode.
func TypeOf(mode fs.FileMode) FileType {
	switch {
	case mode.IsRegular():
		return TypeFile
	case mode.IsDir():
		return TypeDir
	case mode&fs.ModeSymlink != 0:
		return TypeSymlink
	case mode&fs.ModeNamedPipe != 0:
		return TypeFIFO
	case mode&fs.ModeSocket != 0:
		return TypeSocket
	case mode&fs.ModeDevice != 0:
		return TypeDevice
	}
	return TypeUnknown
}

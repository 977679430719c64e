package cowfsfake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// entry is one path of a tree, as the fake compares and copies it.
type entry struct {
	key          string // inode and birth time: the file, whatever its name
	id           uint64 // the identity the volume's bookkeeping gives key (0: none)
	typ          cowfs.FileType
	mode         uint32 // permission bits, set-id and sticky included
	uid, gid     uint32
	size         int64
	atime, mtime unix.Timespec
	rdev         uint64
}

// readTree reads every entry below root (root itself left out), by its
// path relative to root.
func readTree(ctx context.Context, root string) (map[string]*entry, error) {
	tree := map[string]*entry{}
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
		e, err := stat(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		tree[filepath.ToSlash(rel)] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading tree %s: %w", root, notFound(err))
	}
	return tree, nil
}

func stat(path string) (*entry, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &st); err != nil {
		return nil, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	// Inode numbers are used again once freed: the birth time tells a
	// new file that got an old one's number from it.
	key := strconv.FormatUint(st.Ino, 10)
	if st.Mask&unix.STATX_BTIME != 0 {
		key += "." + strconv.FormatInt(st.Btime.Sec, 10) + "." + strconv.FormatUint(uint64(st.Btime.Nsec), 10)
	}
	return &entry{
		key:   key,
		typ:   cowfs.TypeOfMode(uint32(st.Mode)),
		mode:  uint32(st.Mode) & 0o7777,
		uid:   st.Uid,
		gid:   st.Gid,
		size:  int64(st.Size),
		atime: unix.Timespec{Sec: st.Atime.Sec, Nsec: int64(st.Atime.Nsec)},
		mtime: unix.Timespec{Sec: st.Mtime.Sec, Nsec: int64(st.Mtime.Nsec)},
		rdev:  unix.Mkdev(st.Rdev_major, st.Rdev_minor),
	}, nil
}

// identify gives tree's entries their identities from rec. With assign,
// an entry without one gets a new one (marked as written since the
// volume was made: Size -1), and rec keeps the identities of tree's
// files only (a file gone takes its own along).
func (b *Backend) identify(rec *record, tree map[string]*entry, assign bool) {
	files := map[string]fileID{}
	for _, p := range slices.Sorted(maps.Keys(tree)) {
		e := tree[p]
		f, ok := rec.Files[e.key]
		if !ok && assign {
			f = fileID{ID: b.state.NextID, Size: -1}
			b.state.NextID++
		}
		if ok || assign {
			e.id = f.ID
			files[e.key] = f
		}
	}
	if assign {
		rec.Files = files
	}
}

// fresh gives each file of tree, a volume just made, a new identity.
func (b *Backend) fresh(rec *record, tree map[string]*entry) {
	rec.Files = make(map[string]fileID, len(tree))
	for _, p := range slices.Sorted(maps.Keys(tree)) {
		e := tree[p]
		if _, ok := rec.Files[e.key]; !ok { // a hard link's other name
			rec.Files[e.key] = fileID{ID: b.state.NextID, Size: e.size, Mtime: e.mtime.Nano()}
			b.state.NextID++
		}
		e.id = rec.Files[e.key].ID
	}
}

// recordCopy makes the bookkeeping of a tree just copied from src: each file
// keeps its source's identity.
func recordCopy(rec *record, src, dst map[string]*entry) {
	rec.Files = make(map[string]fileID, len(dst))
	for p, e := range dst {
		if s := src[p]; s != nil {
			e.id = s.id
			rec.Files[e.key] = fileID{ID: s.id, Size: e.size, Mtime: e.mtime.Nano()}
		}
	}
}

// copyTree copies the tree at src (whose entries are tree) into the new
// directory dst, keeping types, modes, owners where the process may set
// them, hard links and times, and returns the copy's entries. dst's own
// mode is left to the caller.
func copyTree(ctx context.Context, src, dst string, tree map[string]*entry) (map[string]*entry, error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return nil, err
	}
	paths := slices.Sorted(maps.Keys(tree)) // a directory before what it holds
	linked := map[string]string{}           // a file's key: where its first name was copied
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e, from, to := tree[p], filepath.Join(src, p), filepath.Join(dst, p)
		if e.typ == cowfs.TypeFile {
			if first, ok := linked[e.key]; ok {
				if err := os.Link(first, to); err != nil {
					return nil, err
				}
				continue
			}
			linked[e.key] = to
		}
		if err := copyEntry(e, from, to); err != nil {
			return nil, err
		}
		if e.typ != cowfs.TypeDir {
			if err := setMeta(e, to); err != nil {
				return nil, err
			}
		}
	}
	// Directories last, deepest first: filling them moved their times,
	// and a read-only one could not have been filled.
	for _, p := range slices.Backward(paths) {
		if e := tree[p]; e.typ == cowfs.TypeDir {
			if err := setMeta(e, filepath.Join(dst, p)); err != nil {
				return nil, err
			}
		}
	}
	return readTree(ctx, dst)
}

// copyEntry makes at to an entry of e's type with from's content.
func copyEntry(e *entry, from, to string) error {
	switch e.typ {
	case cowfs.TypeDir:
		return os.Mkdir(to, 0o700)
	case cowfs.TypeFile:
		in, err := os.OpenFile(from, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	case cowfs.TypeSymlink:
		target, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(target, to)
	case cowfs.TypeFIFO:
		return unix.Mkfifo(to, 0o600)
	case cowfs.TypeSocket:
		return unix.Mknod(to, unix.S_IFSOCK|0o600, 0)
	case cowfs.TypeDevice:
		var st unix.Stat_t
		if err := unix.Lstat(from, &st); err != nil {
			return err
		}
		// Only root may: a device node copied by another user fails here.
		return unix.Mknod(to, st.Mode&unix.S_IFMT|0o600, int(e.rdev))
	}
	return fmt.Errorf("copying %s: an entry of unknown type", from)
}

// setMeta gives the entry at path e's owner (where the process may: root),
// mode and times. The owner goes first, as changing it clears set-id bits.
func setMeta(e *entry, path string) error {
	if os.Geteuid() == 0 {
		if err := os.Lchown(path, int(e.uid), int(e.gid)); err != nil {
			return err
		}
	}
	if e.typ != cowfs.TypeSymlink {
		if err := unix.Fchmodat(unix.AT_FDCWD, path, e.mode, 0); err != nil {
			return &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{e.atime, e.mtime}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimes", Path: path, Err: err}
	}
	return nil
}

// removeTree removes path and what it holds, making its directories
// writable first: a read-only volume's, or one a test made 0555, would
// stop a user other than root.
func removeTree(ctx context.Context, path string) error {
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o700)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return os.RemoveAll(path)
}

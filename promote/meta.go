package promote

import (
	"errors"
	"fmt"
	"path"
	"unsafe"

	"golang.org/x/sys/unix"
)

// madeDirMode is the mode Apply makes a directory with; its own mode is
// set once its entries are written.
const madeDirMode = 0o700

// meta sets p's owner, mode and times in dst to src's. A file, link or
// special file is not changed in place: the source's entry is written
// beside it and renamed over it (replace), so that an inode someone else
// swapped in at p never gets the daemon's owner or a set-id mode. A
// directory, which cannot be replaced so, gets its metadata in place
// only if it is the one the promotion expects (openExpectedDir). Either
// way, a target entry of another kind than the source's is refused
// (ErrKindChanged).
func (ap *applier) meta(p string) error {
	srcDir, dstDir, err := ap.parents(p)
	if err != nil {
		return err
	}
	defer unix.Close(srcDir)
	defer unix.Close(dstDir)
	name := path.Base(p)
	var st, cur unix.Stat_t
	if err := unix.Fstatat(srcDir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("in the source: %w", err)
	}
	if err := ap.allowed(&st); err != nil {
		return err
	}
	if err := unix.Fstatat(dstDir, name, &cur, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("reading it in the target: %w", err)
	}
	if err := sameKind(&cur, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := ap.replace(srcDir, dstDir, name, &st); err != nil {
			return err
		}
		ap.a.Meta++
		return nil
	}
	fd, err := ap.openExpectedDir(dstDir, p)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := setMeta(fd, &st); err != nil {
		return err
	}
	ap.a.Meta++
	return nil
}

// sameKind refuses a target entry cur of another kind than the source's st.
func sameKind(cur, st *unix.Stat_t) error {
	if cur.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		return fmt.Errorf("it is a %s in the target and a %s in the source, so its metadata is not set: %w",
			kindName(cur.Mode), kindName(st.Mode), ErrKindChanged)
	}
	return nil
}

// openMade opens name in dir, an entry Apply has just made there (of
// kind, an S_IFMT value), without following a link, and checks that it
// is still that: of that kind and owned by the daemon (only it could
// have made such an entry there; a directory also still has the mode it
// was made with). Anything else was swapped in by someone else, and is
// refused with ErrReplaced.
func (ap *applier) openMade(dir int, name string, kind uint32, flags int) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENOENT) {
		return -1, st, fmt.Errorf("what it made as %s is gone or not a %s any more: %w", name, kindName(kind), ErrReplaced)
	}
	if err != nil {
		return -1, st, fmt.Errorf("opening what it made as %s: %w", name, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	ok := st.Mode&unix.S_IFMT == kind && st.Uid == ap.uid
	if kind == unix.S_IFDIR {
		ok = ok && st.Mode&0o7777 == madeDirMode
	}
	if !ok {
		unix.Close(fd)
		return -1, st, fmt.Errorf("the %s it made as %s was replaced by a %s owned by uid %d, mode %o: %w",
			kindName(kind), name, kindName(st.Mode), st.Uid, st.Mode&0o7777, ErrReplaced)
	}
	return fd, st, nil
}

// openExpectedDir opens directory p (named name in dir) of the target and
// checks it is one the promotion may set metadata on or write into: one
// this Apply made, or the one at p in the expected tree (the rollback
// point: btrfs and ZFS snapshots keep inode numbers). A directory someone
// else made or moved there during the promotion is refused with
// ErrReplaced, naming p.
func (ap *applier) openExpectedDir(dir int, p string) (int, error) {
	fd, err := unix.Openat(dir, path.Base(p), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if p == "." {
		fd, err = unix.Openat(ap.dst, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("opening the directory %s in the target: %w", p, err)
	}
	var cur unix.Stat_t
	if err := unix.Fstat(fd, &cur); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := ap.expectedDir(p, &cur); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// expectedDir says whether cur, the directory at p in the target, is
// one the promotion made (owned by the daemon, or by whom a renamed
// tree's copy gave it to) or expects.
func (ap *applier) expectedDir(p string, cur *unix.Stat_t) error {
	if ino, ok := ap.made[p]; ok {
		owner, given := ap.madeOwner[p]
		if ino == cur.Ino && (cur.Uid == ap.uid || given && cur.Uid == owner) {
			return nil
		}
		return fmt.Errorf("the directory %s is not the one this promotion made (inode %d, now %d owned by uid %d): %w",
			p, ino, cur.Ino, cur.Uid, ErrReplaced)
	}
	if ap.expected < 0 {
		return nil
	}
	var want unix.Stat_t
	err := unix.Fstat(ap.expected, &want)
	if p != "." {
		var dir int
		if dir, err = openDir(ap.expected, path.Dir(p), unix.O_PATH); err == nil {
			err = unix.Fstatat(dir, path.Base(p), &want, unix.AT_SYMLINK_NOFOLLOW)
			unix.Close(dir)
		}
	}
	switch {
	case err == nil && want.Mode&unix.S_IFMT == unix.S_IFDIR && want.Ino == cur.Ino:
		return nil
	case err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, ErrUnsafePath):
		return fmt.Errorf("the directory %s in the target (inode %d, owned by uid %d) is not the one the rollback point has there: someone made or moved it there during the promotion, so nothing is set on it or written into it: %w",
			p, cur.Ino, cur.Uid, ErrReplaced)
	}
	return fmt.Errorf("reading %s in the rollback point: %w", p, err)
}

// setMeta gives the entry fd holds st's owner, mode and times (a
// symlink's mode is not its own). It acts on fd alone, never on a name:
// fd is an O_PATH fd opened without following a link, or a file or
// directory opened so. The mode is set after the owner, since chown
// clears set-id bits.
func setMeta(fd int, st *unix.Stat_t) error {
	if err := unix.Fchownat(fd, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting its owner: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := fchmodFD(fd, st.Mode&0o7777); err != nil {
			return fmt.Errorf("setting its mode: %w", err)
		}
	}
	times := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(fd, "", times, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting its times: %w", err)
	}
	return nil
}

// sysFchmodat2 is fchmodat2(2) (Linux 6.6), the one chmod that takes
// AT_EMPTY_PATH and AT_SYMLINK_NOFOLLOW; x/sys's Fchmodat refuses flags.
const sysFchmodat2 = 452

// fchmodFD sets the mode of the entry fd holds (not a symlink: the
// caller checked its kind). Before fchmodat2 exists, /proc/self/fd names
// the same inode (a magic link to the fd's own file, which is no
// symlink), so chmod through it acts on that entry too.
func fchmodFD(fd int, mode uint32) error {
	empty, err := unix.BytePtrFromString("")
	if err != nil {
		return err
	}
	_, _, errno := unix.Syscall6(sysFchmodat2, uintptr(fd), uintptr(unsafe.Pointer(empty)), uintptr(mode),
		uintptr(unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW), 0, 0)
	switch errno {
	case 0:
		return nil
	case unix.ENOSYS:
		return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode)
	default:
		return errno
	}
}

// kindName names a file's kind, for errors.
func kindName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "file of unknown kind"
}

// testHook lets a test act between two steps, as a racing host user
// would: step is "created" (a temporary file, link or node made, its
// metadata not yet set) or "mkdir" (a directory made); dir and name say
// where.
var testHook = func(step string, dir int, name string) {}

package adopt

// The copy of an owner's directory, by descriptor: what its owner can
// change while root copies it (swap a directory for a symlink, rename a
// file away, link another's file in) never leads root's read or write
// out of the trees it holds. Every entry is opened beneath its parent's
// descriptor without following a link, and its owner, kind and
// filesystem are read from the descriptor that is copied, not from a
// name; what the copy makes is checked to be the daemon's own inode
// (root-owned, just made) before its owner and mode are set. promote's
// applier writes a change set, not a whole tree with its hard links and
// extended attributes: this is the tree's copy, for adopt and release.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/fsat"
	"github.com/sandboxd/sandboxd/supervisor"
)

// treeCopy copies one tree into another, both held by descriptor.
type treeCopy struct {
	// owner, for a member's own adoption, is the uid every entry must
	// be of: a file of root or another user in it is refused, named, so
	// that the member never gets root's hand over a copy of what it
	// could not own.
	owner *uint32
	// dev and mnt are the source's filesystem and mount: a mount or a
	// nested subvolume inside the tree is refused, not crossed.
	dev uint64
	mnt uint64
	// dstRoot is the target tree, for hard links to an entry copied
	// already (found again beneath it, by its inode).
	dstRoot int
	links   map[[2]uint64]madeLink
	// top is how errors name the source's top (its path).
	top string
	// depth is how many directories below the top the copy is.
	depth int
	// listed is the crash (and pause) point hit once the top's entries
	// are listed, before any is copied; "" for none.
	listed string
}

// madeLink is the first copy of a hard-linked inode.
type madeLink struct {
	rel string
	ino uint64
}

// errForeign: a member's tree holds an entry of another owner.
var errForeign = errors.New("not the caller's")

// copyBeneath copies what directory src holds into directory dst (both
// descriptors; dst empty), keeping owners, modes, times, hard links,
// extended attributes (ACLs among them) and special files. With owner,
// every entry must be that uid's. src's own metadata is set on dst.
func copyBeneath(ctx context.Context, src, dst int, top string, owner *uint32, listed string) error {
	c := &treeCopy{owner: owner, dstRoot: dst, links: map[[2]uint64]madeLink{}, top: top, listed: listed}
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return fmt.Errorf("reading %s: %w", top, err)
	}
	mnt, err := mountID(src)
	if err != nil {
		return fmt.Errorf("reading %s: %w", top, err)
	}
	c.dev, c.mnt = st.Dev, mnt
	if err := c.check(&st, top); err != nil {
		return err
	}
	if err := c.dir(ctx, src, dst, ""); err != nil {
		return err
	}
	return c.meta(dst, src, &st, true)
}

// mountID is the id of the mount fd is on.
func mountID(fd int) (uint64, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx); err != nil {
		return 0, err
	}
	return stx.Mnt_id, nil
}

// check refuses an entry of another owner than c's (where c has one).
func (c *treeCopy) check(st *unix.Stat_t, rel string) error {
	if c.owner != nil && st.Uid != *c.owner {
		return fmt.Errorf("%s is owned by uid %d, not by you (uid %d): a directory of yours is adopted only if all of it is yours (chown or move it out first): %w: %w",
			c.name(rel), st.Uid, *c.owner, errForeign, supervisor.ErrInvalidProject)
	}
	return nil
}

// name is the source path of rel, for messages.
func (c *treeCopy) name(rel string) string {
	if rel == "" {
		return c.top
	}
	return strings.TrimSuffix(c.top, "/") + "/" + rel
}

// dir copies the entries of src into dst; rel is src's path below the top.
func (c *treeCopy) dir(ctx context.Context, src, dst int, rel string) error {
	// A descriptor of its own to read: src's offset stays untouched.
	rd, err := unix.Openat(src, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("reading %s: %w", c.name(rel), err)
	}
	f := os.NewFile(uintptr(rd), c.name(rel))
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("reading %s: %w", c.name(rel), err)
	}
	if rel == "" && c.listed != "" {
		crashpoint.Hit(c.listed)
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := n
		if rel != "" {
			r = rel + "/" + n
		}
		if err := c.entry(ctx, src, dst, n, r); err != nil {
			return err
		}
	}
	return nil
}

// entry copies src's entry name into dst.
func (c *treeCopy) entry(ctx context.Context, src, dst int, name, rel string) error {
	var pre unix.Stat_t
	if err := unix.Fstatat(src, name, &pre, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("reading %s: %w", c.name(rel), err)
	}
	// Opened by what it is now; checked by what was opened.
	flags := unix.O_PATH
	switch pre.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		flags = unix.O_RDONLY | unix.O_DIRECTORY
	case unix.S_IFREG:
		flags = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
	}
	fd, err := unix.Openat(src, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w (was it changed during the copy?)", c.name(rel), err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("reading %s: %w", c.name(rel), err)
	}
	kind := st.Mode & unix.S_IFMT
	if kind != pre.Mode&unix.S_IFMT {
		return fmt.Errorf("%s changed from a %s to a %s during the copy; try again once it is left alone: %w",
			c.name(rel), kindWord(pre.Mode), kindWord(st.Mode), supervisor.ErrProjectInUse)
	}
	if err := c.check(&st, rel); err != nil {
		return err
	}
	if kind == unix.S_IFDIR {
		mnt, err := mountID(fd)
		if err != nil {
			return fmt.Errorf("reading %s: %w", c.name(rel), err)
		}
		if st.Dev != c.dev || mnt != c.mnt {
			return fmt.Errorf("%s is a mount point or a volume of its own inside the directory: it is not copied (unmount or move it first): %w", c.name(rel), supervisor.ErrInvalidProject)
		}
		if c.depth >= maxCopyDepth {
			return tooDeep(c.top, rel)
		}
		c.depth++
		defer func() { c.depth-- }()
		if err := unix.Mkdirat(dst, name, 0o700); err != nil {
			return fmt.Errorf("making %s in the copy: %w", rel, err)
		}
		out, err := openMade(dst, name, unix.S_IFDIR, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("%s in the copy: %w", rel, err)
		}
		defer unix.Close(out)
		if err := c.dir(ctx, fd, out, rel); err != nil {
			return err
		}
		return c.meta(out, fd, &st, true)
	}
	key := [2]uint64{st.Dev, st.Ino}
	if st.Nlink > 1 {
		if first, ok := c.links[key]; ok {
			return c.link(first, dst, name, rel)
		}
	}
	out, err := c.make(fd, dst, name, rel, &st)
	if err != nil {
		return err
	}
	defer unix.Close(out)
	if err := c.meta(out, fd, &st, kind == unix.S_IFREG); err != nil {
		return err
	}
	if st.Nlink > 1 {
		var made unix.Stat_t
		if err := unix.Fstat(out, &made); err != nil {
			return err
		}
		c.links[key] = madeLink{rel: rel, ino: made.Ino}
	}
	return nil
}

// make writes the non-directory entry fd (stat st) as dst's name and
// returns a descriptor of the inode made (O_PATH for all but a file).
func (c *treeCopy) make(fd, dst int, name, rel string, st *unix.Stat_t) (int, error) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		out, err := unix.Openat(dst, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return -1, fmt.Errorf("making %s in the copy: %w", rel, err)
		}
		if st.Size > 0 && unix.IoctlFileClone(out, fd) != nil {
			// Another filesystem, or none that shares extents: the
			// data itself (copy_file_range where the kernel can).
			if err := copyData(out, fd); err != nil {
				unix.Close(out)
				return -1, fmt.Errorf("copying %s: %w", c.name(rel), err)
			}
		}
		return out, nil
	case unix.S_IFLNK:
		target, err := fsat.Readlink(fd, "")
		if err != nil {
			return -1, fmt.Errorf("reading link %s: %w", c.name(rel), err)
		}
		if err := unix.Symlinkat(target, dst, name); err != nil {
			return -1, fmt.Errorf("making link %s in the copy: %w", rel, err)
		}
	default: // fifo, socket, device
		if err := unix.Mknodat(dst, name, st.Mode&unix.S_IFMT|0o600, int(st.Rdev)); err != nil {
			return -1, fmt.Errorf("making %s in the copy: %w", rel, err)
		}
	}
	out, err := openMade(dst, name, st.Mode&unix.S_IFMT, unix.O_PATH)
	if err != nil {
		return -1, fmt.Errorf("%s in the copy: %w", rel, err)
	}
	return out, nil
}

// link makes dst's name another link of first, found again beneath the
// copy's top without a link on the way, and checked to be that inode.
func (c *treeCopy) link(first madeLink, dst int, name, rel string) error {
	fd, err := unix.Openat2(c.dstRoot, first.rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return fmt.Errorf("finding %s again in the copy, to link %s to it: %w", first.rel, rel, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Ino != first.ino {
		return fmt.Errorf("%s in the copy is not the file made there (someone replaced it): %w", first.rel, supervisor.ErrProjectInUse)
	}
	if err := unix.Linkat(fd, "", dst, name, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("linking %s to %s in the copy: %w", rel, first.rel, err)
	}
	return nil
}

// openMade opens dir's name, just made by the daemon, without following
// a link, and checks it is still that: of kind, and root's (no one else
// can make a root-owned entry; one swapped in meanwhile is refused).
func openMade(dir int, name string, kind uint32, flags int) (int, error) {
	fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening what was made: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != kind || st.Uid != uint32(os.Geteuid()) {
		unix.Close(fd)
		return -1, fmt.Errorf("a %s of uid %d is where the daemon made a %s: someone replaced it: %w",
			kindWord(st.Mode), st.Uid, kindWord(kind), supervisor.ErrProjectInUse)
	}
	return fd, nil
}

// meta gives out (a descriptor of an inode the copy made) the owner,
// mode, extended attributes and times of in (stat st); xattrs says
// whether in is read by a descriptor that can give them (a file or a
// directory: an O_PATH one cannot).
func (c *treeCopy) meta(out, in int, st *unix.Stat_t, xattrs bool) error {
	if xattrs {
		if err := c.xattrs(out, in); err != nil {
			return err
		}
	}
	if err := unix.Fchownat(out, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting an owner in the copy: %w", err)
	}
	kind := st.Mode & unix.S_IFMT
	if kind != unix.S_IFLNK {
		// After the owner, which clears set-id bits. Through the
		// descriptor's own link in /proc: the inode opened, never a name.
		if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", out), st.Mode&0o7777); err != nil {
			return fmt.Errorf("setting a mode in the copy: %w", err)
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if kind == unix.S_IFLNK {
		// A symlink's times are set by no descriptor; its own are the
		// copy's time, which no one relies on.
		return nil
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", out), ts, 0); err != nil {
		return fmt.Errorf("setting times in the copy: %w", err)
	}
	return nil
}

// xattrs copies in's extended attributes to out. A member's copy takes
// only user attributes and ACLs: a security or trusted attribute (file
// capabilities among them) set by no one but root is not the member's
// to carry.
func (c *treeCopy) xattrs(out, in int) error {
	names, err := listXattrs(in)
	if err != nil {
		return err
	}
	for _, n := range names {
		if c.owner != nil && !strings.HasPrefix(n, "user.") && !strings.HasPrefix(n, "system.posix_acl_") {
			continue
		}
		val, err := getXattr(in, n)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading attribute %s: %w", n, err)
		}
		if err := unix.Fsetxattr(out, n, val, 0); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("setting attribute %s in the copy: %w", n, err)
		}
	}
	return nil
}

func listXattrs(fd int) ([]string, error) {
	for size := 1024; size <= 1<<20; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Flistxattr(fd, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing attributes: %w", err)
		}
		var out []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	}
	return nil, errors.New("listing attributes: more than 1 MiB of names")
}

func getXattr(fd int, name string) ([]byte, error) {
	for size := 256; size <= 1<<20; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Fgetxattr(fd, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	return nil, errors.New("an attribute over 1 MiB")
}

// copyData copies what in holds to out, by descriptor, its holes kept:
// each run of data (SEEK_DATA, SEEK_HOLE) by copy_file_range where the
// kernel can, by read and write where it cannot; out takes in's size.
func copyData(out, in int) error {
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return err
	}
	for off := int64(0); off < st.Size; {
		data, err := unix.Seek(in, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // a hole to the end
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(in, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if err := copyRange(out, in, data, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return unix.Ftruncate(out, st.Size)
}

// copyRange copies n bytes at off of in to the same offset of out.
func copyRange(out, in int, off, n int64) error {
	for n > 0 {
		roff, woff := off, off
		c, err := unix.CopyFileRange(in, &roff, out, &woff, int(min(n, 1<<30)), 0)
		if err == nil && c > 0 {
			off, n = off+int64(c), n-int64(c)
			continue
		}
		if err == nil { // the file shrank under us
			return nil
		}
		if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
			return err
		}
		buf := make([]byte, min(n, 1<<20))
		for n > 0 {
			r, err := unix.Pread(in, buf[:min(int64(len(buf)), n)], off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			if r == 0 {
				return nil
			}
			if _, err := pwriteAll(out, buf[:r], off); err != nil {
				return err
			}
			off, n = off+int64(r), n-int64(r)
		}
	}
	return nil
}

func pwriteAll(fd int, b []byte, off int64) (int, error) {
	done := 0
	for done < len(b) {
		n, err := unix.Pwrite(fd, b[done:], off+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// kindWord names a mode's kind.
func kindWord(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFREG:
		return "file"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	default:
		return "device"
	}
}

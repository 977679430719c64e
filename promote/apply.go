package promote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
)

// ErrUnsafePath: a change names a path that leaves its tree (a "..", an
// absolute path, or a symlink on the way).
var ErrUnsafePath = errors.New("unsafe path")

// ErrKindChanged: a change of a path's metadata alone meets, in the
// target, an entry of another kind than the source's (a file that became
// a symlink, a directory that became a file). Its metadata is not set:
// acting on what is there now could reach through a link.
var ErrKindChanged = errors.New("the path is of another kind in the target")

// Applied counts what Apply did.
type Applied struct {
	Removed int   // paths removed (deleted, or the old side of a rename)
	Written int   // files, links and special files written
	Dirs    int   // directories made
	Meta    int   // paths whose metadata alone was set
	Cloned  int64 // bytes shared by reflink with the source
	Copied  int64 // bytes copied (no reflink across filesystems, or none at all)
}

// Apply makes each path of changes in the tree at dst what it is in the
// tree at src: the read-only snapshot the changes were listed against.
// Removals go first, deepest first; then what is added or modified,
// shallowest first, each file written under a temporary name beside its
// final one (data by FICLONE from src where both are on one filesystem,
// copied otherwise) and renamed over it; directories' metadata last,
// deepest first; one syncfs at the end, so that once Apply returns the
// change is on disk.
//
// Apply is not atomic by itself: a failure or a crash midway leaves dst
// partly changed. The caller takes a snapshot of dst first and rolls back
// to it (see design.md, I1).
//
// Paths are resolved below each root with RESOLVE_BENEATH and no symlinks
// at all: a sandbox's tree is untrusted, and a symlink it made must not
// take a write or a read outside either tree.
func Apply(ctx context.Context, changes []cowfs.Change, src, dst string) (Applied, error) {
	return ApplyWith(ctx, changes, src, dst, ApplyOptions{})
}

// ApplyOptions are Apply's choices.
type ApplyOptions struct {
	// RefusePrivileged refuses to write a set-id file or a device node
	// (ErrPrivileged, naming it): a promotion into a project does, unless
	// an admin allows them. File capabilities never travel: Apply copies
	// no extended attributes.
	RefusePrivileged bool
}

// ApplyWith is Apply with options.
func ApplyWith(ctx context.Context, changes []cowfs.Change, src, dst string, o ApplyOptions) (Applied, error) {
	var a Applied
	srcFD, err := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return a, fmt.Errorf("applying changes: opening the source %s: %w", src, err)
	}
	defer unix.Close(srcFD)
	dstFD, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return a, fmt.Errorf("applying changes: opening the target %s: %w", dst, err)
	}
	defer unix.Close(dstFD)
	ap := &applier{src: srcFD, dst: dstFD, a: &a, refusePrivileged: o.RefusePrivileged}

	p, err := plan(changes)
	if err != nil {
		return a, err
	}
	for _, rm := range p.remove {
		if err := ctx.Err(); err != nil {
			return a, err
		}
		if err := ap.remove(rm); err != nil {
			return a, fmt.Errorf("applying changes to %s: removing %s: %w", dst, rm, err)
		}
	}
	for i, put := range p.put {
		if err := ctx.Err(); err != nil {
			return a, err
		}
		if err := ap.put(put.path, put.tree); err != nil {
			return a, fmt.Errorf("applying changes to %s: writing %s: %w", dst, put.path, err)
		}
		if i+1 == (len(p.put)+1)/2 {
			crashpoint.Hit(crashpoint.PromoteApplying)
		}
	}
	for _, m := range p.meta {
		if err := ap.meta(m); err != nil {
			return a, fmt.Errorf("applying changes to %s: setting the metadata of %s: %w", dst, m, err)
		}
	}
	if err := unix.Syncfs(dstFD); err != nil {
		return a, fmt.Errorf("applying changes to %s: syncing: %w", dst, err)
	}
	return a, nil
}

// steps is Apply's plan: what to remove, write and touch, in order.
type steps struct {
	remove []string
	put    []putStep
	meta   []string
}

type putStep struct {
	path string
	tree bool // the whole tree below it too (a renamed directory)
}

// plan orders a change list into Apply's steps.
func plan(changes []cowfs.Change) (steps, error) {
	var p steps
	metaSeen := map[string]bool{}
	addMeta := func(path string) {
		if !metaSeen[path] {
			metaSeen[path] = true
			p.meta = append(p.meta, path)
		}
	}
	for _, c := range changes {
		if err := checkRel(c.Path); err != nil {
			return p, fmt.Errorf("applying changes: %w", err)
		}
		if c.Kind == cowfs.Renamed {
			if err := checkRel(c.NewPath); err != nil {
				return p, fmt.Errorf("applying changes: %w", err)
			}
		}
		if c.Path == "." && (c.Kind == cowfs.Deleted || c.Kind == cowfs.Renamed) {
			// The root itself is only ever changed, never removed.
			return p, fmt.Errorf("applying changes: the root cannot be %s: %w", c.Kind, ErrUnsafePath)
		}
		switch c.Kind {
		case cowfs.Deleted:
			p.remove = append(p.remove, c.Path)
		case cowfs.Renamed:
			p.remove = append(p.remove, c.Path)
			p.put = append(p.put, putStep{path: c.NewPath, tree: c.Type == cowfs.TypeDir})
			if c.Type == cowfs.TypeDir {
				addMeta(c.NewPath)
			}
		case cowfs.Added, cowfs.Modified:
			if c.Type == cowfs.TypeDir {
				// A directory's own entry: its children are changes of
				// their own; its times are set once they are written.
				p.put = append(p.put, putStep{path: c.Path})
				addMeta(c.Path)
				continue
			}
			p.put = append(p.put, putStep{path: c.Path})
		case cowfs.Metadata:
			addMeta(c.Path)
		default:
			return p, fmt.Errorf("applying changes: %s: unknown kind of change %q", c.Path, c.Kind)
		}
	}
	// A path removed and put again (replaced by another inode) is removed
	// first: removals all go before any write.
	slices.SortStableFunc(p.remove, func(a, b string) int { return depth(b) - depth(a) })
	slices.SortStableFunc(p.put, func(a, b putStep) int { return depth(a.path) - depth(b.path) })
	slices.SortStableFunc(p.meta, func(a, b string) int { return depth(b) - depth(a) })
	return p, nil
}

func depth(p string) int { return strings.Count(p, "/") }

// checkRel refuses a change's path that is not a plain relative path.
func checkRel(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("%q is not a path inside the tree: %w", p, ErrUnsafePath)
	}
	return nil
}

type applier struct {
	src, dst         int
	a                *Applied
	refusePrivileged bool
}

// allowed refuses a privileged file (set-id, a device) when asked to.
func (ap *applier) allowed(st *unix.Stat_t) error {
	if why := privilegedMode(st.Mode); why != "" && ap.refusePrivileged {
		return fmt.Errorf("it is %s in the source: %w", article(why), ErrPrivileged)
	}
	return nil
}

func article(why string) string {
	if strings.HasPrefix(why, "setuid") || strings.HasPrefix(why, "setgid") {
		return "a " + why + " file"
	}
	return "a " + why
}

// resolve is how Apply finds a path's parent: beneath the root, through
// no symlink and no mount point of another filesystem's magic links.
const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openDir opens directory dir (relative, "." for the root) below root.
func openDir(root int, dir string, flags int) (int, error) {
	fd, err := unix.Openat2(root, dir, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Resolve: resolve,
	})
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return -1, fmt.Errorf("%s: a symlink or another filesystem on the way: %w", dir, ErrUnsafePath)
	}
	if err != nil {
		return -1, fmt.Errorf("opening directory %s: %w", dir, err)
	}
	return fd, nil
}

// remove removes p from dst, with everything below it; a path already
// gone is fine (a rename's old side inside a removed directory).
func (ap *applier) remove(p string) error {
	parent, err := openDir(ap.dst, path.Dir(p), unix.O_RDONLY)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	if err := removeAt(parent, path.Base(p)); err != nil {
		return err
	}
	ap.a.Removed++
	return nil
}

// removeAt removes name in directory dir, recursively.
func removeAt(dir int, name string) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	for {
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if rerr := removeAt(fd, n); rerr != nil {
				f.Close()
				return fmt.Errorf("%s/%s: %w", name, n, rerr)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			f.Close()
			return err
		}
		// Entries removed: read the directory again from its start.
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}

// put makes p in dst what it is in src; with tree, everything below too.
func (ap *applier) put(p string, tree bool) error {
	srcDir, dstDir, err := ap.parents(p)
	if err != nil {
		return err
	}
	defer unix.Close(srcDir)
	defer unix.Close(dstDir)
	return ap.putAt(srcDir, dstDir, path.Base(p), tree)
}

// parents opens p's directory in the source and in the target.
func (ap *applier) parents(p string) (srcDir, dstDir int, err error) {
	srcDir, err = openDir(ap.src, path.Dir(p), unix.O_PATH)
	if err != nil {
		return -1, -1, fmt.Errorf("in the source: %w", err)
	}
	dstDir, err = openDir(ap.dst, path.Dir(p), unix.O_RDONLY)
	if err != nil {
		unix.Close(srcDir)
		return -1, -1, fmt.Errorf("in the target: %w", err)
	}
	return srcDir, dstDir, nil
}

func (ap *applier) putAt(srcDir, dstDir int, name string, tree bool) error {
	var st unix.Stat_t
	if err := unix.Fstatat(srcDir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("in the source: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return ap.putDir(srcDir, dstDir, name, &st, tree)
	}
	if err := ap.allowed(&st); err != nil {
		return err
	}
	tmp := tmpName(name)
	if err := ap.writeTemp(srcDir, dstDir, name, tmp, &st); err != nil {
		_ = unix.Unlinkat(dstDir, tmp, 0)
		return err
	}
	err := unix.Renameat(dstDir, tmp, dstDir, name)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		// A directory where the file goes (the change list named the
		// directory's removal elsewhere, or the target made it since).
		if err = removeAt(dstDir, name); err == nil {
			err = unix.Renameat(dstDir, tmp, dstDir, name)
		}
	}
	if err != nil {
		_ = unix.Unlinkat(dstDir, tmp, 0)
		return fmt.Errorf("renaming into place: %w", err)
	}
	ap.a.Written++
	return nil
}

// tmpName is a temporary name beside name, unlikely to be anyone's.
func tmpName(name string) string {
	return ".sandboxd-" + randomHex() + "-" + truncate(name, 200)
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// writeTemp writes src's entry name as dst's tmp: a file's data, a
// symlink's target, a special file's node; then owner, mode and times.
func (ap *applier) writeTemp(srcDir, dstDir int, name, tmp string, st *unix.Stat_t) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if err := ap.copyFile(srcDir, dstDir, name, tmp, st); err != nil {
			return err
		}
	case unix.S_IFLNK:
		target, err := readlinkAt(srcDir, name)
		if err != nil {
			return fmt.Errorf("reading the link in the source: %w", err)
		}
		if err := unix.Symlinkat(target, dstDir, tmp); err != nil {
			return fmt.Errorf("making the link: %w", err)
		}
	default: // fifo, socket, device
		if err := unix.Mknodat(dstDir, tmp, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("making the node: %w", err)
		}
	}
	return setMeta(dstDir, tmp, st)
}

// copyFile writes src's regular file name as dst's tmp.
func (ap *applier) copyFile(srcDir, dstDir int, name, tmp string, st *unix.Stat_t) error {
	in, err := unix.Openat(srcDir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening it in the source: %w", err)
	}
	inF := os.NewFile(uintptr(in), name)
	defer inF.Close()
	out, err := unix.Openat(dstDir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("creating it in the target: %w", err)
	}
	outF := os.NewFile(uintptr(out), tmp)
	defer outF.Close()
	if st.Size == 0 {
		return nil
	}
	// A reflink shares the source's extents: O(1) in the data on btrfs.
	if err := unix.IoctlFileClone(out, in); err == nil {
		ap.a.Cloned += st.Size
		return nil
	}
	n, err := io.Copy(outF, inF) // copy_file_range where the kernel can
	ap.a.Copied += n
	if err != nil {
		return fmt.Errorf("copying its data: %w", err)
	}
	return nil
}

// putDir makes directory name in dst (replacing what else is there),
// and with tree everything below it, as in src.
func (ap *applier) putDir(srcDir, dstDir int, name string, st *unix.Stat_t, tree bool) error {
	var dst unix.Stat_t
	err := unix.Fstatat(dstDir, name, &dst, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && dst.Mode&unix.S_IFMT == unix.S_IFDIR:
	case err == nil || errors.Is(err, unix.ENOENT):
		if err == nil {
			if err := removeAt(dstDir, name); err != nil {
				return fmt.Errorf("removing what is in the directory's place: %w", err)
			}
		}
		if err := unix.Mkdirat(dstDir, name, 0o700); err != nil {
			return fmt.Errorf("making the directory: %w", err)
		}
		ap.a.Dirs++
	default:
		return err
	}
	if !tree {
		return nil
	}
	sub, err := unix.Openat(srcDir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening it in the source: %w", err)
	}
	subF := os.NewFile(uintptr(sub), name)
	defer subF.Close()
	dsub, err := unix.Openat(dstDir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening it in the target: %w", err)
	}
	defer unix.Close(dsub)
	names, err := subF.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("reading it in the source: %w", err)
	}
	for _, n := range names {
		if err := ap.putAt(sub, dsub, n, true); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	var cur unix.Stat_t
	if err := unix.Fstat(sub, &cur); err != nil {
		return err
	}
	return setMeta(dstDir, name, &cur)
}

// meta sets p's owner, mode and times in dst to src's.
func (ap *applier) meta(p string) error {
	srcDir, dstDir, err := ap.parents(p)
	if err != nil {
		return err
	}
	defer unix.Close(srcDir)
	defer unix.Close(dstDir)
	var st unix.Stat_t
	if err := unix.Fstatat(srcDir, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("in the source: %w", err)
	}
	if err := ap.allowed(&st); err != nil {
		return err
	}
	if err := setMeta(dstDir, path.Base(p), &st); err != nil {
		return err
	}
	ap.a.Meta++
	return nil
}

// setMeta gives name in dir st's owner, mode and times (a symlink's mode
// is not its own). Each call acts on the entry itself, through an O_PATH
// fd opened without following a link, never on what a link points at;
// and an entry of another kind than st's is refused (ErrKindChanged).
func setMeta(dir int, name string, st *unix.Stat_t) error {
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening it in the target: %w", err)
	}
	defer unix.Close(fd)
	var cur unix.Stat_t
	if err := unix.Fstat(fd, &cur); err != nil {
		return fmt.Errorf("reading it in the target: %w", err)
	}
	if cur.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		return fmt.Errorf("it is a %s in the target and a %s in the source, so its metadata is not set: %w",
			kindName(cur.Mode), kindName(st.Mode), ErrKindChanged)
	}
	if err := unix.Fchownat(fd, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting its owner: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		// After chown, which clears set-id bits.
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

// fchmodFD sets the mode of the entry an O_PATH fd holds (not a symlink:
// the caller checked its kind). Before fchmodat2 exists, /proc/self/fd
// names the same inode (a magic link to the fd's own file, which is no
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

func readlinkAt(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

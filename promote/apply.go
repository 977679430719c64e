package promote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

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

// ErrReplaced: an entry Apply was working on is not the one it made or
// expected: someone else replaced it meanwhile (a racing host user). Apply
// stops there without acting on what is there now.
var ErrReplaced = errors.New("replaced by someone else during the promotion")

// errKept: Restore left a directory others have entries in where the
// rollback point has a file.
var errKept = errors.New("a directory holding others' entries is in the way")

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
// copied otherwise) and renamed over it; metadata-only changes last,
// deepest first (a file's is written anew and renamed over it likewise,
// a directory's set in place: see design.md, I7); one syncfs at the end, so that once Apply returns the
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
	// Expected is the rollback point: a snapshot of the target taken
	// before Apply, whose inode numbers are the target's (btrfs and ZFS
	// snapshots keep them). A directory that Apply did not make gets its
	// metadata set, or a renamed tree written into it, only if it is the
	// directory at the same path there (ErrReplaced otherwise): a host
	// user who can write the target may move another directory in its
	// place during the promotion. Empty: no such check, for a target no
	// one else writes.
	Expected string
}

// ApplyWith is Apply with options.
func ApplyWith(ctx context.Context, changes []cowfs.Change, src, dst string, o ApplyOptions) (Applied, error) {
	var a Applied
	p, err := plan(changes)
	if err != nil {
		return a, err
	}
	ap, done, err := newApplier(src, dst, "", o, &a)
	if err != nil {
		return a, fmt.Errorf("applying changes: %w", err)
	}
	defer done()
	return a, ap.run(ctx, p, dst, true)
}

// newApplier opens the trees an Apply or a Restore works on: src to read
// from, dst to write, and own (Restore's: the tree whose entries it takes
// out of dst; "" for none).
func newApplier(src, dst, own string, o ApplyOptions, a *Applied) (*applier, func(), error) {
	ap := &applier{src: -1, dst: -1, own: -1, expected: -1, a: a, refusePrivileged: o.RefusePrivileged,
		made: map[string]uint64{}, madeOwner: map[string]uint32{}, uid: uint32(os.Geteuid())}
	done := func() {
		for _, fd := range []int{ap.src, ap.dst, ap.own, ap.expected} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
	var err error
	if ap.src, err = unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		done()
		return nil, nil, fmt.Errorf("opening the source %s: %w", src, err)
	}
	if ap.dst, err = unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		done()
		return nil, nil, fmt.Errorf("opening the target %s: %w", dst, err)
	}
	if own != "" {
		if ap.own, err = unix.Open(own, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			done()
			return nil, nil, fmt.Errorf("opening the promotion's source %s: %w", own, err)
		}
	}
	if o.Expected != "" {
		if ap.expected, err = unix.Open(o.Expected, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			done()
			return nil, nil, fmt.Errorf("opening the rollback point %s: %w", o.Expected, err)
		}
	}
	return ap, done, nil
}

// run takes p's steps on dst, then syncs it; crash says whether the
// step's crash point is hit (Apply's, not Restore's).
func (ap *applier) run(ctx context.Context, p steps, dst string, crash bool) error {
	for _, rm := range p.unput {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := ap.removeOwn(rm); err != nil {
			return fmt.Errorf("undoing changes to %s: removing what the promotion wrote at %s: %w", dst, rm, err)
		}
	}
	for _, rm := range p.remove {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := ap.remove(rm); err != nil {
			return fmt.Errorf("applying changes to %s: removing %s: %w", dst, rm, err)
		}
	}
	for i, put := range p.put {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := ap.put(put.path, put.tree); err != nil {
			return fmt.Errorf("applying changes to %s: writing %s: %w", dst, put.path, err)
		}
		if crash && i+1 == (len(p.put)+1)/2 {
			crashpoint.Hit(crashpoint.PromoteApplying)
		}
	}
	for _, m := range p.meta {
		if err := ap.meta(m); err != nil {
			return fmt.Errorf("applying changes to %s: setting the metadata of %s: %w", dst, m, err)
		}
	}
	if err := unix.Syncfs(ap.dst); err != nil {
		return fmt.Errorf("applying changes to %s: syncing: %w", dst, err)
	}
	return nil
}

type applier struct {
	src, dst         int
	expected         int      // ApplyOptions.Expected, opened O_PATH; -1 if none
	own              int      // Restore's: the promotion's source, whose entries it removes; -1 if none
	kept             []string // Restore's: what it left, holding others' entries
	keepDirs         bool     // Restore's: never remove a directory to put a file in its place
	a                *Applied
	refusePrivileged bool
	made             map[string]uint64 // directories this Apply made: path → inode
	uid              uint32            // the daemon's, owner of what it makes
	// madeOwner: the owner a renamed tree's copy gave a directory it made
	// (path → uid), which its metadata step then finds there.
	madeOwner map[string]uint32
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
	return ap.putAt(srcDir, dstDir, p, tree)
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

// putAt makes p (whose directory is srcDir in the source, dstDir in the
// target) what it is in the source.
func (ap *applier) putAt(srcDir, dstDir int, p string, tree bool) error {
	var st unix.Stat_t
	if err := unix.Fstatat(srcDir, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("in the source: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return ap.putDir(srcDir, dstDir, p, &st, tree)
	}
	if err := ap.allowed(&st); err != nil {
		return err
	}
	err := ap.replace(srcDir, dstDir, path.Base(p), &st)
	if errors.Is(err, errKept) {
		ap.kept = append(ap.kept, p)
		return nil
	}
	if err != nil {
		return err
	}
	ap.a.Written++
	return nil
}

// putDir makes directory p in dst (replacing what else is there), and
// with tree everything below it, as in src. A directory it makes is
// checked to be the one it made before anything is put in it or set on
// it; an existing one must be the one the promotion expects.
func (ap *applier) putDir(srcDir, dstDir int, p string, st *unix.Stat_t, tree bool) error {
	name := path.Base(p)
	var dst unix.Stat_t
	err := unix.Fstatat(dstDir, name, &dst, unix.AT_SYMLINK_NOFOLLOW)
	made := false
	switch {
	case err == nil && dst.Mode&unix.S_IFMT == unix.S_IFDIR:
	case err == nil || errors.Is(err, unix.ENOENT):
		if err == nil {
			if err := removeAt(dstDir, name); err != nil {
				return fmt.Errorf("removing what is in the directory's place: %w", err)
			}
		}
		if err := unix.Mkdirat(dstDir, name, madeDirMode); err != nil {
			return fmt.Errorf("making the directory: %w", err)
		}
		testHook("mkdir", dstDir, name)
		made = true
		ap.a.Dirs++
	default:
		return err
	}
	var dsub int
	if made {
		dsub, dst, err = ap.openMade(dstDir, name, unix.S_IFDIR, unix.O_RDONLY|unix.O_DIRECTORY)
		if err == nil {
			ap.made[p] = dst.Ino
		}
	} else if tree {
		dsub, err = ap.openExpectedDir(dstDir, p)
	} else {
		return nil // its metadata is a step of its own (ap.meta)
	}
	if err != nil {
		return err
	}
	defer unix.Close(dsub)
	if !tree {
		return nil
	}
	sub, err := unix.Openat(srcDir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening it in the source: %w", err)
	}
	subF := os.NewFile(uintptr(sub), name)
	defer subF.Close()
	names, err := subF.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("reading it in the source: %w", err)
	}
	for _, n := range names {
		if err := ap.putAt(sub, dsub, p+"/"+n, true); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
	}
	var cur unix.Stat_t
	if err := unix.Fstat(sub, &cur); err != nil {
		return err
	}
	if err := setMeta(dsub, &cur); err != nil {
		return err
	}
	if made {
		ap.madeOwner[p] = cur.Uid
	}
	return nil
}

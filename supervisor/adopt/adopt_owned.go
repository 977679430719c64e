package adopt

// Adopting a directory that others than root can change (issue 29): a
// member's own project in its home, a service's data of its account.
// Its owner may rename or replace any entry of it, or the directory
// itself, at any moment; what the daemon does there it does through
// descriptors: the path is resolved once from / with no symlink on the
// way (openat2), the descriptor is checked (a directory, its owner, not
// a mount point), the tree copied beneath it (adopt_copy.go), and the
// volume mounted onto that descriptor (open_tree, move_mount): nothing
// the owner plants can lead root's hand elsewhere. The volume itself
// lives in the pool's directory of adopted volumes, which only root can
// change: its snapshots are taken by a path no owner controls.
//
// A mount the daemon makes is gone after a reboot until the daemon
// starts, and a service started before it (PostgreSQL on its cluster)
// would open the files under it, as they were when adopted, then have
// the volume mounted over them while it runs. So where every directory
// above the path is root's alone, its owner can neither rename nor
// replace it, and the volume is bound back by a mount unit, as
// AdoptMount's, mounted at boot in local-fs.target; only a directory its
// owner can move (a home's) is mounted by the daemon.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/crashpoint"
	"github.com/sandboxd/sandboxd/internal/rootonly"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// openPath opens directory path (absolute, clean) from /, through no
// symlink of any kind, and returns it with its stat. flags are
// O_RDONLY (to read it) or O_PATH.
func openPath(path string, flags int) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, st, fmt.Errorf("%s: a symlink on the way or at its end (none is followed): %w", path, supervisor.ErrInvalidProject)
	}
	if errors.Is(err, unix.ENOTDIR) {
		return -1, st, fmt.Errorf("%s is not a directory (a symlink, at its end or on the way, is not followed): %w", path, supervisor.ErrInvalidProject)
	}
	if err != nil {
		return -1, st, fmt.Errorf("opening %s: %w", path, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, fmt.Errorf("reading %s: %w", path, err)
	}
	return fd, st, nil
}

// mountRoot says whether fd is the root of a mount.
func mountRoot(fd int) (bool, error) {
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx); err != nil {
		return false, err
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, errors.New("the kernel does not say which directories are mount roots")
	}
	return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}

// openOwned opens directory path of an owned adoption: not a symlink on
// the way, not a mount point, owned by want where want is set (a
// member's own adoption), and up to / changeable by root or its owner
// alone. It returns the descriptor (O_RDONLY) and its owner.
func openOwned(path string, want *uint32) (int, uint32, error) {
	fd, st, err := openPath(path, unix.O_RDONLY)
	if err != nil {
		return -1, 0, err
	}
	fail := func(err error) (int, uint32, error) {
		unix.Close(fd)
		return -1, 0, err
	}
	if want != nil && st.Uid != *want {
		return fail(fmt.Errorf("%s is owned by uid %d, not by you (uid %d): you may adopt only a directory of your own: %w", path, st.Uid, *want, supervisor.ErrInvalidProject))
	}
	if root, err := mountRoot(fd); err != nil || root {
		if err == nil {
			err = fmt.Errorf("%s is a mount point of another filesystem: adopt a directory in it: %w", path, supervisor.ErrInvalidProject)
		}
		return fail(err)
	}
	// Who could change the path, up to /: root, and the directory's own
	// owner (who gains nothing by it).
	if err := rootonly.CheckOwner(path, st.Uid); err != nil {
		return fail(fmt.Errorf("%v; only a directory that root or its owner alone can change, up to /, is adopted: %w", err, supervisor.ErrInvalidProject))
	}
	return fd, st.Uid, nil
}

// adoptOwned takes rec's owned adoption from copying to done.
func (s *Adoptions) adoptOwned(ctx context.Context, pm cowfs.ProjectMaker, rec *state.Project) error {
	ad := rec.Adoption
	if err := os.MkdirAll(filepath.Dir(ad.Temp), 0o700); err != nil {
		return err
	}
	if _, err := pm.MakeProject(ctx, ad.Temp); err != nil {
		return err
	}
	copied := map[string]unix.Stat_t{}
	for _, p := range ad.Paths() {
		to := ad.InVolume(ad.Temp, p)
		if err := os.MkdirAll(to, 0o700); err != nil {
			return err
		}
		st, err := copyOwned(ctx, p, to, ad.Owner)
		if err != nil {
			return err
		}
		copied[p] = st
	}
	if err := s.copied(ctx, rec); err != nil {
		return err
	}
	for i, p := range ad.Paths() {
		want := copied[p]
		if err := s.mountOwned(ctx, ad, ad.Temp, p, &want); err != nil {
			return err
		}
		if i == 0 && len(ad.More) > 0 {
			crashpoint.Hit(crashpoint.AdoptBoundOne)
		}
	}
	crashpoint.Hit(crashpoint.AdoptSwitched)
	return s.finishAdoption(rec)
}

// copyOwned copies directory p, opened by descriptor, into the volume's
// directory to, and returns the stat of what it copied.
func copyOwned(ctx context.Context, p, to string, owner *uint32) (unix.Stat_t, error) {
	var st unix.Stat_t
	src, _, err := openOwned(p, owner)
	if err != nil {
		return st, err
	}
	defer unix.Close(src)
	if err := unix.Fstat(src, &st); err != nil {
		return st, err
	}
	dst, err := unix.Open(to, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return st, fmt.Errorf("opening the volume's %s: %w", to, err)
	}
	defer unix.Close(dst)
	if err := copyBeneath(ctx, src, dst, p, owner, crashpoint.AdoptCopying); err != nil {
		return st, fmt.Errorf("copying %s: %w", p, err)
	}
	return st, nil
}

// mountOwned mounts the volume's copy of p (the volume at location) at
// p, onto the directory found there now (the one copied, where want
// says which; any of its owner's otherwise, after a reboot): by its
// mount unit where ad says so, else onto a descriptor of it. One
// mounted already is left as it is.
func (s *Adoptions) mountOwned(ctx context.Context, ad *state.Adoption, location, p string, want *unix.Stat_t) error {
	what := ad.InVolume(location, p)
	if ownedMounted(ad, location, p) {
		if ad.Unit(p) {
			// Mounted at boot, or before a crash: its unit enabled and
			// active is left so (BindMount does nothing then).
			_, err := s.h.Units().BindMount(ctx, what, p)
			return err
		}
		return nil
	}
	vol, err := unix.Open(what, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the volume of %s: %w", p, err)
	}
	defer unix.Close(vol)
	at, _, err := openOwned(p, ad.Owner)
	if err != nil {
		return err
	}
	defer unix.Close(at)
	var st unix.Stat_t
	if err := unix.Fstat(at, &st); err != nil {
		return err
	}
	if want != nil && (st.Dev != want.Dev || st.Ino != want.Ino) {
		return fmt.Errorf("%s was replaced by another directory while its files were copied; try again once it is left alone: %w", p, supervisor.ErrProjectInUse)
	}
	if ad.Unit(p) {
		// Only root can change the directories above p: the unit's
		// path leads to the directory just checked, at every boot.
		if err := s.poolAtBoot(ctx); err != nil {
			return err
		}
		if _, err := s.h.Units().BindMount(ctx, what, p); err != nil {
			return fmt.Errorf("binding the volume at %s by a mount unit: %w", p, err)
		}
		return nil
	}
	tree, err := unix.OpenTree(vol, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("cloning the volume's %s to mount it: %w", p, err)
	}
	defer unix.Close(tree)
	if err := unix.MoveMount(tree, "", at, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the volume at %s: %w", p, err)
	}
	return nil
}

// byUnit are those of paths whose every directory above is root's
// alone: their owner can change what is in them, not which directory
// the path leads to, so a mount unit binds them back.
func byUnit(paths []string) []string {
	var out []string
	for _, p := range paths {
		if rootonly.Check(filepath.Dir(p)) == nil {
			out = append(out, p)
		}
	}
	return out
}

// ownedMounted says whether the volume's copy of p is what p shows (our
// mount is there).
func ownedMounted(ad *state.Adoption, location, p string) bool {
	volSt, err := statPath(ad.InVolume(location, p))
	if err != nil {
		return false
	}
	st, err := statPath(p)
	return err == nil && st.Dev == volSt.Dev && st.Ino == volSt.Ino
}

// statPath is openPath's stat, the descriptor closed.
func statPath(path string) (unix.Stat_t, error) {
	fd, st, err := openPath(path, unix.O_PATH)
	if err != nil {
		return st, err
	}
	unix.Close(fd)
	return st, nil
}

// unmountOwned removes p's mount unit, where ad has one, and unmounts
// the volume (at location) from p if, and only if, the mount at p is
// ours: its root is the volume's own directory.
func (s *Adoptions) unmountOwned(ctx context.Context, ad *state.Adoption, location, p string) error {
	if ad.Unit(p) {
		if err := s.h.Units().RemoveMount(ctx, p); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(location); errors.Is(err, os.ErrNotExist) {
		return nil // the volume gone: no mount of it left
	}
	volSt, err := statPath(ad.InVolume(location, p))
	if err != nil {
		return fmt.Errorf("reading the volume of %s: %w", p, err)
	}
	for {
		fd, st, err := openPath(p, unix.O_PATH)
		if err != nil {
			return nil // nothing at p, or not a directory: no mount of ours
		}
		root, rerr := mountRoot(fd)
		if st.Dev != volSt.Dev || st.Ino != volSt.Ino || rerr != nil || !root {
			unix.Close(fd)
			return nil // not ours (any more): left alone
		}
		// By the descriptor's own link: the mount found, not a name.
		err = unix.Unmount(fmt.Sprintf("/proc/self/fd/%d", fd), unix.MNT_DETACH)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("unmounting the volume from %s: %w", p, err)
		}
	}
}

// releaseOwned gives each path of rec's owned adoption its files back:
// the volume unmounted, the directory under it emptied and filled from
// the volume, by descriptor; then the volume goes. Run again after a
// crash, it takes up from what the filesystem shows.
func (s *Adoptions) releaseOwned(ctx context.Context, pm cowfs.ProjectMaker, rec state.Project) error {
	ad := rec.Adoption
	_, err := os.Lstat(rec.Location)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	volume := err == nil
	for _, p := range ad.Paths() {
		if err := s.unmountOwned(ctx, ad, rec.Location, p); err != nil {
			return err
		}
		crashpoint.Hit(crashpoint.ReleaseUnmounted)
		if !volume {
			continue
		}
		if err := copyBack(ctx, ad, rec.Location, p); err != nil {
			return err
		}
	}
	return s.released(ctx, pm, rec, volume)
}

// copyBack empties directory p (the one under the mount, holding the
// files as adopted) and fills it with the volume's copy of p, keeping
// its owners; by descriptor, p opened as openOwned does.
func copyBack(ctx context.Context, ad *state.Adoption, location, p string) error {
	at, _, err := openOwned(p, ad.Owner)
	if err != nil {
		return fmt.Errorf("giving %s its files back: %w", p, err)
	}
	defer unix.Close(at)
	from, _, err := openPath(ad.InVolume(location, p), unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("opening the volume of %s: %w", p, err)
	}
	defer unix.Close(from)
	// Refused before p is emptied, not half way through filling it.
	if err := withinDepth(ctx, from, p); err != nil {
		return err
	}
	if err := emptyBeneath(ctx, at, ad.Owner); err != nil {
		return fmt.Errorf("emptying %s: %w", p, err)
	}
	if err := copyBeneath(ctx, from, at, ad.InVolume(location, p), nil, ""); err != nil {
		return fmt.Errorf("copying the project's files back into %s: %w", p, err)
	}
	return nil
}

// emptyBeneath removes what directory dir holds, by descriptor, through
// no symlink and into no mount. With owner (a member's own adoption,
// every entry of which was its own), an entry of anyone else is refused,
// not removed: the member may have moved in, once the mount was gone,
// a directory of another's that it may rename but not empty.
func emptyBeneath(ctx context.Context, dir int, owner *uint32) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		rd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(rd), ".")
		names, err := f.Readdirnames(1024)
		f.Close()
		if errors.Is(err, io.EOF) || err == nil && len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := removeBeneath(ctx, dir, n, owner); err != nil {
				return fmt.Errorf("%s: %w", n, err)
			}
		}
	}
}

// removeBeneath removes name in dir and, a directory, what it holds
// (emptyBeneath's rules).
func removeBeneath(ctx context.Context, dir int, name string, owner *uint32) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if owner != nil && st.Uid != *owner {
		return fmt.Errorf("owned by uid %d, not by uid %d who adopted the directory: not removed; move it out and release again: %w", st.Uid, *owner, supervisor.ErrInvalidProject)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		err := unix.Unlinkat(dir, name, 0)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	// The directory opened is the one whose owner was checked (a swap
	// between the two is refused here).
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
		unix.Close(fd)
		if err == nil {
			err = fmt.Errorf("%s changed while it was removed; release again", name)
		}
		return err
	}
	if root, err := mountRoot(fd); err != nil || root {
		unix.Close(fd)
		if err == nil {
			err = fmt.Errorf("%s is a mount point: not emptied", name)
		}
		return err
	}
	err = emptyBeneath(ctx, fd, owner)
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}

// ownAccess refuses what a member's own adoption may not ask for: others
// given its project (its project is its own: root and admins list users
// and groups), and host services stopped or frozen for it.
func ownAccess(uid uint32, o Options) error {
	switch {
	case listed(o.Access):
		return fmt.Errorf("uid %d adopts a directory for itself alone: --user and --group (who else may use the project) are for root and admins: %w", uid, supervisor.ErrAccessDenied)
	case o.RestartUnits:
		return fmt.Errorf("uid %d may not have host services stopped and started (--restart-units is for root and admins): %w", uid, supervisor.ErrAccessDenied)
	case len(o.Freeze) > 0:
		return fmt.Errorf("uid %d may not have host services frozen (--freeze is for root and admins): %w", uid, supervisor.ErrAccessDenied)
	}
	return nil
}

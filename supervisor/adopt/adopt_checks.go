package adopt

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/rootonly"
	"github.com/sandboxd/sandboxd/internal/subtree"
	"github.com/sandboxd/sandboxd/supervisor"
)

// adoptable says why path cannot be adopted, or nil: it must be a plain
// directory (not /, not a mount point of another filesystem, not a
// volume already), hold no project and be in none, and hold neither the
// pool nor sandboxd's state. owned says it is adopted by descriptor
// (adopt_owned.go): a member's own (caller set: it must be the caller's,
// all of it), or one that others than root could change while root
// acts on it (a home's, a service's data); the rest, root's alone up to
// / with no user's directory in it, by the ways of issue 18.
func (s *Adoptions) adoptable(path string, caller *uint32) (owned bool, err error) {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || strings.ContainsAny(path, "\n\r\x00\\") {
		return false, fmt.Errorf("%q is not an absolute, clean path (without line breaks or backslashes): %w", path, supervisor.ErrInvalidProject)
	}
	if path == "/" {
		return false, fmt.Errorf("/ cannot be a project: %w", supervisor.ErrInvalidProject)
	}
	if strings.Contains(path, "%") {
		return false, fmt.Errorf("%q: a %% would be a specifier in its mount unit: %w", path, supervisor.ErrInvalidProject)
	}
	owned = caller != nil || rootonly.Check(path) != nil
	if err := s.adoptableDir(path); err != nil {
		return false, err
	}
	if !owned && systemTree(path) != nil {
		// A user's directory in root's tree: copied by descriptor.
		owned = true
	}
	if owned {
		fd, _, err := openOwned(path, caller)
		if err != nil {
			return false, err
		}
		err = filesHeld(fd, path, caller != nil)
		unix.Close(fd)
		if err != nil {
			return false, err
		}
	} else if err := filesHeld(unix.AT_FDCWD, path, false); err != nil {
		return false, err
	}
	return owned, nil
}

// madeUp are the filesystems whose entries the kernel makes up as they
// are read: their owners are those of processes and cgroups (a member
// owns /proc/PID of its own process), and a volume mounted over one
// would show root and every tool what the member wrote in the kernel's
// place (a Uid line of 0).
var madeUp = map[int64]string{
	unix.PROC_SUPER_MAGIC: "proc", unix.SYSFS_MAGIC: "sysfs", unix.CGROUP_SUPER_MAGIC: "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.DEVPTS_SUPER_MAGIC: "devpts", unix.DEBUGFS_MAGIC: "debugfs",
	unix.TRACEFS_MAGIC: "tracefs", unix.SECURITYFS_MAGIC: "securityfs", unix.BPF_FS_MAGIC: "bpf",
	unix.PSTOREFS_MAGIC: "pstore", unix.EFIVARFS_MAGIC: "efivarfs",
	unix.SELINUX_MAGIC: "selinuxfs", unix.SMACK_MAGIC: "smackfs", unix.BINFMTFS_MAGIC: "binfmt_misc",
	unix.AUTOFS_SUPER_MAGIC: "autofs", unix.NSFS_MAGIC: "nsfs", unix.HUGETLBFS_MAGIC: "hugetlbfs",
	0x19800202: "mqueue", 0x62656570: "configfs",
}

// filesHeld refuses a directory (fd, or path where fd is AT_FDCWD) on a
// filesystem that holds no files of its own (madeUp); for a member
// (member), on FUSE too: a user's server answers root's reads there (or
// never answers, the copy's call waiting forever).
func filesHeld(fd int, path string, member bool) error {
	var sfs unix.Statfs_t
	var err error
	if fd == unix.AT_FDCWD {
		err = unix.Statfs(path, &sfs)
	} else {
		err = unix.Fstatfs(fd, &sfs)
	}
	if err != nil {
		return fmt.Errorf("reading the filesystem of %s: %w", path, err)
	}
	name, ok := madeUp[int64(sfs.Type)]
	if member && sfs.Type == unix.FUSE_SUPER_MAGIC {
		name, ok = "fuse", true
	}
	if ok {
		return fmt.Errorf("%s is on %s, a filesystem that holds no files (the kernel, or a user's server, makes its entries up as they are read): only a directory on a disk's filesystem is adopted: %w", path, name, supervisor.ErrInvalidProject)
	}
	return nil
}

// adoptableDir is adoptable's checks of what path is and where.
func (s *Adoptions) adoptableDir(path string) error {
	st, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", path, err, supervisor.ErrInvalidProject)
	}
	if st.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symlink (none is followed): adopt the directory it points to by its own path: %w", path, supervisor.ErrInvalidProject)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory (a symlink is not followed): %w", path, supervisor.ErrInvalidProject)
	}
	if mountPoint(path) {
		return fmt.Errorf("%s is a mount point of another filesystem: adopt a directory in it, or add a volume of the pool with `project add`: %w", path, supervisor.ErrInvalidProject)
	}
	if pm, ok := s.h.Backend().(interface{ IsVolume(string) (bool, error) }); ok {
		if vol, _ := pm.IsVolume(path); vol {
			return fmt.Errorf("%s is a subvolume already: add it with `sandboxctl project add`: %w", path, supervisor.ErrInvalidProject)
		}
	}
	for _, p := range s.h.Projects() {
		for _, at := range places(p) {
			if at == "" || !filepath.IsAbs(at) {
				continue
			}
			if subtree.Within(path, at) || subtree.Within(at, path) {
				return fmt.Errorf("%s and project %q's %s are one inside the other: %w", path, p.Name, at, supervisor.ErrInvalidProject)
			}
		}
	}
	for _, own := range []string{s.h.Backend().Info().Root, s.h.RuntimeRoot()} {
		if own != "" && filepath.IsAbs(own) && (subtree.Within(own, path) || subtree.Within(path, own)) {
			return fmt.Errorf("%s holds sandboxd's own %s (or is in it): %w", path, own, supervisor.ErrInvalidProject)
		}
	}
	return nil
}

// firstUserID is the first id of regular users (login.defs' UID_MIN and
// GID_MIN): below it, root's and the system's services'.
const firstUserID = 1000

// systemTree refuses a tree with a directory a regular user could change
// while root copies it (a directory swapped for a symlink mid-copy would
// bring what it points at into the project): one owned by a user, or
// writable by a user's group or by anyone.
func systemTree(path string) error {
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading %s: %w: %w", p, err, supervisor.ErrInvalidProject)
		}
		if !d.IsDir() {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("reading %s: %w: %w", p, err, supervisor.ErrInvalidProject)
		}
		switch {
		case st.Uid >= firstUserID:
			return fmt.Errorf("%s is owned by uid %d, a user who could change it while root copies it: %w", p, st.Uid, supervisor.ErrInvalidProject)
		case st.Mode&0o020 != 0 && st.Gid >= firstUserID:
			return fmt.Errorf("%s is writable by group %d, whose users could change it while root copies it: %w", p, st.Gid, supervisor.ErrInvalidProject)
		case st.Mode&0o002 != 0:
			return fmt.Errorf("%s is writable by anyone: %w", p, supervisor.ErrInvalidProject)
		}
		return nil
	})
}

// mountPoint says whether path is where a filesystem is mounted (its
// device differs from its parent's, or the mount table names it).
func mountPoint(path string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(path, &st) != nil || unix.Lstat(filepath.Dir(path), &parent) != nil || st.Dev != parent.Dev {
		return true
	}
	return mountedAt(path)
}

// mountedAt says whether this mount namespace's table has a mount at path.
func mountedAt(path string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint ...; octal escapes.
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && unescapeMount(fields[4]) == path {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// roomFor checks that the filesystem of to has room for what dir holds.
func roomFor(dir, to string) error {
	var need int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			need += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("measuring %s: %w", dir, err)
	}
	return roomLeft(dir, need, to)
}

// roomLeft checks that the filesystem of to has need bytes free for dir.
func roomLeft(dir string, need int64, to string) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(to, &sfs); err != nil {
		return fmt.Errorf("reading the room of %s: %w", to, err)
	}
	if free := int64(sfs.Bavail) * sfs.Bsize; need > free {
		return fmt.Errorf("%s holds %d bytes; the pool's filesystem has %d free: %w", dir, need, free, supervisor.ErrLimitReached)
	}
	return nil
}

// adoptionsLeft refuses a member (caller; nil for root and admins) one
// more adoption of its own beyond Policy.MaxAdoptionsPerOwner: each
// holds a copy of its files in the pool, and one file hard-linked into
// many of the member's directories is copied once for each, so that
// without a bound a member fills the pool everyone's sandboxes write to
// from a few bytes of its own. Counted from the records, which hold the
// adoptions under way too; called under the admission lock, under which
// a record is added.
func (s *Adoptions) adoptionsLeft(caller *uint32) error {
	limit := s.h.Policy().MaxAdoptionsPerOwner
	if caller == nil || limit <= 0 {
		return nil
	}
	recs, err := s.h.Store().Projects()
	if err != nil {
		return err
	}
	n := 0
	for _, r := range recs {
		if r.Adoption != nil && r.Adoption.Owner != nil && *r.Adoption.Owner == *caller {
			n++
		}
	}
	if n >= limit {
		return fmt.Errorf("uid %d has adopted %d directories, the limit per user (limits.max_adoptions_per_user); release one first (sandboxctl project release NAME): %w", *caller, n, supervisor.ErrLimitReached)
	}
	return nil
}

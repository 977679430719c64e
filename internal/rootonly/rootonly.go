// Package rootonly says whether a path is one only root can change: what
// the daemon must check before it acts as root on a path by name (an
// adopted directory, a service's environment file), where a user who can
// rename an entry on the way could point root's action anywhere.
package rootonly

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Check returns nil if path (absolute, clean) and each directory above it
// are owned by root and writable by no one else: not by a group other
// than root's, not by anyone (a sticky directory above path's parent
// excepted: others cannot rename root's entries in it). path itself must
// not be a symlink.
func Check(path string) error {
	return check(path, 0)
}

// CheckOwner is Check with uid allowed beside root: path and each
// directory above it owned by root or by uid, writable by no other user
// or group. It is what a directory of uid (its home's) must pass for the
// daemon to act on it by descriptor: then only root and uid can change
// what the path leads to, and uid gains nothing by changing it.
func CheckOwner(path string, uid uint32) error {
	return check(path, uid)
}

func check(path string, uid uint32) error {
	who := "root"
	if uid != 0 {
		who = fmt.Sprintf("root or uid %d", uid)
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("%q is not an absolute, clean path", path)
	}
	for p, i := path, 0; ; p, i = filepath.Dir(p), i+1 {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%s is a symlink", p)
		}
		sticky := st.Mode&unix.S_ISVTX != 0 && i >= 2 // above the parent
		switch {
		case st.Uid != 0 && st.Uid != uid:
			return fmt.Errorf("%s is owned by uid %d, not %s: that user could change what root acts on", p, st.Uid, who)
		case st.Mode&0o020 != 0 && st.Gid != 0 && st.Mode&unix.S_IFMT == unix.S_IFDIR && !sticky:
			return fmt.Errorf("%s is writable by group %d: its members could change what root acts on", p, st.Gid)
		case st.Mode&0o002 != 0 && st.Mode&unix.S_IFMT == unix.S_IFDIR && !sticky:
			return fmt.Errorf("%s is writable by anyone: anyone could change what root acts on", p)
		case st.Mode&0o022 != 0 && st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return fmt.Errorf("%s is writable by others than root", p)
		}
		if p == "/" {
			return nil
		}
	}
}

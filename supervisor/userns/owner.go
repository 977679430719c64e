package userns

import (
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// The sandbox's owner writes what it owns, its project's top directory
// included: a project of root's used by an agent (`--user agent`) has a
// top directory only root may write, so `touch`, `sed -i` (which renames
// a new file over the old) and Python's __pycache__ fail there. The top
// directory of the sandbox's own copy (never the host's) is the owner's;
// that is no change of the sandbox's: its diff and its promotions leave
// the top directory's own owner, mode and attributes out (the host's
// keeps its own).

// OwnTopDir gives the top directory of sandbox rec's copy of its project
// (vol, made by the daemon in the pool, which only root reaches) to the
// sandbox's owner, with the owner's rwx bits set; group and the other
// bits stay. Not for root's sandboxes, a read-only project, or a project
// of several directories (several: whose volume's top is none of them).
func OwnTopDir(rec state.Record, vol cowfs.Volume, several bool) error {
	if rec.Owner == 0 || rec.ReadOnlyProject || several || !filepath.IsAbs(vol.Path) {
		return nil
	}
	fd, err := unix.Open(vol.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("giving the top directory of its copy of the project to its owner: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("giving the top directory of its copy of the project to its owner: %w", err)
	}
	if st.Uid == rec.Owner && st.Mode&0o700 == 0o700 {
		return nil
	}
	if err := unix.Fchown(fd, int(rec.Owner), -1); err != nil {
		return fmt.Errorf("giving the top directory of its copy of the project (%s) to its owner, uid %d: %w", vol.Path, rec.Owner, err)
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777|0o700); err != nil {
		return fmt.Errorf("making the top directory of its copy of the project (%s) its owner's to write: %w", vol.Path, err)
	}
	return nil
}

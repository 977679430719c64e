package cowfs

import (
	"fmt"
	"path/filepath"
	"syscall"
)

// RoomIn refuses a create on a pool that is full (ErrNoSpace): a snapshot
// takes no data, so the sandbox would be made, and could not write a
// byte. Only a pool that is a directory (btrfs) is checked; a ZFS root is
// a dataset.
func RoomIn(b Backend) error {
	root := b.Info().Root
	var st syscall.Statfs_t
	if !filepath.IsAbs(root) || syscall.Statfs(root, &st) != nil || st.Bavail*uint64(st.Bsize) >= 1<<20 {
		return nil
	}
	return fmt.Errorf("%w: %s has %d bytes available; free some space first", ErrNoSpace, root, st.Bavail*uint64(st.Bsize))
}

package cowfs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Filesystem magic numbers (statfs f_type) that error messages name.
const (
	MagicBtrfs = 0x9123683e
	MagicZFS   = 0x2fc12fc1
	MagicFUSE  = 0x65735546 // zfs-fuse, among others
)

var fsNames = map[int64]string{
	MagicBtrfs: "btrfs",
	MagicZFS:   "zfs",
	MagicFUSE:  "fuse",
	0xef53:     "ext4",
	0x58465342: "xfs",
	0x01021994: "tmpfs",
	0x794c7630: "overlay",
	0x6969:     "nfs",
	0x9fa0:     "proc",
	0x62656572: "sysfs",
}

// FSType returns the type of the filesystem holding path, as statfs
// reports it, and a name for messages ("ext4", or the number in hex).
func FSType(path string) (int64, string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, "", fmt.Errorf("reading the filesystem of %s: %w", path, err)
	}
	magic := int64(st.Type)
	if name, ok := fsNames[magic]; ok {
		return magic, name, nil
	}
	return magic, fmt.Sprintf("%#x", magic), nil
}

package fsat

import (
	"slices"

	"golang.org/x/sys/unix"
)

// Permission bits, as the owner, group and other triplets hold them.
const (
	PermRead   = 4
	PermSearch = 1
)

// Permits says whether uid, a member of gids, is granted want (PermRead,
// PermSearch or both) on a file of st's owner, group and mode, as the
// kernel's permission check without capabilities does: the owner's bits
// for the owner, else the group's for a member, else the others'. An ACL
// is the caller's to look for.
func Permits(st *unix.Stat_t, uid uint32, gids []uint32, want uint32) bool {
	var bits uint32
	switch {
	case st.Uid == uid:
		bits = st.Mode >> 6
	case slices.Contains(gids, st.Gid):
		bits = st.Mode >> 3
	default:
		bits = st.Mode
	}
	return bits&want == want
}

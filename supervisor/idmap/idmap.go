package idmap

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor/state"
)

// Sandboxes in user namespaces: root in their own sandbox, nobody on the
// host. Each holds a block of Block host ids that no other live
// sandbox and no host user has; inside it, every id of the block exists
// at its own number (an owner's id above it at the block's top). Two id
// maps, two jobs: the sandbox's layer and its copy of the project are
// idmapped through the whole map, so every file of the copy shows its
// real owner (root's, www-data's, postgres's, another user's), root
// inside may change any of them and a service inside runs on its own
// files; the host root's layers are idmapped through a narrow one
// (Shown: root, nobody, the owner), so a system account's or another
// user's file there has no id inside, shows as nobody's, and the
// sandbox's root has no power over it. What the sandbox's root writes
// lands on disk as uid 0.

// Block is how many host ids one sandbox holds: a block aligned to it.
const Block = 1 << 16

// nobodyID is the overflow id, nobody and nogroup.
const nobodyID = 65534

// Range is the host ids sandboxes take blocks from (sandbox.userns_ids).
type Range struct{ First, Count uint32 }

// ExhaustedError: no block of the range is free for a sandbox (or none
// whose first id is no account's). The core refuses it as a limit
// reached.
type ExhaustedError struct{ msg string }

func (e *ExhaustedError) Error() string { return e.msg }

type idSpan struct{ first, count uint64 }

// Allocate picks a sandbox's block: the lowest of r that no record
// (recs: all of them, a destroying sandbox's too) and no host id holds,
// and maps owner's ids in it. An *ExhaustedError if there is none.
func Allocate(recs []state.Entry, r Range, owner uint32) (*state.IDMap, error) {
	// Read at each create: a user added since the daemon started has
	// its ids, and useradd its /etc/subuid range.
	reserved, err := hostIDs()
	if err != nil {
		return nil, err
	}
	// The block's first id owns the sandbox's user namespace (and so has
	// every capability in it): an account the name service knows (LDAP,
	// sssd; not in the files above) must not have it (accounts.go).
	held := heldBases(recs)
	for range 64 {
		base, err := freeBase(held, reserved, r)
		if err != nil {
			return nil, err
		}
		if !names.has(base) {
			held[base] = true
			names.lookAhead(held, reserved, r)
			return mapIDs(base, owner, OwnerGroups(owner)), nil
		}
		reserved = append(reserved, idSpan{first: uint64(base), count: 1})
	}
	return nil, &ExhaustedError{fmt.Sprintf("no block of %d host ids whose first id is no account's", Block)}
}

// allocate is Allocate with the host's ids given, and no name service.
func allocate(recs []state.Entry, reserved []idSpan, r Range, owner uint32) (*state.IDMap, error) {
	base, err := freeBase(heldBases(recs), reserved, r)
	if err != nil {
		return nil, err
	}
	return mapIDs(base, owner, OwnerGroups(owner)), nil
}

// heldBases are the bases of the blocks recs hold.
func heldBases(recs []state.Entry) map[uint32]bool {
	held := map[uint32]bool{}
	for _, rec := range recs {
		if rec.HasIDs {
			held[rec.IDBase] = true
		}
	}
	return held
}

// freeBase is the lowest block of r that held does not have and no id of
// reserved is in.
func freeBase(held map[uint32]bool, reserved []idSpan, r Range) (uint32, error) {
	first := (uint64(r.First) + Block - 1) / Block * Block
	for b := first; b+Block <= uint64(r.First)+uint64(r.Count) && b+Block <= 1<<32; b += Block {
		if !held[uint32(b)] && !reservedIn(reserved, b) {
			return uint32(b), nil
		}
	}
	return 0, &ExhaustedError{fmt.Sprintf("no free block of %d host ids in %d+%d for a user namespace (sandbox.userns_ids)",
		Block, r.First, r.Count)}
}

// reservedIn reports whether a host id of reserved is in the block at base.
func reservedIn(reserved []idSpan, base uint64) bool {
	for _, r := range reserved {
		if r.first < base+Block && base < r.first+r.count {
			return true
		}
	}
	return false
}

// mapIDs is the user namespace of a sandbox of owner (whose groups are
// groups) in the block at base: every id of the block, inside X at base
// plus X on the host, so that the project's copy, idmapped through it,
// shows every file with its real owner (a service's, another user's).
// An owner's id too high for the block (65536 and above) takes a place
// at the block's top (65535, 65533, ...), which inside is then without
// an id.
func mapIDs(base, owner uint32, groups []uint32) *state.IDMap {
	m := &state.IDMap{Base: base}
	m.UIDs = extents(base, []uint32{owner})
	m.GIDs = extents(base, groups)
	return m
}

// maxHighIDs bounds the owner's ids above the block that get a place in
// it (the kernel takes 340 extents; a user is rarely in so many groups).
const maxHighIDs = 256

func extents(base uint32, extra []uint32) []state.IDExtent {
	var high []uint32
	for _, id := range extra {
		if id >= Block-1 && !slices.Contains(high, id) && len(high) < maxHighIDs {
			high = append(high, id)
		}
	}
	slices.Sort(high) // 65535, if there, takes its own place
	// The high ids from the block's top down (offsets 65535, 65533, ...:
	// nobody's 65534 keeps its own); below the lowest place taken, and
	// at nobody's, each id is its own.
	var es []state.IDExtent
	slot := uint32(Block)
	for _, id := range high {
		slot--
		if slot == nobodyID {
			slot--
		}
		es = append(es, state.IDExtent{Inside: id, Host: base + slot, Count: 1})
	}
	es = append([]state.IDExtent{{Inside: 0, Host: base, Count: slot}}, es...)
	if slot < nobodyID {
		es = append(es, state.IDExtent{Inside: nobodyID, Host: base + nobodyID, Count: 1})
	}
	return es
}

// OwnerGroups are owner's uid-named groups: its primary group and the
// others it is in (as the host's user database says now).
func OwnerGroups(owner uint32) []uint32 {
	u, err := user.LookupId(strconv.FormatUint(uint64(owner), 10))
	if err != nil {
		return nil
	}
	var out []uint32
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range append([]string{u.Gid}, ids...) {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				out = append(out, uint32(n))
			}
		}
	}
	return out
}

// Shown is the narrower map the host root's layers are shown through
// in sandbox rec: root (not the system accounts), nobody, the owner and
// its groups, each at its host id in the sandbox's block. A system
// account's file of the host (a service's state) or one another user
// shares with a system group is nobody's in the sandbox, out of its
// root's reach; its own processes may still be system accounts. (The
// project's copy is shown through the sandbox's whole map instead.)
func Shown(rec state.Record) *nsinit.IDMap {
	ns := ForInit(rec.IDs)
	if ns == nil {
		return nil
	}
	narrow := func(es []nsinit.Extent, own []uint32) []nsinit.Extent {
		var out []nsinit.Extent
		for _, id := range append([]uint32{0, nobodyID}, own...) {
			if len(out) >= maxHighIDs || slices.ContainsFunc(out, func(e nsinit.Extent) bool { return e.Inside == id }) {
				continue
			}
			if host, ok := hostOf(es, id); ok {
				out = append(out, nsinit.Extent{Inside: id, Host: host, Count: 1})
			}
		}
		return out
	}
	return &nsinit.IDMap{UIDs: narrow(ns.UIDs, []uint32{rec.Owner}), GIDs: narrow(ns.GIDs, OwnerGroups(rec.Owner))}
}

// hostOf is the host id of inside id in es.
func hostOf(es []nsinit.Extent, id uint32) (uint32, bool) {
	for _, e := range es {
		if id >= e.Inside && id-e.Inside < e.Count {
			return e.Host + id - e.Inside, true
		}
	}
	return 0, false
}

// ForInit is a record's map as its init takes it.
func ForInit(m *state.IDMap) *nsinit.IDMap {
	if m == nil {
		return nil
	}
	conv := func(es []state.IDExtent) []nsinit.Extent {
		out := make([]nsinit.Extent, len(es))
		for i, e := range es {
			out[i] = nsinit.Extent{Inside: e.Inside, Host: e.Host, Count: e.Count}
		}
		return out
	}
	return &nsinit.IDMap{UIDs: conv(m.UIDs), GIDs: conv(m.GIDs)}
}

// hostIDs are the ids the host's users and groups have, and the
// subordinate ranges it hands out (/etc/subuid, /etc/subgid).
func hostIDs() ([]idSpan, error) {
	var out []idSpan
	for _, f := range []struct {
		path  string
		field int  // of the id
		span  bool // id:count
	}{{"/etc/passwd", 2, false}, {"/etc/group", 2, false}, {"/etc/subuid", 1, true}, {"/etc/subgid", 1, true}} {
		file, err := os.Open(f.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the host's ids: %w", err)
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			parts := strings.Split(sc.Text(), ":")
			if len(parts) <= f.field {
				continue
			}
			id, err := strconv.ParseUint(parts[f.field], 10, 32)
			if err != nil {
				continue
			}
			span := idSpan{first: id, count: 1}
			if f.span {
				if len(parts) < 3 {
					continue
				}
				if span.count, err = strconv.ParseUint(parts[2], 10, 32); err != nil {
					continue
				}
			}
			out = append(out, span)
		}
		file.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.path, err)
		}
	}
	return out, nil
}

// ExecIdentity checks that the command's user exists in the sandbox's
// user namespace, and keeps only the groups that do. Its error names the
// uid that has none; the core refuses it as an invalid request.
func ExecIdentity(rec state.Record, req *nsinit.Request) error {
	m := ForInit(rec.IDs)
	if m == nil {
		return nil
	}
	if !m.HasUID(req.UID) {
		return fmt.Errorf("uid %d has no id in sandbox %s, whose user namespace maps the ids below %d and its owner's (uid %d)",
			req.UID, rec.ID, Block, rec.Owner)
	}
	if !m.HasGID(req.GID) {
		req.GID = nobodyID
	}
	req.Groups = slices.DeleteFunc(req.Groups, func(g uint32) bool { return !m.HasGID(g) })
	return nil
}

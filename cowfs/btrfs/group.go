package btrfs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	dbtrfs "github.com/dennwc/btrfs"

	"github.com/sandboxd/sandboxd/cowfs"
)

// A group quota is a level-1 qgroup ("1/N") with an exclusive limit, the
// level-0 qgroups of its volumes assigned to it: the kernel checks a write
// against every qgroup above the writer's, so the volumes together stop
// at the limit (tried on 6.18 with simple quotas: 40 MiB into one member
// and 60 MiB into another stopped at 64 MiB). Under simple quotas a
// deleted subvolume's qgroup stays, and stays a member, while what it
// wrote is held by a snapshot: a rollback to a checkpoint does not lift
// the bound.
//
// N is the group's name hashed into 40 bits under groupTag, so that the
// filesystem alone tells which level-1 qgroups are sandboxd's (Open
// removes those left without members). Two names colliding share a
// bound: with 1,000 live groups, odds of about 1 in 2 million.

const (
	groupLevel = 1 << 48               // qgroup level 1
	groupTag   = 0x5b << 40            // marks sandboxd's groups
	groupHash  = 1<<40 - 1             // the name's bits
	groupMask  = 0xffff<<48 | 0xff<<40 // level and tag bits
)

// groupID is the qgroup id of group name.
func groupID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return groupLevel | groupTag | h.Sum64()&groupHash
}

// qgroupName is how btrfs-progs and sysfs name a qgroup, level/id.
func qgroupName(id uint64) string {
	return strconv.FormatUint(id>>48, 10) + "/" + strconv.FormatUint(id&(1<<48-1), 10)
}

func (b *Backend) GroupQuota(ctx context.Context, group string, bytes uint64, vols ...cowfs.Volume) error {
	what := fmt.Sprintf("the quota group of %q", group)
	if group == "" {
		return fmt.Errorf("setting a quota group: no name: %w", cowfs.ErrInvalidName)
	}
	b.groupMu.Lock()
	defer b.groupMu.Unlock()
	id := groupID(group)
	if bytes == 0 {
		if b.quotaMode() == "" {
			return nil // no quotas: no group
		}
		if err := b.removeGroup(id); err != nil {
			return fmt.Errorf("removing %s (%s): %w", what, qgroupName(id), err)
		}
		return nil
	}
	for _, v := range vols {
		if err := b.ours(v, "putting in "+what); err != nil {
			return err
		}
	}
	if err := b.ensureQuota(); err != nil {
		return fmt.Errorf("setting %s: %w", what, err)
	}
	if err := qgroupCreate(b.mount, id, true); err != nil && !errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("making %s (%s): %w", what, qgroupName(id), err)
	}
	for _, v := range vols {
		sub, err := subvolumeID(v.Path)
		if err != nil {
			return fmt.Errorf("putting %s in %s: %w", v.Name, what, err)
		}
		if err := qgroupAssign(b.mount, sub, id, true); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("putting %s in %s (%s): %w", v.Name, what, qgroupName(id), err)
		}
	}
	if err := qgroupLimit(b.mount, id, bytes); err != nil {
		return fmt.Errorf("limiting %s (%s) to %d bytes: %w", what, qgroupName(id), bytes, err)
	}
	return nil
}

// removeGroup takes every member out of qgroup id, then removes it. A
// member whose subvolume is gone and holds nothing is removed too (the
// kernel keeps the qgroup of a subvolume deleted while a snapshot held
// what it wrote). Call it with groupMu held.
func (b *Backend) removeGroup(id uint64) error {
	members, err := searchOffsets(b.mount, quotaTree, id, keyQgroupRelation, 0, groupLevel-1)
	if err != nil {
		return fmt.Errorf("listing its members: %w", err)
	}
	for _, m := range members {
		if err := qgroupAssign(b.mount, m, id, false); err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("taking 0/%d out: %w", m, err)
		}
		// EBUSY: a live subvolume, or one still holding data: it stays.
		// One still in another group (a fork's source's, JoinGroup) is
		// that group's: never removed here.
		if others, err := searchOffsets(b.mount, quotaTree, m, keyQgroupRelation, groupLevel, math.MaxUint64); err == nil && len(others) == 0 {
			_ = qgroupCreate(b.mount, m, false)
		}
	}
	if err := qgroupCreate(b.mount, id, false); err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}

// sweepGroups removes sandboxd's groups that have no member left: what a
// crash left between a group's making and its first volume, or after the
// volumes of a sandbox whose group was not removed were deleted.
func (b *Backend) sweepGroups() error {
	if b.quotaMode() == "" {
		return nil
	}
	b.groupMu.Lock()
	defer b.groupMu.Unlock()
	ids, err := searchOffsets(b.mount, quotaTree, 0, keyQgroupInfo, groupLevel|groupTag, groupLevel|groupTag|groupHash)
	if err != nil {
		return fmt.Errorf("listing quota groups on %s: %w", b.mount, err)
	}
	var errs []error
	for _, id := range ids {
		if id&groupMask != groupLevel|groupTag {
			continue
		}
		members, err := searchOffsets(b.mount, quotaTree, id, keyQgroupRelation, 0, groupLevel-1)
		if err != nil || len(members) > 0 {
			errs = append(errs, err)
			continue
		}
		if err := qgroupCreate(b.mount, id, false); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("removing quota group %s on %s: %w", qgroupName(id), b.mount, err))
		}
	}
	return errors.Join(errs...)
}

// keepGroups puts the subvolume at path into every group the subvolume
// whose id is old belongs to, with old's own limit: a Rollback's new
// tree is bounded as the old was.
func (b *Backend) keepGroups(old uint64, path string) error {
	if b.quotaMode() == "" {
		return nil
	}
	sub, err := subvolumeID(path)
	if err != nil {
		return err
	}
	parents, err := searchOffsets(b.mount, quotaTree, old, keyQgroupRelation, groupLevel, math.MaxUint64)
	if err != nil {
		return fmt.Errorf("listing the quota groups of 0/%d: %w", old, err)
	}
	for _, p := range parents {
		if err := qgroupAssign(b.mount, sub, p, true); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("putting 0/%d in %s: %w", sub, qgroupName(p), err)
		}
	}
	data, err := os.ReadFile(filepath.Join("/sys/fs/btrfs", b.fsid, "qgroups", fmt.Sprintf("0_%d", old), "max_exclusive"))
	if err != nil {
		return nil // no qgroup of its own: no limit to keep
	}
	if s := strings.TrimSpace(string(data)); s != "none" {
		limit, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("reading the limit of 0/%d: %q: %w", old, s, err)
		}
		// By the pool's mount: a call on the new tree would reserve
		// metadata in its (maybe full) groups and fail with EDQUOT.
		if limit != 0 && limit != math.MaxUint64 {
			if err := qgroupLimit(b.mount, sub, limit); err != nil {
				return fmt.Errorf("limiting 0/%d: %w", sub, err)
			}
		}
	}
	return nil
}

// subvolumeID is the id of the subvolume at path.
func subvolumeID(path string) (uint64, error) {
	fs, err := dbtrfs.Open(path, true)
	if err != nil {
		return 0, notFound(err)
	}
	defer fs.Close()
	return fs.SubVolumeID()
}

// searchOffsets lists the offsets of the items (objectid, typ, offset) of
// tree whose offsets are in [minOff, maxOff], by BTRFS_IOC_TREE_SEARCH.
func searchOffsets(mount string, tree, objectid uint64, typ uint32, minOff, maxOff uint64) ([]uint64, error) {
	f, err := os.Open(mount)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []uint64
	for {
		args := searchArgs{key: searchKey{
			treeID: tree, minObjectID: objectid, maxObjectID: objectid,
			minOffset: minOff, maxOffset: maxOff, maxTransID: math.MaxUint64,
			minType: typ, maxType: typ, nrItems: 4096,
		}}
		if err := ioctl(f, iocTreeSearch, unsafe.Pointer(&args)); err != nil {
			return nil, fmt.Errorf("searching tree %d: %w", tree, err)
		}
		if args.key.nrItems == 0 {
			return out, nil
		}
		buf, last := args.buf[:], uint64(0)
		for range args.key.nrItems {
			if len(buf) < int(unsafe.Sizeof(searchHeader{})) {
				break
			}
			h := (*searchHeader)(unsafe.Pointer(&buf[0]))
			if h.objectid == objectid && h.typ == typ {
				out = append(out, h.offset)
			}
			last = h.offset
			buf = buf[int(unsafe.Sizeof(searchHeader{}))+int(h.len):]
		}
		if last >= maxOff {
			return out, nil
		}
		minOff = last + 1
	}
}

// JoinGroup puts every member of group from into group to (made by
// GroupQuota), under simple quotas: the volumes of from's sandbox, its
// checkpoints', and those deleted that still hold what they wrote. A
// fork's group so counts what the fork holds of its source's writes,
// which its own volumes do not own under simple quotas (and which no
// group would count once its source is gone). A from that has no group
// is no error.
func (b *Backend) JoinGroup(ctx context.Context, to, from string) error {
	if m := b.quotaMode(); m != "squota" && m != "simple" { // sysfs says squota
		// Full qgroups count what a group's volumes share with no other
		// as its own already (the source's writes, once it is gone); and
		// a member with shared extents assigned makes them inconsistent.
		return nil
	}
	b.groupMu.Lock()
	defer b.groupMu.Unlock()
	src, dst := groupID(from), groupID(to)
	members, err := searchOffsets(b.mount, quotaTree, src, keyQgroupRelation, 0, groupLevel-1)
	if err != nil {
		return fmt.Errorf("listing the members of the quota group of %q (%s): %w", from, qgroupName(src), err)
	}
	for _, m := range members {
		if err := qgroupAssign(b.mount, m, dst, true); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("putting 0/%d of the quota group of %q in that of %q (%s): %w", m, from, to, qgroupName(dst), err)
		}
	}
	return nil
}

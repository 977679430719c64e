package btrfs

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ioctls dennwc/btrfs does not have: quota control (simple quotas
// need it: btrfs-progs 6.2 cannot enable them), a qgroup's limit (the
// library has the struct but no call; `btrfs qgroup limit` costs a
// process start on every create) and send with flags (a send without file
// data lists changes at the cost of the change's metadata), and the
// qgroup calls and tree search of group quotas (group.go).

const (
	iocQuotaCtl     = 0xc0109428 // _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
	iocSend         = 0x40489426 // _IOW(0x94, 38, struct btrfs_ioctl_send_args)
	iocQgroupLimit  = 0x8030942b // _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args)
	iocQgroupAssign = 0x40189429 // _IOW(0x94, 41, struct btrfs_ioctl_qgroup_assign_args)
	iocQgroupCreate = 0x4010942a // _IOW(0x94, 42, struct btrfs_ioctl_qgroup_create_args)
	iocTreeSearch   = 0xd0009411 // _IOWR(0x94, 17, struct btrfs_ioctl_search_args)

	quotaTree         = 8   // BTRFS_QUOTA_TREE_OBJECTID
	keyQgroupInfo     = 242 // BTRFS_QGROUP_INFO_KEY: (0, 242, qgroupid)
	keyQgroupRelation = 246 // BTRFS_QGROUP_RELATION_KEY: (a, 246, b), both ways

	qgroupLimitMaxExcl = 1 << 1 // BTRFS_QGROUP_LIMIT_MAX_EXCL

	quotaCtlEnable       = 1
	quotaCtlEnableSimple = 4 // kernel 6.7+

	sendFlagNoFileData = 0x1
)

type quotaCtlArgs struct {
	cmd    uint64
	status uint64
}

// qgroupLimitArgs is struct btrfs_ioctl_qgroup_limit_args: a qgroup id (0:
// the subvolume of the descriptor) and struct btrfs_qgroup_limit.
type qgroupLimitArgs struct {
	qgroupID uint64
	flags    uint64
	maxRfer  uint64
	maxExcl  uint64
	rsvRfer  uint64
	rsvExcl  uint64
}

// searchKey is struct btrfs_ioctl_search_key.
type searchKey struct {
	treeID      uint64
	minObjectID uint64
	maxObjectID uint64
	minOffset   uint64
	maxOffset   uint64
	minTransID  uint64
	maxTransID  uint64
	minType     uint32
	maxType     uint32
	nrItems     uint32
	_           uint32
	_           [4]uint64
}

// searchArgs is struct btrfs_ioctl_search_args: the key, then the items
// found, each a searchHeader and its data.
type searchArgs struct {
	key searchKey
	buf [4096 - 104]byte
}

// searchHeader is struct btrfs_ioctl_search_header.
type searchHeader struct {
	transid  uint64
	objectid uint64
	offset   uint64
	typ      uint32
	len      uint32
}

type sendArgs struct {
	sendFD            int64
	cloneSourcesCount uint64
	cloneSources      uintptr
	parentRoot        uint64
	flags             uint64
	version           uint32
	reserved          [28]byte
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, uintptr(arg))
	if errno != 0 {
		return errno
	}
	return nil
}

// quotaCtl runs a BTRFS_IOC_QUOTA_CTL command on the filesystem of mount.
func quotaCtl(mount string, cmd uint64) error {
	f, err := os.Open(mount)
	if err != nil {
		return err
	}
	defer f.Close()
	args := quotaCtlArgs{cmd: cmd}
	return ioctl(f, iocQuotaCtl, unsafe.Pointer(&args))
}

// limitExclusive sets the exclusive limit of the subvolume at path's
// qgroup to bytes, as `btrfs qgroup limit -e` does (max: no limit).
func limitExclusive(path string, bytes uint64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	args := qgroupLimitArgs{flags: qgroupLimitMaxExcl, maxExcl: bytes}
	return ioctl(f, iocQgroupLimit, unsafe.Pointer(&args))
}

// qgroupCreate makes (or, with create false, removes) qgroup id on the
// filesystem of mount, as `btrfs qgroup create|destroy` do.
func qgroupCreate(mount string, id uint64, create bool) error {
	f, err := os.Open(mount)
	if err != nil {
		return err
	}
	defer f.Close()
	args := [2]uint64{0, id} // struct btrfs_ioctl_qgroup_create_args {create; qgroupid}
	if create {
		args[0] = 1
	}
	return ioctl(f, iocQgroupCreate, unsafe.Pointer(&args))
}

// qgroupAssign puts qgroup src in qgroup dst (or, with assign false,
// takes it out), as `btrfs qgroup assign|remove` do.
func qgroupAssign(mount string, src, dst uint64, assign bool) error {
	f, err := os.Open(mount)
	if err != nil {
		return err
	}
	defer f.Close()
	args := [3]uint64{0, src, dst} // struct btrfs_ioctl_qgroup_assign_args {assign; src; dst}
	if assign {
		args[0] = 1
	}
	return ioctl(f, iocQgroupAssign, unsafe.Pointer(&args))
}

// qgroupLimit sets the exclusive limit of qgroup id (of any level).
func qgroupLimit(mount string, id, bytes uint64) error {
	f, err := os.Open(mount)
	if err != nil {
		return err
	}
	defer f.Close()
	args := qgroupLimitArgs{qgroupID: id, flags: qgroupLimitMaxExcl, maxExcl: bytes}
	return ioctl(f, iocQgroupLimit, unsafe.Pointer(&args))
}

// sendNoData runs BTRFS_IOC_SEND of the read-only subvolume at path,
// incremental from the subvolume whose root id is parentRoot, without file
// data, writing the stream to w. It blocks until the kernel is done.
func sendNoData(path string, parentRoot uint64, w *os.File) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sources := []uint64{parentRoot}
	args := sendArgs{
		sendFD:            int64(w.Fd()),
		cloneSourcesCount: 1,
		cloneSources:      uintptr(unsafe.Pointer(&sources[0])),
		parentRoot:        parentRoot,
		flags:             sendFlagNoFileData,
	}
	err = ioctl(f, iocSend, unsafe.Pointer(&args))
	runtime.KeepAlive(sources) // the kernel reads it through a uintptr
	if err != nil {
		return fmt.Errorf("btrfs send ioctl of %s: %w", path, err)
	}
	return nil
}

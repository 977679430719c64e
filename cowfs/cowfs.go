package cowfs

import (
	"context"
	"io"
	"time"
)

// Glossary, as the rest of sandboxd uses the words:
//
//   - pool: the filesystem sandboxd works in, and within it the root where
//     sandboxd keeps its own volumes: a directory of a btrfs filesystem, or
//     a parent dataset of a ZFS pool.
//   - volume: a copy-on-write tree of files: a btrfs subvolume, or a ZFS
//     dataset or snapshot. Volumes sandboxd makes live directly under the
//     root, are named by one path component, and are marked as its own.
//   - project: a user's volume that sandboxd snapshots but never changes
//     except by promotion. It lives anywhere in the pool's filesystem.
//   - base: a read-only snapshot of a project, taken when a sandbox is made.
//   - sandbox: a writable snapshot of a base.
//   - checkpoint: a read-only snapshot of a sandbox, to roll back to.

// Kind says what sort of volume a Volume is.
type Kind string

const (
	// KindProject is a user's volume, outside sandboxd's root.
	KindProject Kind = "project"
	// KindWritable is a writable volume of sandboxd's (a sandbox).
	KindWritable Kind = "writable"
	// KindReadOnly is a read-only snapshot of sandboxd's (a base, a checkpoint).
	KindReadOnly Kind = "readonly"
)

// Volume is one copy-on-write tree of files.
type Volume struct {
	// Name is the volume's name under the root for sandboxd's volumes, or
	// the location the project was opened with (a path or a dataset).
	Name string
	// ID is the backend's own identity: the subvolume's path on btrfs, the
	// dataset or snapshot name (pool/x, pool/x@y) on ZFS.
	ID string
	// Path is where the volume's files are seen on this host.
	Path string
	Kind Kind
	// Origin is the ID of the volume this one was snapshotted from, when
	// the backend knows it ("" otherwise).
	Origin string
	// Created is when the volume was made.
	Created time.Time
	// Ours is true for volumes sandboxd made (a ZFS user property, or the
	// btrfs path convention: a subvolume directly under the root).
	Ours bool
}

// ReadOnly says whether the volume's files cannot be changed.
func (v Volume) ReadOnly() bool { return v.Kind == KindReadOnly }

// ChangeKind says how a path differs between two snapshots.
type ChangeKind string

const (
	Added    ChangeKind = "added"
	Modified ChangeKind = "modified" // content (and maybe metadata) changed
	Deleted  ChangeKind = "deleted"
	Renamed  ChangeKind = "renamed"  // Path is the old name, NewPath the new
	Metadata ChangeKind = "metadata" // mode, owner, times or xattrs only
)

// FileType is the type of the entry a change is about.
type FileType string

const (
	TypeFile    FileType = "file"
	TypeDir     FileType = "dir"
	TypeSymlink FileType = "symlink"
	TypeFIFO    FileType = "fifo"
	TypeSocket  FileType = "socket"
	TypeDevice  FileType = "device"
	TypeUnknown FileType = ""
)

// Change is one path that differs between two snapshots. Paths are
// relative to the volume's root, with "/" separators and no leading "/".
type Change struct {
	Path    string
	NewPath string // for Renamed
	Kind    ChangeKind
	Type    FileType
}

// Usage is a volume's disk use and limit, in bytes.
type Usage struct {
	// Exclusive is what this volume alone holds: what it wrote since it was
	// snapshotted (btrfs simple quota exclusive; ZFS "used").
	Exclusive uint64
	// Referenced is everything the volume's files reference, shared or not.
	Referenced uint64
	// Quota is the limit on Exclusive (0: none).
	Quota uint64
}

// Capabilities describe, as data, what differs between backends. Each false
// field has a typed error (ErrUnsupported) where it would be used.
type Capabilities struct {
	// WritableSnapshots: a writable snapshot is made in one step (btrfs).
	// Without it (ZFS) it is a read-only snapshot plus a clone, and the
	// clone depends on that snapshot until it is destroyed.
	WritableSnapshots bool
	// IndependentSnapshots: a volume can be deleted while snapshots of it
	// exist (btrfs). Without it (ZFS) Delete of a volume with snapshots or
	// clones fails with ErrBusy.
	IndependentSnapshots bool
	// FastChanges: Changes costs in proportion to the change (btrfs send
	// stream, zfs diff). Without it (zfs-fuse: no `zfs diff`) Changes walks
	// both trees, in proportion to the project.
	FastChanges bool
	// Generation: ChangedSince answers from a transaction number (btrfs
	// generation, OpenZFS "written@"), without reading files. zfs-fuse
	// has neither: ChangedSince fails with ErrUnsupported.
	Generation bool
	// Quota: SetQuota limits what a volume writes (btrfs simple quotas on
	// kernels from 6.7, qgroups before; ZFS refquota).
	Quota bool
	// SimpleQuota: the quota is btrfs's simple quota (squota), which counts
	// exactly what a snapshot writes; false on ZFS and on btrfs qgroups.
	SimpleQuota bool
	// GroupQuota: one limit bounds what several volumes write together
	// (btrfs: a level-1 qgroup over the volumes' own). Without it (ZFS:
	// sandboxd's datasets are siblings, not children of one parent with a
	// quota) GroupQuota fails with ErrUnsupported, and a caller splits its
	// bound among the volumes with SetQuota.
	GroupQuota bool
	// CloneAcrossVolumes: a copy into another volume may share the
	// source's blocks (a reflink: FICLONE, copy_file_range), which the
	// destination's quota does not count (btrfs charges an extent to the
	// subvolume that wrote it). A bound on a volume that others copy into
	// then needs a filesystem of its own there. False on ZFS: zfs-fuse
	// cannot clone blocks, and OpenZFS's block cloning counts a clone in
	// the dataset it lands in.
	CloneAcrossVolumes bool
	// OverlayUpper: a volume can be an overlayfs upper layer (btrfs;
	// OpenZFS from 2.2, which has RENAME_WHITEOUT). zfs-fuse cannot.
	OverlayUpper bool
	// Idmap: a volume can be an idmapped mount (btrfs on Linux 5.15+).
	// zfs-fuse cannot: FUSE idmaps only for a server that sets
	// FUSE_ALLOW_IDMAP, which it does not; OpenZFS from 2.2 can, but is
	// not claimed (see the zfs backend). A sandbox in a user namespace
	// needs it, for its project and its layer.
	Idmap bool
	// SeparateMounts: each volume is a mount of its own (ZFS), which a
	// mount namespace made before the volume was mounted does not see.
	// btrfs volumes are part of the pool's mount.
	SeparateMounts bool
}

// Info describes an open backend.
type Info struct {
	Backend string // "btrfs" or "zfs"
	// Root is where sandboxd's volumes live: a directory or a dataset.
	Root string
	// Version is the version of the tools or kernel the backend found.
	Version      string
	Capabilities Capabilities
}

// Backend is a copy-on-write pool. Every method that touches the pool takes
// a context; errors wrap the package's sentinels (ErrNotFound, ErrExists,
// ErrBusy, ErrInvalidName, ErrOutsidePool, ErrUnsupported, ErrNoSpace,
// ErrQuotaExceeded, ErrCorruptStream) and name the volume.
type Backend interface {
	// Info says which backend this is, where its root is and what it can do.
	Info() Info

	// Project opens a user's volume: a btrfs subvolume path, or a ZFS
	// dataset name. It must be in the same pool as the root, so that
	// snapshots of it are copy-on-write.
	Project(ctx context.Context, location string) (Volume, error)
	// Create makes an empty writable volume under the root.
	Create(ctx context.Context, name string) (Volume, error)
	// Snapshot makes a snapshot of src named name under the root, read-only
	// or writable. It costs the same whatever the size of src.
	Snapshot(ctx context.Context, src Volume, name string, readOnly bool) (Volume, error)
	// Get returns sandboxd's volume called name.
	Get(ctx context.Context, name string) (Volume, error)
	// List returns every volume of sandboxd's under the root.
	List(ctx context.Context) ([]Volume, error)
	// Delete removes a volume of sandboxd's. It never removes a project.
	Delete(ctx context.Context, v Volume) error
	// Rollback makes the writable volume v hold exactly what the read-only
	// snapshot to holds. Its Path stays the same.
	Rollback(ctx context.Context, v, to Volume) error
	// RollbackProject makes project hold exactly what to holds: a read-only
	// snapshot that Snapshot took of that project (a promotion's rollback
	// point). It is the one change sandboxd makes to a project other than
	// a promotion's own writes, and it is atomic: after a crash the
	// project holds either what it held or what to holds.
	RollbackProject(ctx context.Context, project, to Volume) error

	// Changes lists what differs from the read-only snapshot from to the
	// volume to (read-only too on btrfs, which sends from snapshots).
	Changes(ctx context.Context, from, to Volume) ([]Change, error)
	// ChangedSince says whether v changed after the snapshot since was
	// taken of it, without reading files (see Capabilities.Generation).
	ChangedSince(ctx context.Context, v, since Volume) (bool, error)

	// Send writes a send stream of the read-only snapshot to, incremental
	// from the read-only snapshot from when from is not nil.
	Send(ctx context.Context, w io.Writer, from *Volume, to Volume) error
	// Receive reads a send stream into a new read-only volume named name.
	// On any failure, nothing of it is left.
	Receive(ctx context.Context, r io.Reader, name string) (Volume, error)

	// SetQuota limits what v may write, in bytes (0 removes the limit).
	SetQuota(ctx context.Context, v Volume, bytes uint64) error
	// GroupQuota bounds what the volumes vols write together to bytes,
	// under group, a name of the caller's (a sandbox's id): a sandbox's
	// volume, its system layer and its checkpoints share one bound. Called
	// again, it adds vols to the group and sets its limit anew; a volume
	// deleted stays counted while what it wrote is still held (by a
	// checkpoint), and Rollback keeps a volume in its groups. bytes 0
	// removes the group (its volumes stay, unbounded by it); a group not
	// found is no error.
	GroupQuota(ctx context.Context, group string, bytes uint64, vols ...Volume) error
	// Usage reads v's disk use and limit.
	Usage(ctx context.Context, v Volume) (Usage, error)

	// Close releases what the backend holds open. Volumes stay.
	Close() error
}

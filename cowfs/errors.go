package cowfs

import "errors"

// Conditions callers branch on. Errors from a backend wrap one of these and
// say what was being done to which volume.
var (
	// ErrNotFound: no such volume, snapshot, project or pool.
	ErrNotFound = errors.New("not found")
	// ErrExists: a volume of that name is already there.
	ErrExists = errors.New("already exists")
	// ErrBusy: the volume is in use (mounted and open, or has snapshots or
	// clones that depend on it).
	ErrBusy = errors.New("busy")
	// ErrInvalidName: a name that is empty, too long, or holds "/", "..",
	// NUL or another character that is not allowed.
	ErrInvalidName = errors.New("invalid name")
	// ErrOutsidePool: a path or dataset that is not in the backend's pool.
	ErrOutsidePool = errors.New("outside the pool")
	// ErrUnsupportedFS: the path is on neither btrfs nor ZFS.
	ErrUnsupportedFS = errors.New("unsupported filesystem")
	// ErrUnsupported: the backend cannot do this (see Capabilities).
	ErrUnsupported = errors.New("not supported by this backend")
	// ErrNoSpace: the pool is full.
	ErrNoSpace = errors.New("no space left in the pool")
	// ErrQuotaExceeded: the volume reached its quota.
	ErrQuotaExceeded = errors.New("quota exceeded")
	// ErrCorruptStream: a send stream that is truncated, corrupt or of an
	// unknown format.
	ErrCorruptStream = errors.New("corrupt send stream")
	// ErrReadOnly: a change to a read-only volume.
	ErrReadOnly = errors.New("read-only volume")
	// ErrNotVolume: a path or dataset that exists but is not a volume (a
	// plain directory where a subvolume was expected).
	ErrNotVolume = errors.New("not a subvolume or dataset")
	// ErrNotOurs: a change that only sandboxd's own volumes may undergo
	// (delete, rollback) asked of a project or a foreign volume.
	ErrNotOurs = errors.New("not a volume of sandboxd's")
)

package nsinit

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// A sandbox in a user namespace of its own is root inside and nobody on
// the host: its ids are a block of host ids no one else has. Its files
// keep their real owners through idmapped mounts (made here by the
// daemon, with the sandbox's user namespace as their idmap): a file of
// uid 0 on disk is uid 0 inside, which is the block's first id on the
// host, and what the sandbox's root writes lands on disk as uid 0.
//
// Only the ids the mount's map lists exist inside. Ids a file has on
// disk that the map lacks (other users' files of the host root, shown
// through a narrower map than the sandbox's own) show as nobody's, and
// the sandbox's root has no power over them: capabilities in a user
// namespace reach only inodes whose owner is mapped in it.

// Extent maps Count ids from Inside (in the sandbox) to Host.
type Extent struct {
	Inside uint32 `json:"inside"`
	Host   uint32 `json:"host"`
	Count  uint32 `json:"count"`
}

// IDMap is a sandbox's user namespace: its uid and gid maps.
type IDMap struct {
	UIDs []Extent `json:"uids"`
	GIDs []Extent `json:"gids"`
}

// maxExtents is the kernel's bound on the lines of a uid_map (340 since
// Linux 4.15).
const maxExtents = 340

// HasUID and HasGID report whether id exists inside the sandbox.
func (m *IDMap) HasUID(id uint32) bool { return has(m.UIDs, id) }

// HasGID: see HasUID.
func (m *IDMap) HasGID(id uint32) bool { return has(m.GIDs, id) }

func has(es []Extent, id uint32) bool {
	for _, e := range es {
		if id >= e.Inside && id-e.Inside < e.Count {
			return true
		}
	}
	return false
}

// HostRange is the lowest and highest host id the map uses.
func (m *IDMap) HostRange() (lo, hi uint32) {
	lo = ^uint32(0)
	for _, e := range slices.Concat(m.UIDs, m.GIDs) {
		lo, hi = min(lo, e.Host), max(hi, e.Host+e.Count-1)
	}
	return lo, hi
}

// RootUID is the host uid of the sandbox's root.
func (m *IDMap) RootUID() uint32 {
	for _, e := range m.UIDs {
		if e.Inside == 0 && e.Count > 0 {
			return e.Host
		}
	}
	return 0
}

// RootGID is the host gid of the sandbox's root group.
func (m *IDMap) RootGID() uint32 {
	for _, e := range m.GIDs {
		if e.Inside == 0 && e.Count > 0 {
			return e.Host
		}
	}
	return 0
}

// Validate checks the map is one the kernel takes and that gives the
// sandbox a root: extents within the kernel's bound, none overlapping
// another inside or on the host, and inside uid and gid 0 mapped.
func (m *IDMap) Validate() error {
	for _, side := range []struct {
		name string
		es   []Extent
	}{{"uid", m.UIDs}, {"gid", m.GIDs}} {
		if len(side.es) == 0 || len(side.es) > maxExtents {
			return fmt.Errorf("the %s map has %d extents; 1 to %d", side.name, len(side.es), maxExtents)
		}
		if !has(side.es, 0) {
			return fmt.Errorf("the %s map has no root (inside id 0)", side.name)
		}
		for i, a := range side.es {
			if a.Count == 0 || a.Inside+a.Count < a.Inside || a.Host+a.Count < a.Host {
				return fmt.Errorf("the %s map's extent %d (%d %d %d) is empty or wraps", side.name, i, a.Inside, a.Host, a.Count)
			}
			for _, b := range side.es[i+1:] {
				if overlap(a.Inside, a.Count, b.Inside, b.Count) || overlap(a.Host, a.Count, b.Host, b.Count) {
					return fmt.Errorf("the %s map's extents (%d %d %d) and (%d %d %d) overlap", side.name,
						a.Inside, a.Host, a.Count, b.Inside, b.Host, b.Count)
				}
			}
		}
	}
	return nil
}

func overlap(a, n, b, m uint32) bool { return a < b+m && b < a+n }

func sysMaps(es []Extent) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(es))
	for i, e := range es {
		out[i] = syscall.SysProcIDMap{ContainerID: int(e.Inside), HostID: int(e.Host), Size: int(e.Count)}
	}
	return out
}

// IdmapMounts makes the mounts of a launched init in a user namespace:
// an idmapped clone of each of lowers (read-only), of layer and of
// project (read-only if projectRO), each without access times (reading
// a file must not change it, or the sandbox's diff would show it).
//
// Two maps, two jobs. The layer, which holds only what the sandbox
// wrote, and the project, the sandbox's private copy of files its
// caller was granted, are idmapped to the init's namespace: every file
// of the copy shows its real owner (a service's, another user's), so
// root inside may change any of them and a service inside runs as its
// own account on its own files. The host root's layers are idmapped to
// the narrower mapping of shown, another namespace that maps a subset
// of the init's ids to the same host ids (root and the sandbox's owner,
// say): a file whose owner or group it lacks shows as nobody's, and no
// capability of the sandbox reaches it, though the sandbox's own
// processes may be of that id (a system account, for a package it
// installs) and own what they write.
//
// cache ("": none), the owner's cache volume, is idmapped like the host
// root's layers, read-write, without set-id or device files. It is a
// convenience: where it cannot be cloned, Mounts.CacheErr says why and
// the rest stands.
func (i *Init) IdmapMounts(argv []string, shown *IDMap, lowers []string, layer, project string, projectRO bool, cache string) (_ *Mounts, err error) {
	userns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", i.PID))
	if err != nil {
		return nil, fmt.Errorf("opening the user namespace of the sandbox's init: %w", err)
	}
	defer userns.Close()
	narrow, err := UserNamespace(argv, shown)
	if err != nil {
		return nil, err
	}
	defer narrow.Close()
	m := &Mounts{}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	for _, l := range lowers {
		f, err := IdmappedClone(l, int(narrow.Fd()), unix.MOUNT_ATTR_RDONLY)
		if err != nil {
			return nil, err
		}
		m.Lowers = append(m.Lowers, f)
	}
	if m.Layer, err = IdmappedClone(layer, int(userns.Fd()), unix.MOUNT_ATTR_NOATIME); err != nil {
		return nil, err
	}
	attr := uint64(unix.MOUNT_ATTR_NOATIME)
	if projectRO {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	if m.Project, err = IdmappedClone(project, int(userns.Fd()), attr); err != nil {
		return nil, err
	}
	if cache != "" {
		m.Cache, m.CacheErr = IdmappedClone(cache, int(narrow.Fd()), unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	}
	return m, nil
}

// UserNamespace makes a user namespace of ids and returns a descriptor of
// it, which keeps it: the namespace of a throw-away init (argv, as for
// Launch, which waits for a spec that never comes), killed and reaped
// once its namespace is open. Mounts are idmapped to it; nothing runs in
// it.
func UserNamespace(argv []string, ids *IDMap) (*os.File, error) {
	i, err := launch(argv, 0, ids)
	if err != nil {
		return nil, fmt.Errorf("making a user namespace: %w", err)
	}
	defer func() {
		i.Kill()
		var ws unix.WaitStatus
		_, _ = unix.Wait4(i.PID, &ws, 0, nil)
	}()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", i.PID))
	if err != nil {
		return nil, fmt.Errorf("making a user namespace: %w", err)
	}
	return f, nil
}

// ErrNoIdmap: a path's filesystem (or the kernel) cannot make idmapped
// mounts.
var ErrNoIdmap = errors.New("cannot be idmapped")

// IdmappedClone clones the mount at path (that mount alone, not what is
// mounted below it) detached, idmapped through user namespace userns,
// with attr (MOUNT_ATTR_RDONLY, ...) set.
func IdmappedClone(path string, userns int, attr uint64) (*os.File, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("cloning the mount of %s: the kernel has no open_tree (5.2+): %w", path, ErrNoIdmap)
		}
		return nil, fmt.Errorf("cloning the mount of %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	set := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | attr, Userns_fd: uint64(userns)}
	if attr&unix.MOUNT_ATTR__ATIME != 0 {
		set.Attr_clr = unix.MOUNT_ATTR__ATIME // the kernel wants the old atime mode cleared with a new one
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, set); err != nil {
		f.Close()
		var fs unix.Statfs_t
		_ = unix.Statfs(path, &fs)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("idmapping the mount of %s (filesystem type %#x): %w: %w", path, fs.Type, ErrNoIdmap, err)
		}
		return nil, fmt.Errorf("idmapping the mount of %s: %w", path, err)
	}
	return f, nil
}

// ProbeIdmap reports whether each path's mount can be idmapped, to a
// user namespace of ids (made for it, as UserNamespace makes one): nil
// where it can, an error wrapping ErrNoIdmap where the filesystem cannot.
func ProbeIdmap(argv []string, ids *IDMap, paths ...string) ([]error, error) {
	userns, err := UserNamespace(argv, ids)
	if err != nil {
		return nil, fmt.Errorf("probing idmapped mounts: %w", err)
	}
	defer userns.Close()
	errs := make([]error, len(paths))
	for k, p := range paths {
		f, err := IdmappedClone(p, int(userns.Fd()), unix.MOUNT_ATTR_RDONLY)
		if err == nil {
			f.Close()
		}
		errs[k] = err
	}
	return errs, nil
}

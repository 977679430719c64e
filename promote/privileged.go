package promote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// ErrPrivileged: a change would put in the target a file that carries
// privilege on the host: a set-user-id or set-group-id file, a device
// node, or a file capability. A sandbox's root may make such files in its
// own tree; promoting them into a project that host users run from would
// hand them that privilege. Refused unless an admin allows it.
var ErrPrivileged = errors.New("privileged files")

// capabilityXattr is where the kernel keeps a file's capabilities.
const capabilityXattr = "security.capability"

// PrivilegedPath is a path of a change set that carries privilege, and
// why.
type PrivilegedPath struct {
	Path string
	Why  string // "setuid", "setgid", "setuid, setgid", "character device", "block device", "file capabilities"
}

func (p PrivilegedPath) String() string { return p.Path + " (" + p.Why + ")" }

// PrivilegedError lists every privileged path of a change set; it wraps
// ErrPrivileged.
type PrivilegedError struct{ Paths []PrivilegedPath }

func (e *PrivilegedError) Error() string {
	parts := make([]string, len(e.Paths))
	for i, p := range e.Paths {
		parts[i] = p.String()
	}
	return fmt.Sprintf("the change set would put %d privileged files in the target: %s: %v",
		len(e.Paths), strings.Join(parts, ", "), ErrPrivileged)
}

func (e *PrivilegedError) Unwrap() error { return ErrPrivileged }

// Privileged lists the paths that Apply of changes from the tree at src
// would make or change into privileged files (set-id, devices, file
// capabilities), walking the whole tree of a renamed directory. src is
// the read-only snapshot the changes were listed against, so what is read
// here is what Apply would write. Paths are read as Apply reads them:
// beneath src, through no symlink.
//
// With base (the tree the changes were listed from; "" for none), a path
// the change set makes root's is privileged too: owned by uid or gid 0 in
// src, and not in base (or new). Root in a sandbox's user namespace may
// give its files to root; a promoter other than root may not give them
// to the host's (a root-owned tree is one root's tools trust).
func Privileged(ctx context.Context, changes []cowfs.Change, src, base string) ([]PrivilegedPath, error) {
	return privileged(ctx, changes, src, base, nil)
}

// Promoter is who promotes, where it is not root: its uid and groups
// (primary and supplementary).
type Promoter struct {
	UID  uint32
	GIDs []uint32
}

// PrivilegedFor is Privileged for a promoter other than root (by),
// against base (which it needs): a path the change set gives to anyone
// but by is privileged too, as by could not do it on the host. That is a
// path owned in src by a uid other than by's, or by a group by is not in
// (nor the group a set-gid parent directory passes on as the host's
// would: passesGroup), and new or given that owner; and a directory made
// set-gid, of such a group, where the host's is not. Root in a sandbox's user namespace may give its copy's
// files to any id of its block (www-data, root, another user); an
// unprivileged promoter must not have the daemon do it on the host for
// it. A file that keeps its owner (another's, edited) is not named.
func PrivilegedFor(ctx context.Context, changes []cowfs.Change, src, base string, by Promoter) ([]PrivilegedPath, error) {
	if base == "" {
		return nil, fmt.Errorf("looking for privileged files: a promoter other than root (uid %d) is checked against the base, and none was given", by.UID)
	}
	return privileged(ctx, changes, src, base, &by)
}

func privileged(ctx context.Context, changes []cowfs.Change, src, base string, by *Promoter) ([]PrivilegedPath, error) {
	root, err := unix.Open(src, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("looking for privileged files: opening the source %s: %w", src, err)
	}
	defer unix.Close(root)
	w := walker{src: root, base: -1, by: by, passes: map[passKey]bool{}}
	if base != "" {
		if w.base, err = unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return nil, fmt.Errorf("looking for privileged files: opening the base %s: %w", base, err)
		}
		defer unix.Close(w.base)
	}
	var found []PrivilegedPath
	seen := map[string]bool{}
	for _, c := range changes {
		if err := ctx.Err(); err != nil {
			return found, err
		}
		p, tree := c.Path, false
		switch c.Kind {
		case cowfs.Deleted:
			continue
		case cowfs.Renamed:
			p, tree = c.NewPath, c.Type == cowfs.TypeDir
		}
		if seen[p] || checkRel(p) != nil {
			continue // Apply refuses such a path itself
		}
		seen[p] = true
		dir, err := openDir(root, path.Dir(p), unix.O_PATH)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return found, fmt.Errorf("looking for privileged files: %s: %w", p, err)
		}
		found, err = w.privilegedAt(dir, path.Base(p), p, tree, found)
		unix.Close(dir)
		if err != nil {
			return found, fmt.Errorf("looking for privileged files: %s: %w", p, err)
		}
	}
	return found, nil
}

// walker holds what privilegedAt compares with: the source's root, the
// base's root (-1: none), and the promoter other than root (nil: only
// what is given to root is named); passes keeps passesGroup's answers.
type walker struct {
	src, base int
	by        *Promoter
	passes    map[passKey]bool
}

type passKey struct {
	dir string
	gid uint32
}

// privilegedAt adds name in dir (shown as shown) if it is privileged,
// and with tree whatever below it is.
func (w walker) privilegedAt(dir int, name, shown string, tree bool, found []PrivilegedPath) ([]PrivilegedPath, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return found, nil
		}
		return found, err
	}
	if why := privilegedMode(st.Mode); why != "" {
		found = append(found, PrivilegedPath{Path: shown, Why: why})
	}
	why, err := w.givenAway(shown, st)
	if err != nil {
		return found, err
	}
	if why != "" {
		found = append(found, PrivilegedPath{Path: shown, Why: why})
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		has, err := hasCapability(dir, name)
		if err != nil {
			return found, err
		}
		if has {
			found = append(found, PrivilegedPath{Path: shown, Why: "file capabilities"})
		}
	case unix.S_IFDIR:
		if !tree {
			return found, nil
		}
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return found, err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		names, err := f.Readdirnames(-1)
		if err != nil {
			return found, err
		}
		for _, n := range names {
			if found, err = w.privilegedAt(fd, n, shown+"/"+n, true, found); err != nil {
				return found, err
			}
		}
	}
	return found, nil
}

// givenAway says how the change set gave path (st in the source) to an
// owner the promoter may not give files to, "" if
// it did not: one other than the promoter (w.by; without one: root), new
// with it or given it since the base.
func (w walker) givenAway(path string, st unix.Stat_t) (string, error) {
	if w.base < 0 {
		return "", nil
	}
	uidOK := func(uid uint32) bool { return uid != 0 }
	gidOK := func(gid uint32) bool { return gid != 0 }
	if w.by != nil {
		by := w.by
		uidOK = func(uid uint32) bool { return uid == by.UID }
		gidOK = func(gid uint32) bool { return slices.Contains(by.GIDs, gid) }
		if !gidOK(st.Gid) {
			// A set-gid directory passes its group on to what is made in
			// it, where the host's would.
			passed, err := w.passesGroup(pathDir(path), st.Gid)
			if err != nil {
				return "", err
			}
			if passed {
				gidOK = func(uint32) bool { return true }
			} else if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&unix.S_ISGID != 0 {
				if passed, err = w.passesGroup(path, st.Gid); err != nil {
					return "", err
				}
				if !passed {
					// The kernel clears the bit when an owner outside
					// the group sets it; promoted, the directory would
					// pass that group on to what the promoter makes.
					return fmt.Sprintf("made set-gid, of group %s, not the promoter's (uid %d)", groupName(st.Gid), by.UID), nil
				}
			}
		}
	}
	if uidOK(st.Uid) && gidOK(st.Gid) && w.by == nil {
		return "", nil
	}
	was, found, err := statBeneath(w.base, path)
	if err != nil {
		return "", err
	}
	isNew := !found
	not := ""
	if w.by != nil {
		not = fmt.Sprintf(", not the promoter's (uid %d)", w.by.UID)
	}
	switch {
	case !uidOK(st.Uid) && isNew:
		return "new, owned by " + userName(st.Uid) + not, nil
	case !gidOK(st.Gid) && isNew:
		return "new, of group " + groupName(st.Gid) + not, nil
	case !uidOK(st.Uid) && was.Uid != st.Uid:
		return fmt.Sprintf("given to %s (was uid %d)%s", userName(st.Uid), was.Uid, not), nil
	case !gidOK(st.Gid) && was.Gid != st.Gid:
		return fmt.Sprintf("given to group %s (was gid %d)%s", groupName(st.Gid), was.Gid, not), nil
	case w.by != nil && !isNew && was.Uid != w.by.UID:
		return w.changedAnothers(path, st, was, uidOK(st.Uid) && gidOK(st.Gid))
	}
	return "", nil
}

// changedAnothers says how the change set changed a path of another's
// (was in the base, st in the source) as the promoter could not on the
// host ("" if it did not): its owner or group, unless the promoter may
// replace the entry there with its own (own: st is the promoter's, of
// one of its groups, and the base's directory lets it); or its mode. A
// sandbox's root may chown and chmod any file of its copy; promoted, a
// file of root's made the promoter's, or made writable to it, would be
// its to change on the host with no sandbox and no approval.
func (w walker) changedAnothers(p string, st, was unix.Stat_t, own bool) (string, error) {
	if st.Uid != was.Uid || st.Gid != was.Gid {
		if own {
			ok, err := w.mayReplace(pathDir(p))
			if err != nil || ok {
				return "", err
			}
		}
		how := "taken from " + userName(was.Uid)
		if st.Uid == was.Uid {
			how = "its group changed, " + userName(was.Uid) + "'s"
		}
		return fmt.Sprintf("%s (was %d:%d, now %d:%d), not the promoter's (uid %d) to change", how, was.Uid, was.Gid, st.Uid, st.Gid, w.by.UID), nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Mode&0o7777 != was.Mode&0o7777 {
		return fmt.Sprintf("mode of %s's changed from %04o to %04o, not the promoter's (uid %d) to change", userName(was.Uid), was.Mode&0o7777, st.Mode&0o7777, w.by.UID), nil
	}
	return "", nil
}

// mayReplace says whether the promoter could replace an entry of
// another's in directory dir (a change set's path) on the host by one of
// its own, as sed -i does: the base's dir is one it may write and
// search, and not sticky unless its own. (An ACL that grants more is not
// read: such a replacement is then named, for an admin to allow.)
func (w walker) mayReplace(dir string) (bool, error) {
	st, found, err := statBeneath(w.base, dir)
	if err != nil || !found || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, err
	}
	bits := st.Mode & 0o7
	switch {
	case st.Uid == w.by.UID:
		bits = st.Mode >> 6 & 0o7
	case slices.Contains(w.by.GIDs, st.Gid):
		bits = st.Mode >> 3 & 0o7
	}
	if bits&0o3 != 0o3 {
		return false, nil
	}
	return st.Mode&unix.S_ISVTX == 0 || st.Uid == w.by.UID, nil
}

// passesGroup says whether directory dir of the source (a change set's
// path, "." its top) passes group gid on to what is made in it as the
// host's would: set-gid, of that group, in the source and so in the base
// too; or not in the base at all (new) and made in a directory that
// passes it on, as mkdir in a set-gid directory makes one. Root in a
// sandbox's user namespace may make any directory set-gid, of any group,
// and the top directory's own metadata is never in a change set; on the
// host the kernel clears the bit for an owner outside the group, so such
// a directory passes on nothing for the promoter.
func (w walker) passesGroup(dir string, gid uint32) (bool, error) {
	key := passKey{dir, gid}
	if ok, done := w.passes[key]; done {
		return ok, nil
	}
	passes := func(st *unix.Stat_t) bool {
		return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&unix.S_ISGID != 0 && st.Gid == gid
	}
	src, found, err := statBeneath(w.src, dir)
	if err != nil || !found || !passes(&src) {
		return false, err
	}
	base, found, err := statBeneath(w.base, dir)
	var ok bool
	switch {
	case err != nil:
		return false, err
	case found:
		ok = passes(&base)
	case dir != ".":
		if ok, err = w.passesGroup(pathDir(dir), gid); err != nil {
			return false, err
		}
	}
	w.passes[key] = ok
	return ok, nil
}

// statBeneath is the stat of p in the tree at root, resolved beneath it
// through no symlink (found false where there is none, or a symlink or a
// file is on its way).
func statBeneath(root int, p string) (st unix.Stat_t, found bool, err error) {
	fd, err := unix.Openat2(root, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
		return st, false, nil
	case err != nil:
		return st, false, fmt.Errorf("opening %s: %w", p, err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, false, fmt.Errorf("stat of %s: %w", p, err)
	}
	return st, true, nil
}

// pathDir is the directory of a change set's path, "." for the top's
// entries.
func pathDir(p string) string { return path.Dir(p) }

func userName(uid uint32) string {
	if uid == 0 {
		return "root"
	}
	return fmt.Sprintf("uid %d", uid)
}

func groupName(gid uint32) string {
	if gid == 0 {
		return "root"
	}
	return fmt.Sprintf("gid %d", gid)
}

// privilegedMode says why a file of mode is privileged ("" if it is not):
// set-id bits on a regular file, or a device node. A directory's set-gid
// bit only passes its group on to new files, and is no privilege.
func privilegedMode(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		switch {
		case mode&unix.S_ISUID != 0 && mode&unix.S_ISGID != 0:
			return "setuid, setgid"
		case mode&unix.S_ISUID != 0:
			return "setuid"
		case mode&unix.S_ISGID != 0:
			return "setgid"
		}
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return ""
}

// hasCapability says whether regular file name in dir has file
// capabilities (opened without following a link, without reading it).
func hasCapability(dir int, name string) (bool, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	_, err = unix.Fgetxattr(fd, capabilityXattr, nil)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
		return false, nil
	}
	return false, fmt.Errorf("reading its capabilities: %w", err)
}

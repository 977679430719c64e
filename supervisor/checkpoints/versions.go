package checkpoints

// A conflicting path's three versions (issue 33): the base's, the
// project's as it is now and the sandbox's, read for a caller who must
// resolve a conflict a rebase or a promotion refused.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/fsat"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/state"
	"github.com/sandboxd/sandboxd/supervisor/volname"
)

// MaxVersionBytes bounds what FileVersions reads of each version, and
// the largest file Merge merges.
const MaxVersionBytes = 1 << 20

// The kinds of a version.
const (
	KindFile       = "file"       // a regular file: its bytes are read
	KindAbsent     = "absent"     // nothing at the path (deleted, or never there)
	KindSymlink    = "symlink"    // a symlink, at the path or on the way: never followed
	KindDirectory  = "directory"  // a directory
	KindOther      = "other"      // a fifo, socket or device: never opened
	KindUnreadable = "unreadable" // a file the caller could not read on the host
)

// The versions, in the order FileVersions returns them.
const (
	WhichBase    = "base"    // the snapshot the sandbox was made from, or last rebased onto
	WhichProject = "project" // the project as it is now
	WhichSandbox = "sandbox" // the sandbox's copy as it is now
)

// Version is one version of a path.
type Version struct {
	Which     string // WhichBase, WhichProject or WhichSandbox
	Kind      string // KindFile, ...
	Size      uint64 // a file's whole size
	Binary    bool   // a file whose bytes read hold a NUL
	Truncated bool   // a file larger than what was read
	Data      []byte // a file's bytes, at most the bound asked for
	Note      string // why there is no content, for what is not a readable file
}

// FileVersions reads the three versions of path, a path relative to the
// project's top (as a conflict names it), each at most limit bytes (0 or
// more than MaxVersionBytes: MaxVersionBytes): the base's, the project's
// as it is now (a read-only snapshot taken for the call and dropped),
// and the sandbox's. Every tree is one a tenant writes: the path is
// resolved inside it, a symlink anywhere on it is named and never
// followed, and only a regular file is read, and only when the caller
// could read it on the host (as a unified diff shows).
func (c *Checkpoints) FileVersions(ctx context.Context, id, path string, limit int) (vs []Version, err error) {
	if limit <= 0 || limit > MaxVersionBytes {
		limit = MaxVersionBytes
	}
	err = c.withTrees(ctx, id, "reading the versions of "+strconv.Quote(path)+" in sandbox "+id, path, func(rel string, trees [3]string) error {
		who, err := supervisor.ActorOf(ctx)
		if err != nil {
			return err
		}
		for i, which := range []string{WhichBase, WhichProject, WhichSandbox} {
			v, err := readVersion(trees[i], rel, who, limit)
			if err != nil {
				return fmt.Errorf("the %s's version: %w", which, err)
			}
			v.Which = which
			vs = append(vs, v)
		}
		return nil
	})
	return vs, err
}

// withTrees runs fn, under sandbox id's lock, with path checked (rel)
// and the tops of the three trees: the sandbox's base, a read-only
// snapshot of its project as it is now (for the caller of ctx, as a
// rebase takes one), and the sandbox's copy.
func (c *Checkpoints) withTrees(ctx context.Context, id, what, path string, fn func(rel string, trees [3]string) error) error {
	rel, err := cleanRel(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer c.h.Lock(id)()
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return err
	}
	if !slices.Contains([]state.State{state.Ready, state.Running, state.Frozen, state.Stopped}, rec.State) {
		return fmt.Errorf("%s: it is %s: %w", what, rec.State, supervisor.ErrWrongState)
	}
	snapshotProject, err := c.h.OpenProject(ctx, rec)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	b := c.h.Backend()
	base, err := b.Get(ctx, rec.Base)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	vol, err := b.Get(ctx, rec.Volume)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	project, err := snapshotProject(ctx, volname.Diff(id, "v"+newTag()))
	if err != nil {
		return fmt.Errorf("%s: a snapshot of its project: %w", what, err)
	}
	defer func() { _ = b.Delete(context.WithoutCancel(ctx), project) }()
	if err := fn(rel, [3]string{base.Path, project.Path, vol.Path}); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// cleanRel is path as a name inside a tree: relative (to the project's
// top: an absolute path would be the sandbox's view, which differs from
// the trees'), clean, no "..".
func cleanRel(p string) (string, error) {
	switch {
	case p == "" || strings.IndexByte(p, 0) >= 0:
		return "", invalidf("the path is empty or holds a NUL byte: name a file relative to the project's top, as the conflict named it")
	case len(p) > 4096:
		return "", invalidf("a path of %d bytes, over 4096", len(p))
	case strings.HasPrefix(p, "/"):
		return "", invalidf("path %q is absolute: name the file relative to the project's top, as the conflict named it (calc.py, src/app.py)", p)
	}
	rel := path.Clean(p)
	if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", invalidf("path %q leaves the project: name a file relative to the project's top, as the conflict named it (calc.py, src/app.py)", p)
	}
	return rel, nil
}

// invalidf is a refusal of the caller's input, in its own words (the
// sentinel's "invalid sandbox options" would mislead): ErrInvalid for
// errors.Is, InvalidArgs on the bus.
func invalidf(format string, a ...any) error { return invalid(fmt.Sprintf(format, a...)) }

type invalid string

func (e invalid) Error() string { return string(e) }
func (e invalid) Unwrap() error { return supervisor.ErrInvalid }

// readVersion reads rel in the tree at top for who, at most limit bytes.
func readVersion(top, rel string, who supervisor.Actor, limit int) (Version, error) {
	root, err := unix.Open(top, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Version{}, fmt.Errorf("opening %s: %w", top, err)
	}
	defer unix.Close(root)
	// Beneath a directory who could not enter on the host, not even
	// whether there is something is told.
	if ok, err := maySearch(root, rel, who); err != nil {
		return Version{}, err
	} else if !ok {
		return Version{Kind: KindUnreadable, Note: fmt.Sprintf("beneath a directory uid %d could not enter on the host: not shown", who.UID)}, nil
	}
	fd, st, err := lookup(root, rel)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		return Version{Kind: KindAbsent, Note: "nothing at this path"}, nil
	case errors.Is(err, unix.ELOOP):
		return Version{Kind: KindSymlink, Note: "a symlink on the way to this path: not followed"}, nil
	case errors.Is(err, unix.EXDEV):
		return Version{Kind: KindOther, Note: "a mount point on the way to this path: not crossed"}, nil
	case err != nil:
		return Version{}, fmt.Errorf("opening %s: %w", rel, err)
	}
	defer unix.Close(fd)
	v := Version{Size: uint64(max(st.Size, 0))}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return Version{Kind: KindSymlink, Note: "a symlink: not followed, only regular files are read"}, nil
	case unix.S_IFDIR:
		return Version{Kind: KindDirectory, Note: "a directory"}, nil
	default:
		return Version{Kind: KindOther, Note: "not a regular file (a fifo, socket or device): not opened"}, nil
	}
	ok, err := mayRead(root, fd, rel, &st, who)
	if err != nil {
		return Version{}, err
	}
	if !ok {
		return Version{Kind: KindUnreadable, Size: v.Size, Note: fmt.Sprintf("not readable by uid %d on the host: content not shown", who.UID)}, nil
	}
	// Reopened from the descriptor: the inode looked up, whatever the
	// path names now. O_NONBLOCK: a process of the sandbox that holds a
	// lease on the file would hold the open (and the sandbox's lock) for
	// the lease's break time (45 s).
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(fd), os.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return Version{}, fmt.Errorf("opening %s: a process holds a lease on it (it is told to let go: try again): %w", rel, supervisor.ErrBusy)
	}
	if err != nil {
		return Version{}, fmt.Errorf("opening %s: %w", rel, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return Version{}, fmt.Errorf("reading %s: %w", rel, err)
	}
	if len(data) > limit {
		data, v.Truncated = data[:limit], true
	}
	v.Kind, v.Data, v.Binary = KindFile, data, bytes.IndexByte(data, 0) >= 0
	return v, nil
}

// lookup opens rel below root as an O_PATH descriptor, which reads
// nothing: no symlink is followed on the way (ELOOP) and the last one is
// opened itself; nothing outside root is reached.
func lookup(root int, rel string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := fsat.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// mayRead says whether who could read the file fd (rel below root) on
// the host: the file readable by its uid or groups, the tree's top and
// every directory on the way searchable. A file with a POSIX ACL is
// read for its owner only (its group bits are then the ACL's mask). The
// daemon and root read everything. (promote/unidiff shows a diff so.)
func mayRead(root, fd int, rel string, st *unix.Stat_t, who supervisor.Actor) (bool, error) {
	if who.Daemon != "" || who.UID == 0 {
		return true, nil
	}
	if ok, err := maySearch(root, rel, who); err != nil || !ok {
		return false, err
	}
	if !permits(st, who, fsat.PermRead) {
		return false, nil
	}
	if st.Uid != who.UID {
		_, err := unix.Getxattr("/proc/self/fd/"+strconv.Itoa(fd), "system.posix_acl_access", nil)
		switch {
		case err == nil:
			return false, nil
		case !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP):
			return false, err
		}
	}
	return true, nil
}

// permits says whether the bits of st that apply to who (its owner's,
// group's or others') grant want.
func permits(st *unix.Stat_t, who supervisor.Actor, want uint32) bool {
	return fsat.Permits(st, who.UID, who.GIDs, want)
}

// maySearch says whether who could enter the tree's top and every
// directory on the way to rel (the daemon and root may). What is not
// there, or not a directory, ends the walk: the lookup of rel tells it,
// as the host would tell who.
func maySearch(root int, rel string, who supervisor.Actor) (bool, error) {
	if who.Daemon != "" || who.UID == 0 {
		return true, nil
	}
	var top unix.Stat_t
	if err := unix.Fstat(root, &top); err != nil {
		return false, err
	}
	if !permits(&top, who, fsat.PermSearch) {
		return false, nil
	}
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		dfd, dst, err := lookup(root, strings.Join(parts[:i], "/"))
		switch {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV):
			return true, nil
		case err != nil:
			return false, err
		}
		unix.Close(dfd)
		if dst.Mode&unix.S_IFMT != unix.S_IFDIR {
			return true, nil
		}
		if !permits(&dst, who, fsat.PermSearch) {
			return false, nil
		}
	}
	return true, nil
}

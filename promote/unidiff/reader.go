package unidiff

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/fsat"
)

// Reader is whom a unified diff is written for. The daemon that writes it
// is root and could read every file of both trees; a file's content is
// shown only when Reader could read it on the host: the file readable by
// its uid or groups, and every directory above it in the tree searchable.
// Anything else is named with a line that says its content is not shown.
// Root (uid 0) reads everything.
type Reader struct {
	UID  uint32
	GIDs []uint32 // primary and supplementary
}

type readerKey struct{}

// WithReader marks ctx as a call made for r: Write, given no
// Options.Reader, shows only what r could read.
func WithReader(ctx context.Context, r Reader) context.Context {
	return context.WithValue(ctx, readerKey{}, r)
}

// readerFrom is the Reader WithReader put in ctx (nil: none, every file
// is shown).
func readerFrom(ctx context.Context) *Reader {
	if r, ok := ctx.Value(readerKey{}).(Reader); ok {
		return &r
	}
	return nil
}

// readable says whether r could read e (of tree t): e itself readable (a
// symlink's target needs no permission), the tree's root and every
// directory on the way searchable. A file with a POSIX ACL is shown to
// its owner only: its mode's group bits are then the ACL's mask, which
// does not say what a named entry grants or denies.
func (t *diffTree) readable(e *diffEntry, r *Reader) (bool, error) {
	if r == nil || r.UID == 0 {
		return true, nil
	}
	var root unix.Stat_t
	if err := unix.Fstat(t.fd, &root); err != nil {
		return false, err
	}
	if !fsat.Permits(&root, r.UID, r.GIDs, fsat.PermSearch) {
		return false, nil
	}
	parts := strings.Split(e.name, "/")
	for i := 1; i < len(parts); i++ {
		dir, err := t.lookup(strings.Join(parts[:i], "/"))
		if err != nil {
			return false, err
		}
		ok := dir.typ() == unix.S_IFDIR && fsat.Permits(&dir.st, r.UID, r.GIDs, fsat.PermSearch)
		dir.close()
		if !ok { // a symlink on the way is not followed here: not shown
			return false, nil
		}
	}
	if e.typ() == unix.S_IFLNK {
		return true, nil
	}
	if !fsat.Permits(&e.st, r.UID, r.GIDs, fsat.PermRead) {
		return false, nil
	}
	if e.st.Uid != r.UID {
		acl, err := hasACL(e.fd)
		if err != nil || acl {
			return false, err
		}
	}
	return true, nil
}

// hasACL says whether the inode of fd (an O_PATH descriptor, which
// fgetxattr refuses) has an access ACL.
func hasACL(fd int) (bool, error) {
	_, err := unix.Getxattr("/proc/self/fd/"+strconv.Itoa(fd), "system.posix_acl_access", nil)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EOPNOTSUPP):
		return false, nil
	}
	return false, err
}

// hidden returns the line that replaces the content of a change whose
// old or new file the reader could not read ("" when both are readable).
func (u *unifier) hidden(old, new *diffEntry) (string, error) {
	for _, side := range []struct {
		tree   *diffTree
		e      *diffEntry
		prefix string
	}{{u.old, old, "a/"}, {u.new, new, "b/"}} {
		if side.e == nil {
			continue
		}
		ok, err := side.tree.readable(side.e, u.reader)
		if err != nil {
			return "", err
		}
		if !ok {
			return "Content not shown: " + gitQuote(side.prefix+side.e.name) +
				" is not readable by uid " + strconv.FormatUint(uint64(u.reader.UID), 10) + "\n", nil
		}
	}
	return "", nil
}

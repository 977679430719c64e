package unidiff

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/fsat"
)

// diffTree is a root that paths are resolved in.
type diffTree struct {
	fd   int
	path string
}

func openDiffTree(path string) (*diffTree, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s to diff: %w", path, err)
	}
	return &diffTree{fd: fd, path: path}, nil
}

func (t *diffTree) close() { unix.Close(t.fd) }

// lookup opens name (a checked path) inside the tree as an O_PATH
// descriptor, which reads nothing: symlinks on the way are resolved as if
// the tree were the root, the last component is not followed.
func (t *diffTree) lookup(name string) (*diffEntry, error) {
	var fd int
	var err error
	fd, err = fsat.Openat2(t.fd, name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("opening %s in %s: %w", name, t.path, err)
	}
	e := &diffEntry{name: name, fd: fd}
	if err := unix.Fstat(fd, &e.st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat of %s in %s: %w", name, t.path, err)
	}
	return e, nil
}

// diffEntry is one side of a change: an O_PATH descriptor of the path and
// what it is.
type diffEntry struct {
	name string // as in the change list
	fd   int
	st   unix.Stat_t
}

func (e *diffEntry) close() { unix.Close(e.fd) }

func (e *diffEntry) typ() uint32 { return e.st.Mode & unix.S_IFMT }

// mode is the type and permission bits as git shows them (100644), but
// with every permission bit of a file (git keeps only the owner's x): a
// file made private is worth seeing. A symlink's is 120000.
func (e *diffEntry) mode() uint32 {
	if e.typ() == unix.S_IFLNK {
		return unix.S_IFLNK
	}
	return e.st.Mode & (unix.S_IFMT | 0o7777)
}

// typeName is the word a note names its kind with ("new directory P/",
// "deleted fifo P"): words of the diff's text, which readers and tests
// hold it to, kept here rather than shared with promote's error messages.
func (e *diffEntry) typeName() string {
	switch e.typ() {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "file of unknown kind"
}

// owner is its uid and gid as a diff shows them, "1001:1001": a change of
// owner is a change a promotion carries.
func (e *diffEntry) owner() string { return fmt.Sprintf("%d:%d", e.st.Uid, e.st.Gid) }

// shownName is the name in a note: quoted as git would, a directory's
// with a "/".
func (e *diffEntry) shownName() string {
	if e.typ() == unix.S_IFDIR {
		return gitQuote(strings.TrimSuffix(e.name, "/") + "/")
	}
	return gitQuote(e.name)
}

// contents opens what diff compares: a regular file's data, reopened for
// reading from its O_PATH descriptor (the same inode, whatever the tree
// holds now), or a symlink's target in a memory file.
func (e *diffEntry) contents() (*os.File, error) {
	if e.typ() == unix.S_IFLNK {
		target, err := fsat.Readlink(e.fd, "")
		if err != nil {
			return nil, fmt.Errorf("reading symlink %s: %w", e.name, err)
		}
		fd, err := unix.MemfdCreate("sandboxd-diff", unix.MFD_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("holding the target of %s: %w", e.name, err)
		}
		f := os.NewFile(uintptr(fd), "symlink "+e.name)
		if _, err := f.WriteString(target); err != nil {
			f.Close()
			return nil, fmt.Errorf("holding the target of %s: %w", e.name, err)
		}
		return f, nil
	}
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(e.fd), os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", e.name, err)
	}
	return f, nil
}

// hasNUL says whether f's first binaryProbe bytes hold a NUL byte.
func hasNUL(f *os.File) (bool, error) {
	buf := make([]byte, binaryProbe)
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return false, err
	}
	return bytes.IndexByte(buf[:n], 0) >= 0, nil
}

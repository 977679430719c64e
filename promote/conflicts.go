package promote

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
	"github.com/sandboxd/sandboxd/internal/fsat"
)

// Conflict is a path that a sandbox and its target both changed since the
// sandbox's base.
type Conflict struct {
	Path    string
	Sandbox cowfs.ChangeKind // what the sandbox did to it (or to a directory above it)
	Target  cowfs.ChangeKind // what the target did
}

// Conflicts lists the paths that both change sets touch: the same path,
// or a path below one the other side deleted or renamed away. What does
// not count:
//   - a directory's own entry modified, on either side: adding a file to
//     a directory changes the directory's times, and two sides adding
//     different files to one directory do not conflict;
//   - the target's metadata-only changes: a host that reads the project
//     changes access times, which is no one's edit (the sandbox's
//     metadata wins where it changed the same path).
func Conflicts(sandbox, target []cowfs.Change) []Conflict {
	type touch struct {
		kind   cowfs.ChangeKind
		gone   bool // deleted, or renamed away: what is below it goes too
		isDir  bool
		ignore bool
	}
	touches := func(changes []cowfs.Change, isTarget bool) map[string]touch {
		m := map[string]touch{}
		for _, c := range changes {
			t := touch{kind: c.Kind, isDir: c.Type == cowfs.TypeDir}
			t.ignore = t.isDir && (c.Kind == cowfs.Modified || c.Kind == cowfs.Metadata) ||
				isTarget && c.Kind == cowfs.Metadata
			switch c.Kind {
			case cowfs.Deleted:
				t.gone = true
			case cowfs.Renamed:
				m[c.Path] = touch{kind: c.Kind, gone: true, isDir: t.isDir}
				m[c.NewPath] = touch{kind: c.Kind, isDir: t.isDir}
				continue
			}
			if old, ok := m[c.Path]; ok && !old.ignore {
				continue // keep the first real change of a path
			}
			m[c.Path] = t
		}
		return m
	}
	sb, tg := touches(sandbox, false), touches(target, true)
	var out []Conflict
	seen := map[string]bool{}
	add := func(p string, s, t cowfs.ChangeKind) {
		if !seen[p] {
			seen[p] = true
			out = append(out, Conflict{Path: p, Sandbox: s, Target: t})
		}
	}
	for p, s := range sb {
		if s.ignore {
			continue
		}
		if t, ok := tg[p]; ok && !t.ignore {
			add(p, s.kind, t.kind)
			continue
		}
		// A path below one the target removed, or above what it changed
		// when the sandbox removed this one.
		for q := parent(p); q != ""; q = parent(q) {
			if t, ok := tg[q]; ok && t.gone {
				add(p, s.kind, t.kind)
				break
			}
		}
	}
	for p, t := range tg {
		if t.ignore || seen[p] {
			continue
		}
		for q := parent(p); q != ""; q = parent(q) {
			if s, ok := sb[q]; ok && s.gone {
				add(p, s.kind, t.kind)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b Conflict) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// parent is p's directory, "" at the top.
func parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// Same reports whether path is the same in the trees at a and b: absent
// from both, or of one type, mode and owner, with the same content (a
// file's bytes, a link's target). Both sides making the same change is no
// conflict: a sandbox promoted once and promoted again after more work
// finds its own first change in the project.
func Same(a, b, path string) (bool, error) {
	if err := checkRel(path); err != nil {
		return false, err
	}
	fa, sa, errA := openEntry(a, path)
	fb, sb, errB := openEntry(b, path)
	defer closeFD(fa)
	defer closeFD(fb)
	switch {
	case errors.Is(errA, unix.ENOENT) && errors.Is(errB, unix.ENOENT):
		return true, nil
	case errors.Is(errA, unix.ENOENT) || errors.Is(errB, unix.ENOENT):
		return false, nil
	case errA != nil:
		return false, errA
	case errB != nil:
		return false, errB
	}
	if sa.Mode != sb.Mode || sa.Uid != sb.Uid || sa.Gid != sb.Gid || sa.Size != sb.Size || sa.Rdev != sb.Rdev {
		return false, nil
	}
	switch sa.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return sameContent(fa, fb)
	case unix.S_IFLNK:
		ta, err := fsat.Readlink(fa, "")
		if err != nil {
			return false, err
		}
		tb, err := fsat.Readlink(fb, "")
		return err == nil && ta == tb, err
	}
	return true, nil
}

// openEntry opens path below root without following any symlink (a
// symlink itself is opened as O_PATH).
func openEntry(root, path string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, err
	}
	defer unix.Close(rootFD)
	fd, err := unix.Openat2(rootFD, path, &unix.OpenHow{
		Flags:   uint64(unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: resolve,
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

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// sameContent compares two regular files (O_PATH fds) byte for byte.
func sameContent(a, b int) (bool, error) {
	ra, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", a))
	if err != nil {
		return false, err
	}
	defer ra.Close()
	rb, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", b))
	if err != nil {
		return false, err
	}
	defer rb.Close()
	bufA, bufB := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, errA := io.ReadFull(ra, bufA)
		nb, errB := io.ReadFull(rb, bufB)
		if na != nb || !bytes.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		endA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		endB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		if endA || endB {
			return endA && endB, nil
		}
		if errA != nil {
			return false, errA
		}
		if errB != nil {
			return false, errB
		}
	}
}

// RealConflicts are the paths of conflicts whose version in target (a
// tree) is neither one of versions' (the sandbox's own: both sides made
// the same change) nor base's (the target's change was undone since: a
// failed promotion put the file back).
func RealConflicts(conflicts []Conflict, target, base string, versions ...string) ([]string, error) {
	var paths []string
	all := append(versions[:len(versions):len(versions)], base)
	for _, c := range conflicts {
		same := false
		for _, v := range all {
			var err error
			if same, err = Same(target, v, c.Path); err != nil {
				return nil, fmt.Errorf("comparing %s in the project and the sandbox: %w", c.Path, err)
			}
			if same {
				break
			}
		}
		if !same {
			paths = append(paths, c.Path)
		}
	}
	return paths, nil
}

package unidiff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// Options bound a unified diff.
type Options struct {
	// Context is the number of lines of context around a hunk (0: 3, as
	// git and diff show).
	Context int
	// MaxBytes stops the diff after this many bytes, at the end of the
	// last whole line that fits, with a closing line saying it was cut
	// (0: no limit).
	MaxBytes int64
	// Reader is whom the diff is for: a file it could not read is named,
	// its content not shown. nil: the Reader WithReader put in the
	// context, if any; else every file is shown.
	Reader *Reader
}

const (
	// binaryProbe is how much of a file is looked at for a NUL byte, which
	// makes it binary (git's rule).
	binaryProbe = 8000
	// maxTextDiff is the size above which a file is not diffed as text.
	maxTextDiff = 8 << 20
)

// diffProgram is GNU diff, which writes the hunks.
var diffProgram = "diff"

// Write writes, for each change in the order given, what `git diff`
// would show of it:
//
//   - a text file: a "diff --git" header and unified hunks made by
//     `diff -u` (added files against /dev/null, deleted ones the reverse),
//     with "new file mode", "deleted file mode", "old mode"/"new mode" and
//     "rename from"/"rename to" lines as git writes them;
//   - a binary file (a NUL byte in its first 8000 bytes): "Binary files
//     a/P and b/P differ"; a file over 8 MiB: "File P is too large to diff
//     (N bytes)";
//   - a symlink: its target as a line of text without a newline (mode
//     120000);
//   - a directory, fifo, socket or device: a line naming it ("new
//     directory P/", "deleted fifo P", "renamed directory P/ to Q/", "mode
//     of directory P/ changed from 0755 to 0700"); such files are never
//     opened.
//
// Owners, which git does not show but a promotion carries, are named
// where they change ("old owner 1001:1001"/"new owner 0:0" after a file's
// mode lines, "owner of directory P/ changed from 1001:1001 to 0:0"), and
// a new path's where it is not its directory's ("new file owner 0:0",
// "owner of new directory P/ is 33:33"): what a sandbox's root gave away
// is seen by whoever approves the promotion. git apply passes such lines
// over.
//
// A change whose content, mode and owner turn out to be the same writes
// nothing.
// Paths with special characters are quoted as git quotes them.
//
// Old files are read under oldRoot and new ones under newRoot. Both are
// snapshots of an untrusted sandbox: every path is resolved by the kernel
// inside its root (openat2 with RESOLVE_IN_ROOT, so a symlink to /etc
// means the tree's own etc), its last component is never followed, and
// files reach diff as inherited descriptors, never by name. A path with a
// ".." component, an absolute path or an unclean one fails the whole diff
// before anything is written, with ErrUnsafePath.
//
// A Modified or Metadata change of a path that a Renamed change in the
// list moved to is shown by that rename; one below a renamed directory is
// compared with its old place.
//
// Errors wrap what failed and name the change's path. When ctx ends, the
// running diff is killed and ctx's error returned.
func Write(ctx context.Context, w io.Writer, changes []cowfs.Change, oldRoot, newRoot string, o Options) error {
	for _, c := range changes {
		if err := checkChange(c); err != nil {
			return err
		}
	}
	oldTree, err := openDiffTree(oldRoot)
	if err != nil {
		return err
	}
	defer oldTree.close()
	newTree, err := openDiffTree(newRoot)
	if err != nil {
		return err
	}
	defer newTree.close()

	u := &unifier{
		old:     oldTree,
		new:     newTree,
		out:     &cutWriter{w: w, max: o.MaxBytes},
		context: o.Context,
		reader:  o.Reader,
		renamed: map[string]string{},
		deleted: map[string]bool{},
	}
	if u.context <= 0 {
		u.context = 3
	}
	if u.reader == nil {
		u.reader = readerFrom(ctx)
	}
	for _, c := range changes {
		switch c.Kind {
		case cowfs.Renamed:
			u.renamed[c.NewPath] = c.Path
		case cowfs.Deleted:
			u.deleted[c.Path] = true
		}
	}
	for _, c := range changes {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("writing the diff: %w", err)
		}
		err := u.change(ctx, c)
		if u.out.cut {
			return nil
		}
		if u.out.err != nil {
			return fmt.Errorf("writing the diff: %w", u.out.err)
		}
		if err != nil {
			if c.Kind == cowfs.Renamed {
				return fmt.Errorf("diffing %s renamed to %s: %w", c.Path, c.NewPath, err)
			}
			return fmt.Errorf("diffing %s: %w", c.Path, err)
		}
	}
	if err := u.out.flush(); err != nil {
		return fmt.Errorf("writing the diff: %w", err)
	}
	return nil
}

// checkChange refuses a change Write cannot show safely.
func checkChange(c cowfs.Change) error {
	if err := checkPath(c.Path); err != nil {
		return err
	}
	switch c.Kind {
	case cowfs.Renamed:
		return checkPath(c.NewPath)
	case cowfs.Added, cowfs.Modified, cowfs.Deleted, cowfs.Metadata:
		return nil
	}
	return fmt.Errorf("change of %s: unknown kind %q", c.Path, c.Kind)
}

// checkPath refuses a path that is not clean, relative and inside
// its tree. "." is the root itself.
func checkPath(p string) error {
	switch {
	case p == ".":
		return nil
	case p == "":
		return fmt.Errorf("an empty path in the change list: %w", ErrUnsafePath)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is absolute: %w", p, ErrUnsafePath)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("path %q holds a NUL byte: %w", p, ErrUnsafePath)
	}
	for _, part := range strings.Split(p, "/") {
		switch part {
		case "..":
			return fmt.Errorf("path %q has a \"..\" component: %w", p, ErrUnsafePath)
		case "", ".":
			return fmt.Errorf("path %q is not clean: %w", p, ErrUnsafePath)
		}
	}
	return nil
}

// unifier writes the diff of one change list.
type unifier struct {
	old, new *diffTree
	out      *cutWriter
	context  int
	reader   *Reader // nil: every file is shown
	// renamed maps each rename's new path to its old one; deleted holds
	// the paths of Deleted changes.
	renamed map[string]string
	deleted map[string]bool
}

// change writes the diff of c.
func (u *unifier) change(ctx context.Context, c cowfs.Change) error {
	var oldName, newName string
	switch c.Kind {
	case cowfs.Added:
		newName = c.Path
	case cowfs.Deleted:
		oldName = c.Path
	case cowfs.Renamed:
		oldName, newName = c.Path, c.NewPath
	default: // Modified, Metadata
		if _, ok := u.renamed[c.Path]; ok {
			// The rename's diff shows the content and mode. What the
			// rename replaced, if anything, is gone: show it as deleted
			// unless a Deleted change does.
			if u.deleted[c.Path] {
				return nil
			}
			old, err := u.old.lookup(c.Path)
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			if err != nil {
				return err
			}
			defer old.close()
			return u.pair(ctx, cowfs.Deleted, old, nil)
		}
		oldName, newName = u.oldName(c.Path), c.Path
	}
	var old, new *diffEntry
	var err error
	if oldName != "" {
		if old, err = u.old.lookup(oldName); err != nil {
			return err
		}
		defer old.close()
	}
	if newName != "" {
		if new, err = u.new.lookup(newName); err != nil {
			return err
		}
		defer new.close()
	}
	return u.pair(ctx, c.Kind, old, new)
}

// oldName is where path p of the new tree was in the old one, through
// the renames of its directories in the change list.
func (u *unifier) oldName(p string) string {
	for dir := p; ; {
		i := strings.LastIndexByte(dir, '/')
		if i < 0 {
			return p
		}
		dir = dir[:i]
		if from, ok := u.renamed[dir]; ok {
			return from + p[len(dir):]
		}
	}
}

// pair writes the diff from old to new (either nil for an added or
// deleted path).
func (u *unifier) pair(ctx context.Context, kind cowfs.ChangeKind, old, new *diffEntry) error {
	if old != nil && new != nil && old.typ() != new.typ() {
		// As git shows a type change: the old one deleted, the new added.
		if err := u.pair(ctx, cowfs.Deleted, old, nil); err != nil {
			return err
		}
		return u.pair(ctx, cowfs.Added, nil, new)
	}
	e := new
	if e == nil {
		e = old
	}
	switch e.typ() {
	case unix.S_IFREG, unix.S_IFLNK:
		return u.content(ctx, kind, old, new)
	}
	return u.note(old, new)
}

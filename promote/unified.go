package promote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

// UnifiedOptions bound a unified diff.
type UnifiedOptions struct {
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

// Unified writes, for each change in the order given, what `git diff`
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
// A change whose content and mode turn out to be the same writes nothing.
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
func Unified(ctx context.Context, w io.Writer, changes []cowfs.Change, oldRoot, newRoot string, o UnifiedOptions) error {
	for _, c := range changes {
		if err := checkUnifiedChange(c); err != nil {
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

// checkUnifiedChange refuses a change Unified cannot show safely.
func checkUnifiedChange(c cowfs.Change) error {
	if err := checkUnifiedPath(c.Path); err != nil {
		return err
	}
	switch c.Kind {
	case cowfs.Renamed:
		return checkUnifiedPath(c.NewPath)
	case cowfs.Added, cowfs.Modified, cowfs.Deleted, cowfs.Metadata:
		return nil
	}
	return fmt.Errorf("change of %s: unknown kind %q", c.Path, c.Kind)
}

// checkUnifiedPath refuses a path that is not clean, relative and inside
// its tree. "." is the root itself.
func checkUnifiedPath(p string) error {
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

// content writes git's diff of a regular file or a symlink.
func (u *unifier) content(ctx context.Context, kind cowfs.ChangeKind, old, new *diffEntry) error {
	aName, bName := bothNames(old, new)
	var h strings.Builder
	fmt.Fprintf(&h, "diff --git %s %s\n", gitQuote("a/"+aName), gitQuote("b/"+bName))
	switch {
	case old == nil:
		fmt.Fprintf(&h, "new file mode %06o\n", new.mode())
	case new == nil:
		fmt.Fprintf(&h, "deleted file mode %06o\n", old.mode())
	case old.mode() != new.mode():
		fmt.Fprintf(&h, "old mode %06o\nnew mode %06o\n", old.mode(), new.mode())
	}
	if aName != bName {
		fmt.Fprintf(&h, "rename from %s\nrename to %s\n", gitQuote(aName), gitQuote(bName))
	}
	hw := &headerWriter{w: u.out, header: []byte(h.String())}
	if strings.Count(h.String(), "\n") > 1 {
		// Something to say even if the content is the same.
		if err := hw.flush(); err != nil {
			return err
		}
	}
	if kind == cowfs.Metadata && old != nil && new != nil {
		return nil
	}
	// Before anything of the files is read: not even whether they differ.
	if line, err := u.hidden(old, new); err != nil || line != "" {
		if err == nil {
			if err = hw.flush(); err == nil {
				_, err = io.WriteString(u.out, line)
			}
		}
		return err
	}

	var files [2]*os.File
	var size int64
	binary := false
	for i, e := range []*diffEntry{old, new} {
		if e == nil {
			continue
		}
		f, err := e.contents()
		if err != nil {
			return err
		}
		defer f.Close()
		files[i] = f
		size = max(size, e.st.Size)
		if e.typ() == unix.S_IFREG && e.st.Size <= maxTextDiff && !binary {
			if binary, err = hasNUL(f); err != nil {
				return fmt.Errorf("reading %s: %w", e.name, err)
			}
		}
	}

	aLabel, bLabel := os.DevNull, os.DevNull
	if old != nil {
		aLabel = gitQuote("a/" + aName)
	}
	if new != nil {
		bLabel = gitQuote("b/" + bName)
	}
	if size > maxTextDiff || binary {
		if old != nil && new != nil {
			differ, err := u.diff(ctx, nil, []string{"--brief"}, files)
			if err != nil || !differ {
				return err
			}
		}
		if err := hw.flush(); err != nil {
			return err
		}
		var err error
		if size > maxTextDiff {
			_, err = fmt.Fprintf(u.out, "File %s is too large to diff (%d bytes)\n", gitQuote(bName), size)
		} else {
			_, err = fmt.Fprintf(u.out, "Binary files %s and %s differ\n", aLabel, bLabel)
		}
		return err
	}
	// git ends a ---/+++ name that holds a space with a tab, for patch(1).
	if strings.Contains(aName, " ") && old != nil {
		aLabel += "\t"
	}
	if strings.Contains(bName, " ") && new != nil {
		bLabel += "\t"
	}
	opts := []string{"--unified=" + strconv.Itoa(u.context), "--text", "--label=" + aLabel, "--label=" + bLabel}
	_, err := u.diff(ctx, hw, opts, files)
	return err
}

// note writes the line that names a directory or a special file.
func (u *unifier) note(old, new *diffEntry) error {
	var err error
	switch {
	case old == nil:
		_, err = fmt.Fprintf(u.out, "new %s %s\n", new.typeName(), new.shownName())
	case new == nil:
		_, err = fmt.Fprintf(u.out, "deleted %s %s\n", old.typeName(), old.shownName())
	default:
		var b strings.Builder
		if old.name != new.name {
			fmt.Fprintf(&b, "renamed %s %s to %s\n", new.typeName(), old.shownName(), new.shownName())
		}
		if old.mode() != new.mode() {
			fmt.Fprintf(&b, "mode of %s %s changed from %04o to %04o\n",
				new.typeName(), new.shownName(), old.mode()&0o7777, new.mode()&0o7777)
		}
		if t := new.typ(); (t == unix.S_IFCHR || t == unix.S_IFBLK) && old.st.Rdev != new.st.Rdev {
			fmt.Fprintf(&b, "%s %s changed from %d:%d to %d:%d\n", new.typeName(), new.shownName(),
				unix.Major(old.st.Rdev), unix.Minor(old.st.Rdev), unix.Major(new.st.Rdev), unix.Minor(new.st.Rdev))
		}
		_, err = io.WriteString(u.out, b.String())
	}
	return err
}

// diff runs diff with opts on the two files (nil: /dev/null), passed as
// descriptors 3 and 4, its output to stdout (nil: none). differ is its
// exit status 1.
func (u *unifier) diff(ctx context.Context, stdout io.Writer, opts []string, files [2]*os.File) (differ bool, err error) {
	args := append(opts[:len(opts):len(opts)], "--")
	var extra []*os.File
	for _, f := range files {
		if f == nil {
			args = append(args, os.DevNull)
			continue
		}
		args = append(args, "/dev/fd/"+strconv.Itoa(3+len(extra)))
		extra = append(extra, f)
	}
	cmd := exec.CommandContext(ctx, diffProgram, args...)
	cmd.ExtraFiles = extra
	cmd.Stdout = stdout
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = []string{"LC_ALL=C"}
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err = cmd.Run()
	slog.LogAttrs(ctx, slog.LevelDebug, "exec",
		slog.String("argv", strings.Join(cmd.Args, " ")),
		slog.Duration("took", time.Since(start)),
		slog.Bool("ok", err == nil))
	var exit *exec.ExitError
	switch {
	case u.out.cut || u.out.err != nil:
		// The output stopped (Unified says why); diff was stopped with it.
		return true, nil
	case ctx.Err() != nil:
		return false, fmt.Errorf("running diff: %w", ctx.Err())
	case err == nil:
		return false, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return true, nil
	case errors.As(err, &exit):
		return false, fmt.Errorf("%s: %s: %w", strings.Join(cmd.Args, " "), strings.TrimSpace(stderr.String()), err)
	}
	return false, fmt.Errorf("running diff: %w", err)
}

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
	for try := 0; ; try++ {
		fd, err = unix.Openat2(t.fd, name, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
		// EAGAIN: a rename in the tree raced the lookup.
		if err == unix.EINTR || err == unix.EAGAIN && try < 16 {
			continue
		}
		break
	}
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

func (e *diffEntry) typeName() string {
	switch e.typ() {
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFREG:
		return "file"
	}
	return "file of unknown type"
}

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
		target, err := readlinkFd(e.fd)
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

// readlinkFd reads the target of the symlink that fd (O_PATH, not
// followed) is.
func readlinkFd(fd int) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
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

// bothNames are the a/ and b/ names of a diff: an added or deleted path's
// name on both sides, as git writes them.
func bothNames(old, new *diffEntry) (string, string) {
	switch {
	case old == nil:
		return new.name, new.name
	case new == nil:
		return old.name, old.name
	}
	return old.name, new.name
}

// gitQuote quotes a name as git does (core.quotePath): in double quotes,
// with C escapes, when it holds a control character, a byte over 0x7e, a
// '"' or a '\'. A name from a sandbox cannot then start a line of its own
// or pass for a header.
func gitQuote(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r >= 0x7f || r == '"' || r == '\\' })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			if c < 0x20 || c >= 0x7f {
				fmt.Fprintf(&b, `\%03o`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// headerWriter writes header before the first bytes written through it,
// so that a diff with no output shows nothing.
type headerWriter struct {
	w      io.Writer
	header []byte
}

func (h *headerWriter) Write(p []byte) (int, error) {
	if err := h.flush(); err != nil {
		return 0, err
	}
	return h.w.Write(p)
}

func (h *headerWriter) flush() error {
	if h.header == nil {
		return nil
	}
	header := h.header
	h.header = nil
	_, err := h.w.Write(header)
	return err
}

// errCut is what a cutWriter returns once it stopped.
var errCut = errors.New("the diff was cut")

// cutWriter passes at most max bytes on to w, cut after a whole line,
// then a closing line.
type cutWriter struct {
	w   io.Writer
	max int64 // 0 or less: no limit
	n   int64 // bytes written to w
	// pending is the start of a line not yet written (with a limit only):
	// a cut never leaves half a line.
	pending []byte
	cut     bool
	err     error // w's first error
}

func (c *cutWriter) Write(p []byte) (int, error) {
	switch {
	case c.err != nil:
		return 0, c.err
	case c.cut:
		return 0, errCut
	case c.max <= 0:
		return c.write(p)
	}
	c.pending = append(c.pending, p...)
	if room := c.max - c.n; int64(len(c.pending)) > room {
		fits := c.pending[:room]
		if i := bytes.LastIndexByte(fits, '\n'); i >= 0 {
			if _, err := c.write(fits[:i+1]); err != nil {
				return 0, err
			}
		}
		c.pending, c.cut = nil, true
		if _, err := fmt.Fprintf(c.w, "... the diff is cut here: it is longer than %d bytes\n", c.max); err != nil {
			c.err = err
			return 0, err
		}
		return 0, errCut
	}
	if i := bytes.LastIndexByte(c.pending, '\n'); i >= 0 {
		if _, err := c.write(c.pending[:i+1]); err != nil {
			return 0, err
		}
		c.pending = append(c.pending[:0], c.pending[i+1:]...)
	}
	return len(p), nil
}

func (c *cutWriter) write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// flush writes what is left of an unfinished last line.
func (c *cutWriter) flush() error {
	if c.cut || c.err != nil || len(c.pending) == 0 {
		return c.err
	}
	_, err := c.write(c.pending)
	c.pending = nil
	return err
}

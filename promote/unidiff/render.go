package unidiff

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cowfs"
)

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
	switch {
	case old == nil:
		if owner := u.newOwner(new); owner != "" {
			fmt.Fprintf(&h, "new file owner %s\n", owner)
		}
	case new != nil && old.owner() != new.owner():
		fmt.Fprintf(&h, "old owner %s\nnew owner %s\n", old.owner(), new.owner())
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
		line := fmt.Sprintf("new %s %s\n", new.typeName(), new.shownName())
		if owner := u.newOwner(new); owner != "" {
			line += fmt.Sprintf("owner of new %s %s is %s\n", new.typeName(), new.shownName(), owner)
		}
		_, err = io.WriteString(u.out, line)
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
		if old.owner() != new.owner() {
			fmt.Fprintf(&b, "owner of %s %s changed from %s to %s\n",
				new.typeName(), new.shownName(), old.owner(), new.owner())
		}
		if t := new.typ(); (t == unix.S_IFCHR || t == unix.S_IFBLK) && old.st.Rdev != new.st.Rdev {
			fmt.Fprintf(&b, "%s %s changed from %d:%d to %d:%d\n", new.typeName(), new.shownName(),
				unix.Major(old.st.Rdev), unix.Minor(old.st.Rdev), unix.Major(new.st.Rdev), unix.Minor(new.st.Rdev))
		}
		_, err = io.WriteString(u.out, b.String())
	}
	return err
}

// newOwner is the owner of new, an added path, where an approver should
// see it: not the one of its directory in the new tree ("" then). git
// shows no owners, but a promotion carries them: a file a sandbox's root
// made root's, or gave to another, is seen before it is approved.
func (u *unifier) newOwner(new *diffEntry) string {
	dir, err := u.new.lookup(path.Dir(new.name))
	if err != nil {
		return new.owner() // named when its directory's cannot be read
	}
	defer dir.close()
	if dir.owner() == new.owner() {
		return ""
	}
	return new.owner()
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
		// The output stopped (Write says why); diff was stopped with it.
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

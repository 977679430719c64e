package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/godbus/dbus/v5"
	ucli "github.com/urfave/cli/v3"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The file verbs, on the daemon's file API: cat and cp.

func catCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "cat",
		Usage:     "print files of a sandbox, as you see them in it",
		ArgsUsage: "SANDBOX PATH...",
		Description: `Prints each PATH of the sandbox (relative: from the project's directory)
to stdout, read as you by the sandbox's own view: a symlink resolves
inside the sandbox, a file you may not read there is refused.`,
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			a, err := args(cmd, 2, -1)
			if err != nil {
				return err
			}
			return withClient(ctx, func(c *client) error {
				e, err := c.resolve(ctx, a[0])
				if err != nil {
					return err
				}
				for _, p := range a[1:] {
					if err := c.readFile(ctx, e, p, os.Stdout); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}

func cpCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "cp",
		Usage:     "copy a file into or out of a sandbox",
		ArgsUsage: "SRC DST",
		Description: `Copies one file between the host and a sandbox; the sandbox's side is
written SANDBOX:PATH (relative: from the project's directory), the
host's a path, or - for stdin or stdout:

   sandboxctl cp ./fix.patch web:/tmp/fix.patch
   sandboxctl cp web:build/report.txt .

In the sandbox the file is read or written as you, in its own view (a
symlink resolves inside it); a file copied in keeps its permission bits.
A file of any size goes through a pipe. Directories are not copied: use
exec with tar for a tree.`,
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			a, err := args(cmd, 2, 2)
			if err != nil {
				return err
			}
			srcBox, src, srcIn := splitRemote(a[0])
			dstBox, dst, dstIn := splitRemote(a[1])
			switch {
			case srcIn && dstIn:
				return usage("both %s and %s are in a sandbox: one side must be the host's", quote(a[0]), quote(a[1]))
			case !srcIn && !dstIn:
				return usage("neither %s nor %s is in a sandbox (SANDBOX:PATH)", quote(a[0]), quote(a[1]))
			}
			return withClient(ctx, func(c *client) error {
				if srcIn {
					e, err := c.resolve(ctx, srcBox)
					if err != nil {
						return err
					}
					return c.copyOut(ctx, e, src, dst)
				}
				e, err := c.resolve(ctx, dstBox)
				if err != nil {
					return err
				}
				return c.copyIn(ctx, e, src, dst)
			})
		},
	}
}

// splitRemote splits SANDBOX:PATH; a path with a slash before any colon
// (./a:b, /tmp/x:y) is the host's.
func splitRemote(arg string) (box, path string, inSandbox bool) {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.Contains(arg[:i], "/") {
		return "", arg, false
	}
	return arg[:i], arg[i+1:], true
}

// readFile writes path of sandbox e to w, through a pipe the daemon's
// ReadFileTo fills (an ay of godbus's is slow: a byte at a time).
func (c *client) readFile(ctx context.Context, e sandboxd1.ListEntry, path string, w io.Writer) error {
	what := "reading " + path + " in sandbox " + sandboxLabel(e)
	pr, pw, err := os.Pipe()
	if err != nil {
		return &Error{Code: ExitFailed, Msg: what + ": " + err.Error(), Err: err}
	}
	defer pr.Close()
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(w, pr)
		pr.Close() // a writer that failed ends the daemon's copy too
		copied <- err
	}()
	var n uint64
	err = call(ctx, c.sandbox(e.ID), what, sandboxd1.Member(sandboxd1.SandboxInterface, sandboxd1.MethodReadFileTo),
		[]any{path, dbus.UnixFD(pw.Fd()), map[string]dbus.Variant{}}, &n)
	pw.Close()
	cerr := <-copied
	if err != nil {
		return err
	}
	if cerr != nil {
		return &Error{Code: ExitFailed, Msg: what + ": writing it out: " + cerr.Error(), Err: cerr}
	}
	return nil
}

// copyOut copies path of sandbox e to dst on the host (a directory: the
// file's name in it; "-": stdout).
func (c *client) copyOut(ctx context.Context, e sandboxd1.ListEntry, path, dst string) error {
	if dst == "-" {
		return c.readFile(ctx, e, path, os.Stdout)
	}
	// The file's mode, for the copy (a directory's listing is not one
	// file's: ReadFile refuses it below).
	mode := os.FileMode(0o644)
	var entries []sandboxd1.FileEntry
	what := "reading " + path + " in sandbox " + sandboxLabel(e)
	if err := call(ctx, c.sandbox(e.ID), what, sandboxd1.Member(sandboxd1.SandboxInterface, sandboxd1.MethodListFiles),
		[]any{path, map[string]dbus.Variant{}}, &entries); err != nil {
		return err
	}
	if len(entries) == 1 && entries[0].Kind == "file" {
		mode = os.FileMode(entries[0].Mode & 0o777)
	}
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, filepath.Base(path))
	}
	// Written beside, then renamed: an interrupted copy leaves no half file.
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".sandboxctl-*")
	if err != nil {
		return &Error{Code: ExitFailed, Msg: "copying to " + dst + ": " + err.Error(), Err: err}
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := c.readFile(ctx, e, path, tmp); err != nil {
		return err
	}
	err = tmp.Chmod(mode)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return &Error{Code: ExitFailed, Msg: "copying to " + dst + ": " + err.Error(), Err: err}
	}
	return nil
}

// copyIn copies src on the host ("-": stdin) to path of sandbox e, in
// chunks: the first empties the file, the others are appended.
func (c *client) copyIn(ctx context.Context, e sandboxd1.ListEntry, src, path string) error {
	in := os.Stdin
	mode := uint32(0o644)
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return &Error{Code: ExitNotFound, Msg: "copying " + src + ": " + err.Error(), Err: err}
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return &Error{Code: ExitFailed, Msg: "copying " + src + ": " + err.Error(), Err: err}
		}
		if !st.Mode().IsRegular() {
			return usage("%s is not a regular file: cp copies one file", quote(src))
		}
		in, mode = f, uint32(st.Mode().Perm())
		if strings.HasSuffix(path, "/") {
			path += filepath.Base(src)
		}
	}
	what := "writing " + path + " in sandbox " + sandboxLabel(e)
	pr, pw, err := os.Pipe()
	if err != nil {
		return &Error{Code: ExitFailed, Msg: what + ": " + err.Error(), Err: err}
	}
	defer pw.Close()
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(pw, in)
		pw.Close() // the end of file
		copied <- err
	}()
	var n uint64
	err = call(ctx, c.sandbox(e.ID), what, sandboxd1.Member(sandboxd1.SandboxInterface, sandboxd1.MethodWriteFileFrom),
		[]any{path, dbus.UnixFD(pr.Fd()), map[string]dbus.Variant{sandboxd1.OptMode: dbus.MakeVariant(mode)}}, &n)
	pr.Close() // a daemon that stopped reading ends the copy above
	cerr := <-copied
	if err != nil {
		return err
	}
	if cerr != nil && !errors.Is(cerr, syscall.EPIPE) {
		return &Error{Code: ExitFailed, Msg: fmt.Sprintf("copying %s: %v", src, cerr), Err: cerr}
	}
	return nil
}

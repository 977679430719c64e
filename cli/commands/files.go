package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	ucli "github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/cli/verb"
	sbclient "github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The file verbs, on the daemon's file API: cat and cp.

// Cat is `sandboxctl cat`.
func Cat() *ucli.Command {
	return &ucli.Command{
		Name:      "cat",
		Usage:     "print files of a sandbox, as you see them in it",
		ArgsUsage: "SANDBOX PATH...",
		Description: `Prints each PATH of the sandbox (relative: from the project's directory)
to stdout, read as you by the sandbox's own view: a symlink resolves
inside the sandbox, a file you may not read there is refused.`,
		Action: func(ctx context.Context, cmd *ucli.Command) error {
			a, err := verb.Args(cmd, 2, -1)
			if err != nil {
				return err
			}
			return verb.WithClient(ctx, func(c *verb.Client) error {
				e, err := c.Resolve(ctx, a[0])
				if err != nil {
					return err
				}
				for _, p := range a[1:] {
					if err := readFile(ctx, c, e, p, os.Stdout); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}

// Cp is `sandboxctl cp`.
func Cp() *ucli.Command {
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
			a, err := verb.Args(cmd, 2, 2)
			if err != nil {
				return err
			}
			srcBox, src, srcIn := splitRemote(a[0])
			dstBox, dst, dstIn := splitRemote(a[1])
			switch {
			case srcIn && dstIn:
				return verb.Usage("both %s and %s are in a sandbox: one side must be the host's", verb.Quote(a[0]), verb.Quote(a[1]))
			case !srcIn && !dstIn:
				return verb.Usage("neither %s nor %s is in a sandbox (SANDBOX:PATH)", verb.Quote(a[0]), verb.Quote(a[1]))
			}
			return verb.WithClient(ctx, func(c *verb.Client) error {
				if srcIn {
					e, err := c.Resolve(ctx, srcBox)
					if err != nil {
						return err
					}
					return copyOut(ctx, c, e, src, dst)
				}
				e, err := c.Resolve(ctx, dstBox)
				if err != nil {
					return err
				}
				return copyIn(ctx, c, e, src, dst)
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

// readFile writes path of sandbox e to w (through a pipe: an ay of
// godbus's is slow, a byte at a time).
func readFile(ctx context.Context, c *verb.Client, e sandboxd1.ListEntry, path string, w io.Writer) error {
	what := "reading " + path + " in sandbox " + verb.SandboxLabel(e)
	if _, err := c.Handle(e).ReadFileTo(ctx, path, w, sbclient.ReadOptions{}); err != nil {
		return verb.FromBus(what, err)
	}
	return nil
}

// copyOut copies path of sandbox e to dst on the host (a directory: the
// file's name in it; "-": stdout).
func copyOut(ctx context.Context, c *verb.Client, e sandboxd1.ListEntry, path, dst string) error {
	if dst == "-" {
		return readFile(ctx, c, e, path, os.Stdout)
	}
	// The file's mode, for the copy (a directory's listing is not one
	// file's: ReadFileTo refuses it below).
	mode := os.FileMode(0o644)
	entries, err := c.Handle(e).ListFiles(ctx, path, sbclient.ListOptions{})
	if err != nil {
		return verb.FromBus("reading "+path+" in sandbox "+verb.SandboxLabel(e), err)
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
		return &verb.Error{Code: verb.ExitFailed, Msg: "copying to " + dst + ": " + err.Error(), Err: err}
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	// No more than the room there is: a sandbox's file may be sparse and
	// huge, or grow while it is read.
	var fsst unix.Statfs_t
	if err := unix.Fstatfs(int(tmp.Fd()), &fsst); err != nil {
		return &verb.Error{Code: verb.ExitFailed, Msg: "copying to " + dst + ": " + err.Error(), Err: err}
	}
	room := int64(fsst.Bavail) * fsst.Bsize
	if len(entries) == 1 && entries[0].Kind == "file" && entries[0].Size > uint64(room) {
		return &verb.Error{Code: verb.ExitFailed, Msg: fmt.Sprintf("copying %s of sandbox %s to %s: it is %d bytes, larger than the %d bytes free there", path, verb.SandboxLabel(e), dst, entries[0].Size, room)}
	}
	if _, err := c.Handle(e).ReadFileTo(ctx, path, tmp, sbclient.ReadOptions{Limit: room}); err != nil {
		if errors.Is(err, sbclient.ErrTooLarge) {
			return &verb.Error{Code: verb.ExitFailed, Msg: fmt.Sprintf("copying %s of sandbox %s to %s: it is larger than the %d bytes free there", path, verb.SandboxLabel(e), dst, room), Err: err}
		}
		return verb.FromBus("reading "+path+" in sandbox "+verb.SandboxLabel(e), err)
	}
	err = tmp.Chmod(mode)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return &verb.Error{Code: verb.ExitFailed, Msg: "copying to " + dst + ": " + err.Error(), Err: err}
	}
	return nil
}

// copyIn copies src on the host ("-": stdin) to path of sandbox e.
func copyIn(ctx context.Context, c *verb.Client, e sandboxd1.ListEntry, src, path string) error {
	in := io.Reader(os.Stdin)
	mode := os.FileMode(0o644)
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return &verb.Error{Code: verb.ExitNotFound, Msg: "copying " + src + ": " + err.Error(), Err: err}
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return &verb.Error{Code: verb.ExitFailed, Msg: "copying " + src + ": " + err.Error(), Err: err}
		}
		if !st.Mode().IsRegular() {
			return verb.Usage("%s is not a regular file: cp copies one file", verb.Quote(src))
		}
		in, mode = f, st.Mode().Perm()
		if strings.HasSuffix(path, "/") {
			path += filepath.Base(src)
		}
	}
	if _, err := c.Handle(e).WriteFileFrom(ctx, path, in, sbclient.WriteOptions{Mode: mode}); err != nil {
		return verb.FromBus("writing "+path+" in sandbox "+verb.SandboxLabel(e), err)
	}
	return nil
}

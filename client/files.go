package client

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
)

// The file API works in the sandbox's view and as the caller: a path
// means what it means to the caller's commands there (symlinks resolve
// inside, permissions are the caller's), and a relative path is taken
// from the project's directory. A path that names nothing is
// ErrNoSuchFile (which also matches fs.ErrNotExist); one the caller may
// not read or write, ErrAccessDenied.

// DefaultReadLimit bounds what ReadFile returns when given no bound.
const DefaultReadLimit = 64 << 20

// pipeAbove is the size above which data goes through a pipe rather than
// in the call (godbus encodes a byte array a byte at a time).
const pipeAbove = 64 << 10

// ReadOptions are how ReadFile and ReadFileTo read.
type ReadOptions struct {
	// Limit bounds the file's size: a larger one is an error matching
	// ErrTooLarge. 0 is DefaultReadLimit for ReadFile, none for
	// ReadFileTo.
	Limit int64
	// Root reads as root of the sandbox's user namespace.
	Root bool
}

// ReadFile reads a whole file of the sandbox, through a pipe.
func (s *Sandbox) ReadFile(ctx context.Context, path string, opts ReadOptions) ([]byte, error) {
	if opts.Limit <= 0 {
		opts.Limit = DefaultReadLimit
	}
	var buf bytes.Buffer
	if _, err := s.ReadFileTo(ctx, path, &buf, opts); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ReadFileAt reads at most max bytes of a file of the sandbox from
// offset; fewer at its end. It reads in calls of at most
// sandboxd1.MaxFileChunk, until max or a short one.
func (s *Sandbox) ReadFileAt(ctx context.Context, path string, offset, max uint64) ([]byte, error) {
	op := fmt.Sprintf("reading %s in", path)
	var data []byte
	for uint64(len(data)) < max {
		want := min(max-uint64(len(data)), sandboxd1.MaxFileChunk)
		var chunk []byte
		if err := s.call(ctx, op, sandboxd1.MethodReadFile, []any{path, offset + uint64(len(data)), want}, &chunk); err != nil {
			return nil, err
		}
		data = append(data, chunk...)
		if uint64(len(chunk)) < want {
			break
		}
	}
	return data, nil
}

// WriteOptions are how WriteFile writes.
type WriteOptions struct {
	// Mode is the permission bits of a file it makes; 0 is 0644.
	Mode os.FileMode
	// MustExist: the file is not made when missing (ErrNoSuchFile).
	MustExist bool
	// Append adds to the file's end instead of replacing its content.
	Append bool
	// Root writes as root of the sandbox's user namespace.
	Root bool
}

func (o WriteOptions) options() map[string]dbus.Variant {
	m := map[string]dbus.Variant{}
	if o.Mode != 0 {
		m[sandboxd1.OptMode] = dbus.MakeVariant(unixMode(o.Mode))
	}
	if o.MustExist {
		m[sandboxd1.OptCreate] = dbus.MakeVariant(false)
	}
	if o.Append {
		m[sandboxd1.OptAppend] = dbus.MakeVariant(true)
	}
	if o.Root {
		m[sandboxd1.OptRoot] = dbus.MakeVariant(true)
	}
	return m
}

// unixMode is m as chmod(2) takes it: Go keeps set-id and sticky apart
// from the permission bits.
func unixMode(m os.FileMode) uint32 {
	mode := uint32(m.Perm())
	for bit, unix := range map[os.FileMode]uint32{os.ModeSetuid: 0o4000, os.ModeSetgid: 0o2000, os.ModeSticky: 0o1000} {
		if m&bit != 0 {
			mode |= unix
		}
	}
	return mode
}

// WriteFile writes data to a file of the sandbox: it replaces the
// file's content (or, with Append, adds to it), making the file if it is
// missing. Small data goes in the call, larger through a pipe.
func (s *Sandbox) WriteFile(ctx context.Context, path string, data []byte, opts WriteOptions) error {
	if len(data) > pipeAbove {
		_, err := s.WriteFileFrom(ctx, path, bytes.NewReader(data), opts)
		return err
	}
	return s.call(ctx, fmt.Sprintf("writing %s in", path), sandboxd1.MethodWriteFile, []any{path, data, opts.options()})
}

// WriteFileAt writes data into an existing file of the sandbox at offset,
// neither truncating nor appending. opts' Root applies.
func (s *Sandbox) WriteFileAt(ctx context.Context, path string, offset uint64, data []byte, opts WriteOptions) error {
	o := WriteOptions{MustExist: true, Root: opts.Root}.options()
	o[sandboxd1.OptOffset] = dbus.MakeVariant(offset)
	if len(data) > pipeAbove {
		_, err := s.writeFrom(ctx, path, bytes.NewReader(data), o)
		return err
	}
	return s.call(ctx, fmt.Sprintf("writing %s at %d in", path, offset), sandboxd1.MethodWriteFile, []any{path, data, o})
}

// ListOptions are what ListFiles lists.
type ListOptions struct {
	// Recursive lists the whole tree below the directory (symlinks not
	// followed).
	Recursive bool
	// MaxEntries bounds the entries (0: sandboxd1.MaxListEntries, the
	// most); past it the call fails, naming the bound.
	MaxEntries uint32
	// Root lists as root of the sandbox's user namespace.
	Root bool
}

// ListFiles lists a directory of the sandbox (with Recursive, all below
// it), or a file's own entry.
func (s *Sandbox) ListFiles(ctx context.Context, path string, opts ListOptions) ([]sandboxd1.FileEntry, error) {
	o := map[string]dbus.Variant{}
	if opts.Recursive {
		o[sandboxd1.OptRecursive] = dbus.MakeVariant(true)
	}
	if opts.MaxEntries > 0 {
		o[sandboxd1.OptMaxEntries] = dbus.MakeVariant(opts.MaxEntries)
	}
	if opts.Root {
		o[sandboxd1.OptRoot] = dbus.MakeVariant(true)
	}
	var entries []sandboxd1.FileEntry
	err := s.call(ctx, fmt.Sprintf("listing %s in", path), sandboxd1.MethodListFiles, []any{path, o}, &entries)
	return entries, err
}

// EditFile replaces every occurrence of old (not empty) in a file of the
// sandbox with new, as exact text, in place (its owner and mode stay),
// and returns how many it replaced. No occurrence is ErrInvalidArgs.
func (s *Sandbox) EditFile(ctx context.Context, path, old, new string) (int, error) {
	var n uint32
	err := s.call(ctx, fmt.Sprintf("editing %s in", path), sandboxd1.MethodEditFile, []any{path, old, new}, &n)
	return int(n), err
}

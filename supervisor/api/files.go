package api

import (
	"errors"
	"fmt"
	"os"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/sandboxd1"
	"github.com/sandboxd/sandboxd/supervisor/api/options"
	"github.com/sandboxd/sandboxd/supervisor/commands"
)

// The file API: ReadFile, WriteFile, ListFiles, EditFile, done by the
// sandbox's init in the sandbox's view and as the caller.

// ReadFile(s path, t offset, t max) -> (ay data) reads at most max bytes
// (0: MaxFileChunk, the most) of a regular file from offset; fewer at its
// end.
func (o sandboxObject) ReadFile(sender dbus.Sender, msg dbus.Message, path string, offset, max uint64) ([]byte, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodReadFile)
	if derr != nil {
		return nil, derr
	}
	if max == 0 {
		max = sandboxd1.MaxFileChunk
	}
	if max > sandboxd1.MaxFileChunk {
		return nil, s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs,
			"reading %s: %d bytes at once, over %d: read it in parts, or whole with ReadFileTo", path, max, sandboxd1.MaxFileChunk))
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return nil, derr
	}
	data, err := c.ReadFile(r.ctx, id, commands.FileAccess{UID: r.who.UID}, path, offset, max)
	if err != nil {
		return nil, s.end(r, id, fromSupervisor(err))
	}
	if data == nil {
		data = []byte{}
	}
	return data, s.end(r, id, nil)
}

// WriteFile(s path, ay data, a{sv} options) writes data to a file, made
// if missing (Create, default true; Mode, default 0644), emptied first
// unless Append or Offset; Root writes as root of the sandbox's user
// namespace.
func (o sandboxObject) WriteFile(sender dbus.Sender, msg dbus.Message, path string, data []byte, opts map[string]dbus.Variant) *dbus.Error {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodWriteFile)
	if derr != nil {
		return derr
	}
	if len(data) > sandboxd1.MaxFileChunk {
		return s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs,
			"writing %s: %d bytes at once, over %d: write it in parts, or whole with WriteFileFrom", path, len(data), sandboxd1.MaxFileChunk))
	}
	who, wo, err := options.Write(r.who.UID, opts)
	if err != nil {
		return s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs, "WriteFile: %v", err))
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return derr
	}
	return s.end(r, id, fromSupervisorOrNil(c.WriteFile(r.ctx, id, who, path, data, wo)))
}

// ReadFileTo(s path, h pipe, a{sv} options) -> (t bytes) copies a whole
// regular file into the caller's pipe (its write end), which the caller
// reads meanwhile; Root reads as root of the sandbox's user namespace.
func (o sandboxObject) ReadFileTo(sender dbus.Sender, msg dbus.Message, path string, pipe dbus.UnixFD, opts map[string]dbus.Variant) (uint64, *dbus.Error) {
	return o.stream(sender, msg, sandboxd1.MethodReadFileTo, pipe, func(r *request, id string, f *os.File) (uint64, error) {
		who := commands.FileAccess{UID: r.who.UID}
		for name, v := range opts {
			if name != sandboxd1.OptRoot {
				return 0, optionError{fmt.Errorf("unknown option %q (known: %s)", name, sandboxd1.OptRoot)}
			}
			if err := dbus.Store([]any{v.Value()}, &who.AsRoot); err != nil {
				return 0, optionError{fmt.Errorf("option %s (%s): %v", name, v.Signature(), err)}
			}
		}
		return o.s.rooms.Commands.ReadFileTo(r.ctx, id, who, path, f)
	})
}

// WriteFileFrom(s path, h pipe, a{sv} options) -> (t bytes) writes what
// comes through the caller's pipe (its read end), to its end, into a
// file, with WriteFile's options.
func (o sandboxObject) WriteFileFrom(sender dbus.Sender, msg dbus.Message, path string, pipe dbus.UnixFD, opts map[string]dbus.Variant) (uint64, *dbus.Error) {
	return o.stream(sender, msg, sandboxd1.MethodWriteFileFrom, pipe, func(r *request, id string, f *os.File) (uint64, error) {
		who, wo, err := options.Write(r.who.UID, opts)
		if err != nil {
			return 0, optionError{err}
		}
		return o.s.rooms.Commands.WriteFileFrom(r.ctx, id, who, path, f, wo)
	})
}

// optionError is a stream call's bad option: InvalidArgs.
type optionError struct{ error }

// stream is ReadFileTo's and WriteFileFrom's call: the caller's pipe
// taken (and closed after), the call begun on the sandbox, do run.
func (o sandboxObject) stream(sender dbus.Sender, msg dbus.Message, method string, pipe dbus.UnixFD,
	do func(r *request, id string, f *os.File) (uint64, error)) (uint64, *dbus.Error) {
	s := o.s
	files, aerr := adoptPassed(msg, method, pipe)
	if aerr != nil {
		return 0, aerr
	}
	defer files[0].Close()
	r, id, derr := o.beginOn(sender, msg, method)
	if derr != nil {
		return 0, derr
	}
	if _, derr := s.commandsOf(r, id); derr != nil {
		return 0, derr
	}
	n, err := do(r, id, files[0])
	var bad optionError
	switch {
	case errors.As(err, &bad):
		return 0, s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs, "%s: %v", method, bad.error))
	case err != nil:
		return 0, s.end(r, id, fromSupervisor(err))
	}
	return n, s.end(r, id, nil)
}

// ListFiles(s path, a{sv} options) -> a(ssuutts) lists a directory's
// entries (Recursive: all below it, symlinks not followed; at most
// MaxEntries, 10,000), or a file's own entry.
func (o sandboxObject) ListFiles(sender dbus.Sender, msg dbus.Message, path string, opts map[string]dbus.Variant) ([]sandboxd1.FileEntry, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodListFiles)
	if derr != nil {
		return nil, derr
	}
	who, recursive, most, err := options.ListFiles(r.who.UID, opts)
	if err != nil {
		return nil, s.end(r, id, dbusError(sandboxd1.ErrorInvalidArgs, "ListFiles: %v", err))
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return nil, derr
	}
	es, err := c.ListFiles(r.ctx, id, who, path, recursive, int(most))
	if err != nil {
		return nil, s.end(r, id, fromSupervisor(err))
	}
	out := make([]sandboxd1.FileEntry, len(es))
	for i, e := range es {
		out[i] = sandboxd1.FileEntry{Path: e.Path, Kind: e.Kind, Mode: e.Mode, UID: e.UID, Size: e.Size, Modified: e.Modified, Target: e.Target}
	}
	return out, s.end(r, id, nil)
}

// EditFile(s path, s old, s new) -> (u replacements) replaces every
// occurrence of old in a file by new, in place (its inode, owner and
// mode stay); none is InvalidArgs.
func (o sandboxObject) EditFile(sender dbus.Sender, msg dbus.Message, path, old, new string) (uint32, *dbus.Error) {
	s := o.s
	r, id, derr := o.beginOn(sender, msg, sandboxd1.MethodEditFile)
	if derr != nil {
		return 0, derr
	}
	c, derr := s.commandsOf(r, id)
	if derr != nil {
		return 0, derr
	}
	n, err := c.EditFile(r.ctx, id, commands.FileAccess{UID: r.who.UID}, path, old, new)
	if err != nil {
		return 0, s.end(r, id, fromSupervisor(err))
	}
	return uint32(n), s.end(r, id, nil)
}

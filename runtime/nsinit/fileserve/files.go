// Package fileserve is the file API's init side (issue 19): a file read,
// written, listed or edited for a caller, by the init, in the sandbox's
// view, on a thread with the caller's credentials, so a path means what
// it means to the caller's commands (symlinks resolve inside the sandbox,
// permissions are the caller's). The data travels through a pipe the
// daemon passed; the answer is a message (the init's control socket,
// runtime/nsinit, carries both). Its types are the wire's: the daemon
// names them as nsinit.Request, nsinit.Result, ...
package fileserve

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/nsinit/creds"
)

// File operations.
const (
	Read  = "read"
	Write = "write"
	List  = "list"
	Edit  = "edit"
)

// MaxData bounds what one read, write or edit moves (the wire's
// MaxFileChunk), and MaxListed one list's entries.
const (
	MaxData   = 16 << 20
	MaxListed = 10000
)

// Request asks the init to act on one file as the caller. Its data
// (a write's bytes, an edit's EditData) comes through the pipe passed
// with it; what it reads (a read's bytes, a list's JSON) goes to the pipe.
type Request struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	// Dir is where a relative Path starts.
	Dir            string   `json:"dir"`
	UID            uint32   `json:"uid"`
	GID            uint32   `json:"gid"`
	Groups         []uint32 `json:"groups,omitempty"`
	NoCapabilities bool     `json:"no_capabilities,omitempty"`
	// Read: Offset and Max (at most MaxData). Write: Offset (with
	// AtOffset), Append, Create, Mode of a file it makes.
	Offset     uint64 `json:"offset,omitempty"`
	Max        uint64 `json:"max,omitempty"`
	AtOffset   bool   `json:"at_offset,omitempty"`
	Append     bool   `json:"append,omitempty"`
	Create     bool   `json:"create,omitempty"`
	Mode       uint32 `json:"mode,omitempty"`
	Recursive  bool   `json:"recursive,omitempty"`
	MaxEntries int    `json:"max_entries,omitempty"`
	// Stream: the pipe is the caller's own (ReadFileTo, WriteFileFrom),
	// and the whole file goes through it, of any size.
	Stream bool `json:"stream,omitempty"`
}

func (r *Request) identity() creds.Identity {
	return creds.Identity{UID: r.UID, GID: r.GID, Groups: r.Groups, NoCaps: r.NoCapabilities}
}

// EditData is an edit's data: every Old becomes New. It travels as the
// length of Old (8 bytes, big-endian), Old, then New: as they are, not
// JSON, which could make a text six times its size.
type EditData struct {
	Old, New []byte
}

// MaxEditText bounds each of an edit's texts.
const MaxEditText = 1 << 20

// WriteTo writes e as the init reads it.
func (e EditData) WriteTo(w io.Writer) (int64, error) {
	var head [8]byte
	binary.BigEndian.PutUint64(head[:], uint64(len(e.Old)))
	n, err := w.Write(append(append(head[:], e.Old...), e.New...))
	return int64(n), err
}

// readEdit reads an EditData from r, each text at most MaxEditText.
func readEdit(r io.Reader) (EditData, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return EditData{}, fmt.Errorf("reading the edit: %w", err)
	}
	n := binary.BigEndian.Uint64(head[:])
	if n == 0 || n > MaxEditText {
		return EditData{}, fmt.Errorf("the text to replace is empty or over %d bytes", MaxEditText)
	}
	e := EditData{Old: make([]byte, n)}
	if _, err := io.ReadFull(r, e.Old); err != nil {
		return EditData{}, fmt.Errorf("reading the edit: %w", err)
	}
	var err error
	if e.New, err = io.ReadAll(io.LimitReader(r, MaxEditText+1)); err != nil {
		return EditData{}, fmt.Errorf("reading the edit: %w", err)
	}
	if len(e.New) > MaxEditText {
		return EditData{}, fmt.Errorf("the new text is over %d bytes", MaxEditText)
	}
	return e, nil
}

// Result answers a Request: the bytes moved, or an edit's
// replacements.
type Result struct {
	Bytes        uint64 `json:"bytes,omitempty"`
	Replacements int    `json:"replacements,omitempty"`
	// Errno is the failure's errno, for the daemon's errors (ENOENT,
	// EACCES), with the message's Error.
	Errno int `json:"errno,omitempty"`
}

// Entry is one entry of a list, as the init reads it.
type Entry struct {
	Path     string `json:"path"`
	Kind     string `json:"kind"`
	Mode     uint32 `json:"mode"`
	UID      uint32 `json:"uid"`
	Size     uint64 `json:"size"`
	Modified uint64 `json:"modified"` // µs since the epoch
	Target   string `json:"target,omitempty"`
}

// errNotRegular: the file API reads and writes regular files only (a
// fifo would block it, a device is not the caller's to stream).
var errNotRegular = errors.New("not a regular file")

// Serve does req as its caller, on a thread of the caller's credentials;
// pipe is the request's data pipe (a stream's is checked to be a pipe
// first). The caller closes pipe after.
func Serve(req *Request, pipe *os.File) (Result, error) {
	var res Result
	var err error
	if req.Stream {
		err = callersPipe(pipe)
	}
	if err == nil {
		if cerr := creds.AsCaller(req.identity(), func() { res, err = doFile(req, pipe) }); cerr != nil {
			err = cerr
		}
	}
	return res, err
}

func doFile(req *Request, pipe *os.File) (Result, error) {
	p := req.Path
	if p == "" {
		return Result{}, errors.New("no path given")
	}
	if !strings.HasPrefix(p, "/") {
		// Not path.Join: "link/.." is the kernel's to resolve (the
		// link's target's parent), not a name to clean away.
		p = strings.TrimSuffix(req.Dir, "/") + "/" + p
	}
	switch req.Op {
	case Read:
		return readFile(p, req, pipe)
	case Write:
		return writeFile(p, req, pipe)
	case List:
		return listFiles(p, req, pipe)
	case Edit:
		return editFile(p, pipe)
	}
	return Result{}, fmt.Errorf("unknown file operation %q", req.Op)
}

// openFile opens p for the caller (this thread's credentials), without
// blocking on a fifo and without following a magic link (/proc/self/fd,
// which would be the init's), and checks that it is a regular file of
// the sandbox's own filesystems.
func openFile(p string, flags int, mode uint32) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENXIO) {
		// A fifo no one reads, opened to write without blocking; a
		// socket.
		return nil, fmt.Errorf("%s: %w (a fifo or a socket)", p, errNotRegular)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	if err := regularOfTheSandbox(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	// Reads and writes block again (a regular file's never did).
	if err := unix.SetNonblock(fd, false); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// regularOfTheSandbox refuses what is not a regular file, and the
// kernel's files (/proc, /sys, cgroups), which the init would read as
// itself: commands read those.
func regularOfTheSandbox(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w (a %s)", errNotRegular, kindOf(st.Mode))
	}
	if kernelFS(int(f.Fd())) {
		return errKernelFile
	}
	return nil
}

// errKernelFile: the file API serves none of the kernel's files.
var errKernelFile = errors.New("a file of the kernel's (/proc, /sys, cgroups): read it with a command")

// kernelFS says whether fd is on one of the kernel's filesystems, whose
// files the init would read (or list) as itself, its /proc/self the
// init's; one that cannot be told is taken for one.
func kernelFS(fd int) bool {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return true
	}
	switch sfs.Type {
	case unix.PROC_SUPER_MAGIC, unix.SYSFS_MAGIC, unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC,
		unix.DEBUGFS_MAGIC, unix.SECURITYFS_MAGIC, unix.BPF_FS_MAGIC, unix.TRACEFS_MAGIC:
		return true
	}
	return false
}

func readFile(p string, req *Request, pipe *os.File) (Result, error) {
	max := req.Max
	if max == 0 || max > MaxData {
		max = MaxData
	}
	f, err := openFile(p, unix.O_RDONLY, 0)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	if req.Stream {
		// What it held when opened, and no more: a file that grows
		// while it is read does not hold the call for ever.
		st, err := f.Stat()
		if err != nil {
			return Result{}, err
		}
		n, err := streamCopy(pipe, io.LimitReader(f, st.Size()), false)
		if err != nil {
			return Result{Bytes: uint64(n)}, fmt.Errorf("reading %s into the caller's pipe: %w", p, err)
		}
		return Result{Bytes: uint64(n)}, nil
	}
	n, err := io.Copy(pipe, io.NewSectionReader(f, int64(min(req.Offset, 1<<62)), int64(max)))
	if err != nil {
		return Result{Bytes: uint64(n)}, fmt.Errorf("reading %s: %w", p, err)
	}
	return Result{Bytes: uint64(n)}, nil
}

func writeFile(p string, req *Request, pipe *os.File) (Result, error) {
	flags := unix.O_WRONLY
	if req.Create {
		flags |= unix.O_CREAT
	}
	if req.Append {
		flags |= unix.O_APPEND
	}
	mode := req.Mode & 0o777
	// A file it makes is made with no bits, then given mode exactly (the
	// init's umask is not the caller's); one that was there keeps its own.
	var f *os.File
	if req.Create {
		fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
			Flags:   uint64(flags | unix.O_CREAT | unix.O_EXCL | unix.O_NOCTTY | unix.O_CLOEXEC),
			Resolve: unix.RESOLVE_NO_MAGICLINKS,
		})
		switch {
		case err == nil:
			f = os.NewFile(uintptr(fd), p)
			if err := f.Chmod(os.FileMode(mode)); err != nil {
				f.Close()
				return Result{}, fmt.Errorf("setting the mode of %s: %w", p, err)
			}
		case !errors.Is(err, unix.EEXIST):
			return Result{}, fmt.Errorf("making %s: %w", p, err)
		}
	}
	if f == nil {
		var err error
		if f, err = openFile(p, flags&^unix.O_CREAT, 0); err != nil {
			return Result{}, err
		}
	}
	defer f.Close()
	var w io.Writer = f
	switch {
	case req.AtOffset:
		w = io.NewOffsetWriter(f, int64(min(req.Offset, 1<<62)))
	case !req.Append:
		if err := f.Truncate(0); err != nil {
			return Result{}, fmt.Errorf("emptying %s: %w", p, err)
		}
	}
	if req.Stream {
		n, err := streamCopy(w, pipe, true)
		if err != nil {
			return Result{Bytes: uint64(n)}, fmt.Errorf("writing %s from the caller's pipe: %w", p, err)
		}
		return Result{Bytes: uint64(n)}, nil
	}
	n, err := io.Copy(w, io.LimitReader(pipe, MaxData))
	if err != nil {
		return Result{Bytes: uint64(n)}, fmt.Errorf("writing %s: %w", p, err)
	}
	return Result{Bytes: uint64(n)}, nil
}

func editFile(p string, pipe *os.File) (Result, error) {
	e, err := readEdit(pipe)
	if err != nil {
		return Result{}, err
	}
	f, err := openFile(p, unix.O_RDWR, 0)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxData+1))
	if err != nil {
		return Result{}, fmt.Errorf("reading %s: %w", p, err)
	}
	if len(data) > MaxData {
		return Result{}, fmt.Errorf("%s is over %d bytes: edit it with a command", p, MaxData)
	}
	n := bytes.Count(data, e.Old)
	if n == 0 {
		return Result{}, fmt.Errorf("%s does not contain the text to replace", p)
	}
	out := bytes.ReplaceAll(data, e.Old, e.New)
	if len(out) > MaxData {
		return Result{}, fmt.Errorf("%s would be over %d bytes", p, MaxData)
	}
	// In place: the file keeps its inode, owner, mode and links.
	if _, err := f.WriteAt(out, 0); err != nil {
		return Result{}, fmt.Errorf("writing %s: %w", p, err)
	}
	if err := f.Truncate(int64(len(out))); err != nil {
		return Result{}, fmt.Errorf("writing %s: %w", p, err)
	}
	return Result{Replacements: n, Bytes: uint64(len(out))}, nil
}

func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "device"
}

package commands

// The file API (issue 19): a sandbox's files read, written, listed and
// edited for a caller. The sandbox's init does each, in the sandbox's
// view and as the caller (runtime/nsinit/files.go); the daemon never
// opens a path of the sandbox's itself.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/sandboxd/sandboxd/runtime/nsinit"
	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/audit"
)

// ErrNoFile: the path names nothing in the sandbox (or a directory on the
// way is not one).
var ErrNoFile = errors.New("no such file in the sandbox")

// MaxFileData bounds one read's or write's data and the file an edit
// takes.
const MaxFileData = nsinit.MaxFileData

// FileAccess is whom a file call acts as: the caller, or root of the
// sandbox's user namespace (AsRoot, as Exec's).
type FileAccess struct {
	UID    uint32
	AsRoot bool
}

// WriteOptions are how WriteFile writes.
type WriteOptions struct {
	Mode     uint32 // of a file it makes; 0644 unless HasMode
	HasMode  bool
	NoCreate bool // the file must exist
	Append   bool
	// AtOffset writes at Offset, neither emptying nor appending.
	AtOffset bool
	Offset   uint64
}

// ReadFile reads at most max bytes (0: MaxFileData) of the regular file
// path from offset.
func (c *Commands) ReadFile(ctx context.Context, id string, who FileAccess, path string, offset, max uint64) (_ []byte, err error) {
	defer c.auditFile(ctx, id, who, "read-file", path, &err)
	if max > MaxFileData {
		return nil, fmt.Errorf("reading %s in sandbox %s: %d bytes at once, over %d: read it in parts: %w", path, id, max, MaxFileData, supervisor.ErrInvalid)
	}
	var out bytes.Buffer
	_, err = c.file(ctx, id, who, nsinit.FileRequest{Op: nsinit.FileRead, Path: path, Offset: offset, Max: max}, nil, &out)
	if err != nil {
		return nil, fmt.Errorf("reading %s in sandbox %s: %w", path, id, err)
	}
	return out.Bytes(), nil
}

// WriteFile writes data (at most MaxFileData) to path: made if missing
// (unless o.NoCreate), emptied first unless o.Append or o.AtOffset.
func (c *Commands) WriteFile(ctx context.Context, id string, who FileAccess, path string, data []byte, o WriteOptions) (err error) {
	defer c.auditFile(ctx, id, who, "write-file", fmt.Sprintf("%s (%d bytes)", path, len(data)), &err)
	if len(data) > MaxFileData {
		return fmt.Errorf("writing %s in sandbox %s: %d bytes at once, over %d: write it in parts: %w", path, id, len(data), MaxFileData, supervisor.ErrInvalid)
	}
	req, err := writeRequest(path, o)
	if err != nil {
		return fmt.Errorf("writing %s in sandbox %s: %w", path, id, err)
	}
	res, err := c.file(ctx, id, who, req, bytes.NewReader(data), nil)
	if err != nil {
		return fmt.Errorf("writing %s in sandbox %s: %w", path, id, err)
	}
	if res.Bytes != uint64(len(data)) {
		return fmt.Errorf("writing %s in sandbox %s: %d of %d bytes written", path, id, res.Bytes, len(data))
	}
	return nil
}

// writeRequest is the init's request for a write of o.
func writeRequest(path string, o WriteOptions) (nsinit.FileRequest, error) {
	if o.Append && o.AtOffset {
		return nsinit.FileRequest{}, fmt.Errorf("the options Append and Offset together: %w", supervisor.ErrInvalid)
	}
	if o.Mode&^0o777 != 0 {
		return nsinit.FileRequest{}, fmt.Errorf("mode %#o: only permission bits (0777) may be given: %w", o.Mode, supervisor.ErrInvalid)
	}
	mode := o.Mode
	if !o.HasMode {
		mode = 0o644
	}
	return nsinit.FileRequest{Op: nsinit.FileWrite, Path: path, Create: !o.NoCreate, Append: o.Append,
		AtOffset: o.AtOffset, Offset: o.Offset, Mode: mode}, nil
}

// ListFiles lists directory path's entries (recursive: all below it, up
// to maxEntries), or a file's own entry.
func (c *Commands) ListFiles(ctx context.Context, id string, who FileAccess, path string, recursive bool, maxEntries int) (_ []nsinit.FileEntry, err error) {
	defer c.auditFile(ctx, id, who, "list-files", path, &err)
	var out bytes.Buffer
	req := nsinit.FileRequest{Op: nsinit.FileList, Path: path, Recursive: recursive, MaxEntries: maxEntries}
	if _, err := c.file(ctx, id, who, req, nil, &out); err != nil {
		return nil, fmt.Errorf("listing %s in sandbox %s: %w", path, id, err)
	}
	return nsinit.ListEntries(out.Bytes())
}

// EditFile replaces every occurrence of old (not empty) in file path by
// new, and returns how many there were; none is ErrInvalid.
func (c *Commands) EditFile(ctx context.Context, id string, who FileAccess, path, old, new string) (n int, err error) {
	defer c.auditFile(ctx, id, who, "edit-file", path, &err)
	if old == "" {
		return 0, fmt.Errorf("editing %s in sandbox %s: the text to replace is empty: %w", path, id, supervisor.ErrInvalid)
	}
	if len(old) > nsinit.MaxEditText || len(new) > nsinit.MaxEditText {
		return 0, fmt.Errorf("editing %s in sandbox %s: a text over %d bytes: %w", path, id, nsinit.MaxEditText, supervisor.ErrInvalid)
	}
	var in bytes.Buffer
	if _, err := (nsinit.EditData{Old: []byte(old), New: []byte(new)}).WriteTo(&in); err != nil {
		return 0, err
	}
	res, err := c.file(ctx, id, who, nsinit.FileRequest{Op: nsinit.FileEdit, Path: path}, bytes.NewReader(in.Bytes()), nil)
	if err != nil {
		return 0, fmt.Errorf("editing %s in sandbox %s: %w", path, id, err)
	}
	return res.Replacements, nil
}

// fileCalls counts the file calls under way in each sandbox: a sandbox
// with one is not idle (a stream may last).
type fileCalls struct {
	mu sync.Mutex
	n  map[string]int
}

// start counts a call in sandbox id; the function it returns, its end.
func (f *fileCalls) start(id string) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	f.n[id]++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.n[id]--; f.n[id] <= 0 {
			delete(f.n, id)
		}
	}
}

func (f *fileCalls) running(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[id] > 0
}

// file sends req, as who, to sandbox id's init, with in (the data it
// takes) or out (for the data it gives).
func (c *Commands) file(ctx context.Context, id string, who FileAccess, req nsinit.FileRequest, in *bytes.Reader, out *bytes.Buffer) (nsinit.FileResult, error) {
	if err := c.fileCaller(ctx, id, who, &req); err != nil {
		return nsinit.FileResult{}, err
	}
	defer c.files.start(id)()
	var res nsinit.FileResult
	var err error
	if in != nil {
		res, err = nsinit.File(ctx, nsinit.Control(c.h.RuntimeDir(id)), req, in, nil)
	} else {
		res, err = nsinit.File(ctx, nsinit.Control(c.h.RuntimeDir(id)), req, nil, out)
	}
	c.h.Touch(id)
	return res, fileError(err)
}

// fileStream sends req, as who, with the caller's pipe.
func (c *Commands) fileStream(ctx context.Context, id string, who FileAccess, req nsinit.FileRequest, pipe *os.File) (nsinit.FileResult, error) {
	if err := c.fileCaller(ctx, id, who, &req); err != nil {
		return nsinit.FileResult{}, err
	}
	defer c.files.start(id)()
	res, err := nsinit.StreamFile(ctx, nsinit.Control(c.h.RuntimeDir(id)), req, pipe)
	c.h.Touch(id)
	return res, fileError(err)
}

// fileCaller checks req's path and the sandbox, and gives req who's
// identity and the project's directory for a relative path.
func (c *Commands) fileCaller(ctx context.Context, id string, who FileAccess, req *nsinit.FileRequest) error {
	if strings.IndexByte(req.Path, 0) >= 0 || req.Path == "" {
		return fmt.Errorf("the path is empty or holds a NUL byte: %w", supervisor.ErrInvalid)
	}
	if len(req.Path) > 4096 {
		return fmt.Errorf("a path of %d bytes, over 4096: %w", len(req.Path), supervisor.ErrInvalid)
	}
	if err := c.live(id); err != nil {
		return err
	}
	rec, err := c.h.Store().Get(id)
	if err != nil {
		return err
	}
	if who.AsRoot && who.UID != 0 && rec.IDs == nil {
		return fmt.Errorf("as root: %w, so only root may (%v)", supervisor.ErrNoIdmap, c.h.UserNSUnavailable())
	}
	cr, err := c.request(ctx, rec, ExecOptions{UID: who.UID, AsRoot: who.AsRoot})
	if err != nil {
		return err
	}
	req.UID, req.GID, req.Groups, req.NoCapabilities, req.Dir = cr.UID, cr.GID, cr.Groups, cr.NoCapabilities, cr.Dir
	return nil
}

// fileError gives the init's refusal the sentinel callers branch on,
// keeping its words.
func fileError(err error) error {
	var fe *nsinit.FileError
	if !errors.As(err, &fe) {
		return err
	}
	switch fe.Errno {
	case syscall.ENOENT, syscall.ENOTDIR:
		return kindOf(err, ErrNoFile)
	case syscall.EACCES, syscall.EPERM:
		return kindOf(err, supervisor.ErrAccessDenied)
	case 0, syscall.EINVAL, syscall.EISDIR, syscall.ELOOP, syscall.ENAMETOOLONG, syscall.EXDEV:
		// 0: not a regular file, nothing to replace, too large.
		return kindOf(err, supervisor.ErrInvalid)
	}
	return err
}

// kinded is an error that is also a sentinel, in its own words.
type kinded struct{ err, kind error }

func (k kinded) Error() string   { return k.err.Error() }
func (k kinded) Unwrap() []error { return []error{k.err, k.kind} }

func kindOf(err, kind error) error { return kinded{err, kind} }

func (c *Commands) auditFile(ctx context.Context, id string, who FileAccess, action, what string, err *error) {
	if who.AsRoot {
		what += ", as root"
	}
	rec, _ := c.h.Store().Get(id)
	if rec.ID == "" {
		rec.ID = id
	}
	c.h.AuditEntry(ctx, audit.Entry{Action: action, Command: what}, rec, *err)
}

// ReadFileTo copies the whole regular file path into pipe, the caller's
// (its write end), and returns how many bytes; the caller reads the pipe
// meanwhile. pipe is the caller's to close too.
func (c *Commands) ReadFileTo(ctx context.Context, id string, who FileAccess, path string, pipe *os.File) (n uint64, err error) {
	defer func() { c.auditFile(ctx, id, who, "read-file", fmt.Sprintf("%s (%d bytes, streamed)", path, n), &err) }()
	res, err := c.fileStream(ctx, id, who, nsinit.FileRequest{Op: nsinit.FileRead, Path: path}, pipe)
	if err != nil {
		return 0, fmt.Errorf("reading %s in sandbox %s: %w", path, id, err)
	}
	return res.Bytes, nil
}

// WriteFileFrom writes what comes through pipe (the caller's read end)
// to path, to its end of file, as WriteFile would write it.
func (c *Commands) WriteFileFrom(ctx context.Context, id string, who FileAccess, path string, pipe *os.File, o WriteOptions) (n uint64, err error) {
	defer func() { c.auditFile(ctx, id, who, "write-file", fmt.Sprintf("%s (%d bytes, streamed)", path, n), &err) }()
	req, err := writeRequest(path, o)
	if err != nil {
		return 0, fmt.Errorf("writing %s in sandbox %s: %w", path, id, err)
	}
	res, err := c.fileStream(ctx, id, who, req, pipe)
	if err != nil {
		return 0, fmt.Errorf("writing %s in sandbox %s: %w", path, id, err)
	}
	return res.Bytes, nil
}

package nsinit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/sandboxd/sandboxd/runtime/nsinit/fileserve"
)

// FileError is the init's refusal of a file request: its message, and
// the errno under it, if one was (errors.Is(err, fs.ErrNotExist) holds
// for a missing file).
type FileError struct {
	Msg   string
	Errno syscall.Errno
}

func (e *FileError) Error() string { return e.Msg }

func (e *FileError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// maxFileAnswer bounds what the daemon takes from a file request's pipe:
// a read's data or a list's JSON.
const maxFileAnswer = max(MaxFileData, fileserve.MaxListAnswer)

// File does req in the sandbox whose init listens on socket, as req's
// caller. in is the data the request takes (a write's bytes, an edit's
// EditData as JSON); out receives what it gives (a read's bytes, a
// list's JSON array of FileEntry).
func File(ctx context.Context, socket string, req FileRequest, in io.Reader, out io.Writer) (FileResult, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return FileResult{}, err
	}
	defer r.Close()
	defer w.Close()
	takes := req.Op == FileWrite || req.Op == FileEdit
	theirs, ours := w, r
	if takes {
		theirs, ours = r, w
	}
	// Closing our end (on ctx's end too) ends a copy that waits on the
	// init.
	stop := context.AfterFunc(ctx, func() { ours.Close() })
	defer stop()
	copied := make(chan error, 1)
	res, err := fileCall(ctx, socket, req, theirs, func() {
		go func() {
			var err error
			if takes {
				if in != nil {
					_, err = io.Copy(ours, in)
				}
			} else {
				var n int64
				n, err = io.Copy(out, io.LimitReader(ours, maxFileAnswer+1))
				if err == nil && n > maxFileAnswer {
					err = fmt.Errorf("the init sent over %d bytes", maxFileAnswer)
				}
			}
			ours.Close()
			copied <- err
		}()
	})
	if cerr := <-copied; err == nil && cerr != nil && !takes {
		return FileResult{}, cerr
	}
	return res, err
}

// StreamFile does req (a read or write) with the caller's own pipe:
// the init copies the whole file into or out of it, as req's caller.
func StreamFile(ctx context.Context, socket string, req FileRequest, pipe *os.File) (FileResult, error) {
	req.Stream = true
	return fileCall(ctx, socket, req, pipe, func() {})
}

// fileCall sends req with pipe to the init, calls sent once it has, and
// reads the answer.
func fileCall(ctx context.Context, socket string, req FileRequest, pipe *os.File, sent func()) (FileResult, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		pipe.Close()
		sent()
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return FileResult{}, ErrNotRunning
		}
		return FileResult{}, fmt.Errorf("reaching the sandbox's init: %w", err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	err = writeMessage(conn, message{FileRequest: &req}, []*os.File{pipe})
	pipe.Close() // the init has its copy; the end of file is its to give
	sent()
	if err != nil {
		return FileResult{}, fmt.Errorf("sending the file request: %w", err)
	}
	m, files, err := readMessage(conn, smallMessage)
	closeAll(files)
	if ctx.Err() != nil {
		return FileResult{}, ctx.Err()
	}
	if err != nil {
		return FileResult{}, fmt.Errorf("%w (%v)", ErrNotRunning, err)
	}
	if m.Error != "" {
		fe := &FileError{Msg: m.Error}
		if m.File != nil {
			fe.Errno = syscall.Errno(m.File.Errno)
		}
		return FileResult{}, fe
	}
	if m.File == nil {
		return FileResult{}, errors.New("the init did not answer the file request")
	}
	return *m.File, nil
}

// ListEntries decodes a list's answer.
func ListEntries(b []byte) ([]FileEntry, error) {
	var es []FileEntry
	if err := json.Unmarshal(b, &es); err != nil {
		return nil, fmt.Errorf("reading the init's list: %w", err)
	}
	return es, nil
}

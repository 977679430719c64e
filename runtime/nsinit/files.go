package nsinit

// The file API (issue 19) on the control socket: the daemon's calls are
// files_client.go; the init's side, and the types that cross, are the
// file service's (runtime/nsinit/fileserve), named here as the daemon
// has always named them.

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/runtime/nsinit/fileserve"
)

type (
	// FileRequest asks the init to act on one file as the caller.
	FileRequest = fileserve.Request
	// FileResult answers a FileRequest.
	FileResult = fileserve.Result
	// FileEntry is one entry of a list.
	FileEntry = fileserve.Entry
	// EditData is an edit's data: every Old becomes New.
	EditData = fileserve.EditData
)

// File operations, and the bounds of one request.
const (
	FileRead    = fileserve.Read
	FileWrite   = fileserve.Write
	FileList    = fileserve.List
	FileEdit    = fileserve.Edit
	MaxFileData = fileserve.MaxData
	MaxListed   = fileserve.MaxListed
	MaxEditText = fileserve.MaxEditText
)

// serveFile does req as its caller and answers on conn; pipe is the
// request's data pipe.
func (s *server) serveFile(conn *net.UnixConn, req *FileRequest, files []*os.File) {
	if len(files) != 1 {
		closeAll(files)
		_ = writeMessage(conn, message{Error: fmt.Sprintf("a file request takes one pipe, got %d descriptors", len(files))}, nil)
		return
	}
	pipe := files[0]
	res, err := fileserve.Serve(req, pipe)
	pipe.Close() // the daemon reads to its end
	if err != nil {
		m := errorMessage(err)
		var errno unix.Errno
		if errors.As(err, &errno) {
			m.File = &FileResult{Errno: int(errno)}
		}
		_ = writeMessage(conn, m, nil)
		return
	}
	_ = writeMessage(conn, message{File: &res}, nil)
}

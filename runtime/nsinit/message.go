package nsinit

// The control socket's messages: one JSON datagram each, with the
// descriptors that travel with it (SCM_RIGHTS).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// maxMessage bounds one datagram on the control socket (a request, with
// its argv and environment); the others (started, exit, signal) are small.
const (
	maxMessage   = 1 << 20
	smallMessage = 4 << 10
)

// errorMessage is err as a reply that fits the daemon's smallMessage
// buffer once encoded (a path or program name in it may be long, and
// JSON may make each byte six): cut, at a rune, with a mark.
func errorMessage(err error) message {
	text := err.Error()
	const keep = 512
	if len(text) > keep {
		cut := keep
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "... (cut)"
	}
	return message{Error: text}
}

func writeMessage(conn *net.UnixConn, m message, files []*os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err = conn.WriteMsgUnix(b, oob, nil)
	return err
}

// readMessage reads one datagram and the descriptors that came with it.
func readMessage(conn *net.UnixConn, size int) (message, []*os.File, error) {
	var m message
	buf := make([]byte, size)
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return m, nil, err
	}
	var files []*os.File
	if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, c := range cmsgs {
			fds, err := unix.ParseUnixRights(&c)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				files = append(files, os.NewFile(uintptr(fd), "passed"))
			}
		}
	}
	if n == 0 && oobn == 0 {
		return m, nil, io.EOF
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeAll(files)
		return m, nil, errors.New("control message too large")
	}
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll(files)
		return m, nil, fmt.Errorf("reading a control message: %w", err)
	}
	return m, files, nil
}

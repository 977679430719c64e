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
	m := message{Error: text}
	switch {
	case errors.Is(err, ErrNoProgram):
		m.Start = startNoProgram
	case errors.Is(err, ErrNotExecutable):
		m.Start = startNotExecutable
	}
	return m
}

// Why a command did not start, as a reply's Start says it.
const (
	startNoProgram     = "no-program"
	startNotExecutable = "not-executable"
)

// startError is a reply's error text, with ErrCommand and the sentinel
// its Start names.
func startError(m message) error {
	switch m.Start {
	case startNoProgram:
		return fmt.Errorf("%w, %w: %s", ErrCommand, ErrNoProgram, m.Error)
	case startNotExecutable:
		return fmt.Errorf("%w, %w: %s", ErrCommand, ErrNotExecutable, m.Error)
	}
	return fmt.Errorf("%w: %s", ErrCommand, m.Error)
}

// datagramSize is the length of the next datagram on conn, which stays
// there (MSG_PEEK; no descriptor is taken: no room is given for them).
// It waits for one as a read would; 0 is the end.
func datagramSize(conn *net.UnixConn) (int, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	one := make([]byte, 1)
	err = raw.Read(func(fd uintptr) bool {
		n, _, _, _, rerr = unix.Recvmsg(int(fd), one, nil, unix.MSG_PEEK|unix.MSG_TRUNC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return 0, fmt.Errorf("reading a control message: %w", err)
	}
	return n, nil
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

// readMessage reads one datagram of at most size bytes and the
// descriptors that came with it. Where size is more than a small
// message, the datagram's own length is asked first and its buffer made
// to fit: a megabyte taken for each request was most of an idle init's
// memory.
func readMessage(conn *net.UnixConn, size int) (message, []*os.File, error) {
	var m message
	if size > smallMessage {
		n, err := datagramSize(conn)
		if err != nil {
			return m, nil, err
		}
		size = min(max(n, 1), size) // a longer one is read cut, and refused
	}
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

package nsinit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// streamIdle is how long a caller's pipe may stay empty (or full) before
// a streamed read or write gives up: the init's thread is not the
// caller's to hold.
const streamIdle = 30 * time.Second

// callersPipe checks that f, which a caller passed, is a pipe, and makes
// it non-blocking: a pipe never holds the init's thread (a FUSE file or a
// socket of the caller's could, in a read or write no deadline ends). The
// flag is the pipe end's: the caller's copy of the same end, if it kept
// one, becomes non-blocking too, which only the caller can notice.
func callersPipe(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return fmt.Errorf("the descriptor passed is a %s, not a pipe", kindOf(st.Mode))
	}
	return unix.SetNonblock(int(f.Fd()), true)
}

// streamCopy copies between a regular file and the caller's non-blocking
// pipe until the end (fromPipe: the pipe's end of file; otherwise the
// file's), waiting for the pipe at most streamIdle at a time.
func streamCopy(dst io.Writer, src io.Reader, fromPipe bool) (int64, error) {
	buf := make([]byte, 256<<10)
	var total int64
	for {
		n, err := src.Read(buf)
		if fromPipe && errors.Is(err, unix.EAGAIN) {
			if err := waitPipe(src.(*os.File), unix.POLLIN); err != nil {
				return total, err
			}
			continue
		}
		for off := 0; off < n; {
			m, werr := dst.Write(buf[off:n])
			off += max(m, 0)
			total += int64(max(m, 0))
			if !fromPipe && errors.Is(werr, unix.EAGAIN) {
				if err := waitPipe(dst.(*os.File), unix.POLLOUT); err != nil {
					return total, err
				}
				continue
			}
			if werr != nil {
				return total, werr
			}
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// waitPipe waits until the pipe can be read or written (events), for at
// most streamIdle.
func waitPipe(f *os.File, events int16) error {
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: events}}
	for {
		n, err := unix.Poll(fds, int(streamIdle/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("the caller's pipe stayed idle for %v", streamIdle)
		}
		return nil
	}
}

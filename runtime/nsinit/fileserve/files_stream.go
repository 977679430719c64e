package fileserve

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// streamIdle is how long a caller's pipe may stay empty (or full) before
// a streamed read or write gives up: the init's thread is not the
// caller's to hold. (A variable for the tests.)
var streamIdle = 30 * time.Second

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

// streamMinRate is the least a stream must move on average, once it has
// run for streamGrace: a caller that trickles a byte at a time holds the
// init's thread no longer than one that stops.
const (
	streamMinRate = 256 << 10 // bytes a second
	streamGrace   = time.Minute
)

// streamCopy copies between a regular file and the caller's pipe (made
// non-blocking by callersPipe) until the end (fromPipe: the pipe's end
// of file; otherwise src's), waiting for the pipe at most streamIdle at
// a time. The pipe is read and written by raw system calls: an *os.File
// of a descriptor that was non-blocking when it came is in Go's poller,
// whose waits have no deadline.
func streamCopy(dst io.Writer, src io.Reader, fromPipe bool) (int64, error) {
	buf := make([]byte, 256<<10)
	var total int64
	start := time.Now()
	slow := func() error {
		if t := time.Since(start); t > streamGrace && float64(total) < t.Seconds()*streamMinRate {
			return fmt.Errorf("the caller's pipe moved %d bytes in %v, under %d KiB/s", total, t.Round(time.Second), streamMinRate>>10)
		}
		return nil
	}
	for {
		var n int
		var err error
		if fromPipe {
			fd := int(src.(*os.File).Fd())
			n, err = unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				if err := cmp.Or(waitPipe(fd, unix.POLLIN), slow()); err != nil {
					return total, err
				}
				continue
			}
			if err == nil && n == 0 {
				err = io.EOF
			}
		} else {
			n, err = src.Read(buf)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return total, err
		}
		for off := 0; off < n; {
			var m int
			var werr error
			if fromPipe {
				m, werr = dst.Write(buf[off:n])
			} else {
				fd := int(dst.(*os.File).Fd())
				m, werr = unix.Write(fd, buf[off:n])
				if errors.Is(werr, unix.EAGAIN) {
					if err := cmp.Or(waitPipe(fd, unix.POLLOUT), slow()); err != nil {
						return total, err
					}
					continue
				}
			}
			off += max(m, 0)
			total += int64(max(m, 0))
			if werr != nil {
				return total, werr
			}
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err := slow(); err != nil {
			return total, err
		}
	}
}

// waitPipe waits until the pipe fd can be read or written (events), for
// at most streamIdle.
func waitPipe(fd int, events int16) error {
	fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
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

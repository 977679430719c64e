package nsinit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrStdio: a descriptor offered as a command's stdin, stdout or stderr
// is of a kind a sandbox must not get; the message names it and says why.
var ErrStdio = errors.New("not allowed as stdio")

// Filesystem magics of descriptors that are no file: anon_inode carries
// eventfd, signalfd, timerfd, epoll, inotify, io_uring, userfaultfd,
// perf_event and bpf objects (and pidfds before Linux 6.9); pidfs has
// pidfds since; nsfs has namespaces. Each is a handle on a kernel object
// of the caller's (its processes, its namespaces, its memory), not a
// stream.
const (
	anonInodeMagic = 0x09041934
	pidfsMagic     = 0x50494446
	nsfsMagic      = 0x6e736673
)

var stdioNames = []string{"stdin (descriptor 0)", "stdout (descriptor 1)", "stderr (descriptor 2)"}

// CheckStdio refuses, as a command's stdio, what would give the sandbox
// more than a stream: a directory or an O_PATH descriptor (openat reaches
// the caller's filesystem through them), a terminal (what the command
// leaves running could read the caller's keystrokes, or type into the
// caller's shell with TIOCSTI, after the command ended), and anonymous
// inodes, pidfds and namespaces (handles on the caller's kernel objects).
// The error names the descriptor and wraps ErrStdio.
func CheckStdio(files []*os.File) error {
	for i, f := range files {
		name := "descriptor " + strconv.Itoa(i)
		if i < len(stdioNames) {
			name = stdioNames[i]
		}
		if err := checkOne(int(f.Fd())); err != nil {
			return fmt.Errorf("%s %w", name, err)
		}
	}
	return nil
}

func checkOne(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("cannot be read: %w", err)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("cannot be read: %w", err)
	}
	if flags&unix.O_PATH != 0 {
		return fmt.Errorf("is an O_PATH descriptor: %w", ErrStdio)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("is a directory: %w", ErrStdio)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("cannot be read: %w", err)
	}
	link, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	switch {
	case fs.Type == anonInodeMagic || strings.HasPrefix(link, "anon_inode:"):
		return fmt.Errorf("is an anonymous inode (%s), not a pipe, socket or file: %w", link, ErrStdio)
	case fs.Type == pidfsMagic:
		return fmt.Errorf("is a pidfd (%s), not a pipe, socket or file: %w", link, ErrStdio)
	case fs.Type == nsfsMagic:
		return fmt.Errorf("is a namespace (%s), not a pipe, socket or file: %w", link, ErrStdio)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFCHR && isTerminal(fd) {
		return fmt.Errorf("is a terminal: a sandbox gets a terminal of its own (ExecTerminal; sandboxctl exec does this for you): %w", ErrStdio)
	}
	return nil
}

// isTerminal is isatty(3), and more: a terminal hung up (a pty slave
// whose master closed) answers EIO, and is a terminal still.
func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil || err == unix.EIO
}
